package lock

import "context"

// HealthChecker is implemented by Lockers that can say cheaply whether
// they have a live session, for a readiness probe (not a liveness probe:
// a Locker recovers from a lost session on its own). Like [Observer] it
// is found by a type assertion.
type HealthChecker interface {
	// Healthy returns nil at once, without a request, while the Locker has
	// a session it trusts. Without one (never opened, or lost and not yet
	// replaced) it waits for one as Acquire would, opening it if the
	// backend opens sessions on demand, until ctx ends (an error wrapping
	// ctx's). A closed Locker gives [ErrClosed], a refusal [ErrPermission],
	// a nil ctx [ErrInvalidConfig], each wrapped.
	Healthy(ctx context.Context) error
}
