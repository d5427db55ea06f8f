package testutil

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/lock"
)

// SessionLeaseID returns the ID of the etcd lease behind l's current
// session, and false when l has no live session. Revoking it with any
// client expires the session on the server.
func SessionLeaseID(l *etcdlock.Locker) (clientv3.LeaseID, bool) {
	return l.SessionLease()
}

// RecordPrefix returns the key prefix under which l keeps name's records:
// the Locker's prefix, the name, then "/#".
func RecordPrefix(l *etcdlock.Locker, name string) (string, error) {
	if err := lock.ValidateName(name); err != nil {
		return "", fmt.Errorf("record prefix: %w", err)
	}
	pfx := l.Prefix()
	if pfx == "" {
		return "", fmt.Errorf("record prefix: %w: not a usable Locker", lock.ErrInvalidConfig)
	}
	return pfx + name + "/#", nil
}
