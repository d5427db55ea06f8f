package testhook

// Hooks into zklock, set by its init function.
var (
	// ZKRoot returns the znode under which a *zklock.Locker's locks live
	// ("" for a nil Locker).
	ZKRoot func(locker any) string

	// ZKSessionID returns the id of the session a *zklock.Locker currently
	// trusts, or 0 while it has none.
	ZKSessionID func(locker any) int64

	// ZKLeaseSessionID returns the id of the session that owns a
	// *zklock.Lease's znode (0 for a nil or zero Lease).
	ZKLeaseSessionID func(lease any) int64
)
