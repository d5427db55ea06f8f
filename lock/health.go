package lock

import "context"

// HealthChecker is implemented by Lockers that can say whether they have a
// live session right now, cheaply enough for a readiness probe. Like
// [Observer] it is found by a type assertion on a Locker; both backends
// and locktest.Memory implement it. Use it for a readiness probe (see the
// example), not a liveness probe: the Locker recovers from a lost session
// on its own, so a restart only adds downtime.
type HealthChecker interface {
	// Healthy returns nil at once, without any request, while the Locker
	// has a session it trusts: one whose leases would still be held. When
	// it has none (a Locker that never acquired on etcd, whose session is
	// opened by the first call; a session lost and not yet replaced), it
	// waits for one as an Acquire would, opening it if the backend opens
	// sessions on demand, until ctx ends: it then returns an error
	// wrapping ctx's error. A closed Locker gives an error wrapping
	// [ErrClosed]; a server that refuses the client one wrapping
	// [ErrPermission]. A nil ctx is an error wrapping [ErrInvalidConfig].
	Healthy(ctx context.Context) error
}
