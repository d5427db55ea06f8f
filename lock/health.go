package lock

import "context"

// HealthChecker is implemented by Lockers that can say whether they have a
// live session right now, cheaply enough for a readiness probe. Like
// [Observer] it is found by a type assertion on a Locker; both backends
// and locktest.Memory implement it.
//
// # Readiness probes
//
// Serve it on the probe's endpoint with a short deadline:
//
//	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
//		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
//		defer cancel()
//		if err := locker.(lock.HealthChecker).Healthy(ctx); err != nil {
//			http.Error(w, err.Error(), http.StatusServiceUnavailable)
//			return
//		}
//		fmt.Fprintln(w, "ok")
//	})
//
// and point a Kubernetes readinessProbe (httpGet, path /readyz,
// periodSeconds 5, timeoutSeconds 2) at it. Use it for readiness, not
// liveness: a lost session is something the Locker recovers from on its
// own (the next call opens a new one), so restarting the container for it
// only adds downtime. A pod that must not serve without its lock should
// watch its lease's Done channel instead.
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
