package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// harness gives the conformance suite Lockers, each with its own client, on
// one cluster, and implements the suite's optional interfaces.
type harness struct {
	endpoints []string
	admin     *clientv3.Client
	prefix    string
}

var (
	_ locktest.Harness        = harness{}
	_ locktest.SessionExpirer = harness{}
	_ locktest.RecordLister   = harness{}
)

func (h harness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	return newLocker(t, newClient(t, h.endpoints), etcdlock.WithPrefix(h.prefix), etcdlock.WithIdentity(identity))
}

// ExpireSession revokes the Locker's session lease with another client, as
// the server does when the lease expires.
func (h harness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	id, ok := l.(*etcdlock.Locker).SessionLeaseID()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke(%x) = %v", int64(id), err)
	}
}

func (h harness) Records(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pfx := h.prefix + "/" + name + "/#"
	resp, err := h.admin.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

func TestEtcdConformance(t *testing.T) {
	c := startCluster(t)
	h := harness{endpoints: c.Endpoints(), admin: newClient(t, c.Endpoints()), prefix: "conformance"}
	locktest.TestLocker(t, h)
}
