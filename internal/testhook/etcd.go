package testhook

// Hooks into etcdlock, set by its init function.
var (
	// EtcdSessionLeaseID returns the ID of the etcd lease behind a
	// *etcdlock.Locker's current session, and false when it has no live
	// session. Revoking that lease with any client expires the session on
	// the server.
	EtcdSessionLeaseID func(locker any) (int64, bool)

	// EtcdRecordPrefix returns the key prefix under which a
	// *etcdlock.Locker keeps the records of name.
	EtcdRecordPrefix func(locker any, name string) (string, error)
)
