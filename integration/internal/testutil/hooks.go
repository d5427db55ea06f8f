package testutil

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// SessionLeaseID returns the ID of the etcd lease behind l's current
// session, and false when l has no live session. Revoking it with any
// client expires the session on the server.
func SessionLeaseID(l *etcdlock.Locker) (clientv3.LeaseID, bool) {
	id, ok := testhook.EtcdSessionLeaseID(l)
	return clientv3.LeaseID(id), ok
}

// RecordPrefix returns the key prefix under which l keeps name's records.
func RecordPrefix(l *etcdlock.Locker, name string) (string, error) {
	return testhook.EtcdRecordPrefix(l, name)
}
