// Package etcdtest runs package etcdlock against a real 3-member etcd
// cluster: the conformance suite of lock/locktest, fault tests (leader
// killed, holder partitioned, release reply lost) and benchmarks against
// etcd's own concurrency.Mutex.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// testTTL is short so that loss tests finish quickly.
const testTTL = 2 * time.Second

// startCluster starts a 3-member etcd cluster with the provider selected by
// FENCELOCK_PROVIDER; teardown is registered with t.Cleanup.
func startCluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	return cluster.FromEnv(t).Start(t, cluster.Etcd)
}

// newClient returns a client of endpoints, closed in t.Cleanup.
func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	return testutil.EtcdClient(t, clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
}

// newLocker returns a Locker on client with a short TTL (unless opts set
// another), closed in t.Cleanup.
func newLocker(t testing.TB, client *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	opts = append([]etcdlock.Option{etcdlock.WithTTL(testTTL)}, opts...)
	l, err := etcdlock.New(client, opts...)
	if err != nil {
		t.Fatalf("etcdlock.New() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// records lists the keys under the record prefix of name.
func records(t testing.TB, client *clientv3.Client, l *etcdlock.Locker, name string) []string {
	t.Helper()
	pfx, err := testutil.RecordPrefix(l, name)
	if err != nil {
		t.Fatalf("RecordPrefix(%q) = %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}
