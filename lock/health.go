package lock

import "context"

// HealthChecker is implemented by Lockers that can say cheaply whether
// they have a live session, for a readiness probe (not a liveness probe:
// a Locker recovers from a lost session on its own).
type HealthChecker interface {
	// Healthy returns nil at once, without a request, while the Locker has
	// a session it trusts. Without one it waits for one as Acquire would
	// (opening it if the backend opens sessions on demand) until ctx ends.
	// A closed Locker gives [ErrClosed], a refusal [ErrPermission], a nil
	// ctx [ErrInvalidConfig], each wrapped.
	Healthy(ctx context.Context) error
}
