package electiontest

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// prefix is the etcd key prefix and ZooKeeper root of every Locker here.
const prefix = "electiontest"

// sessionTTL is the etcd lease TTL and the ZooKeeper session timeout: the
// longest a killed or partitioned leader can keep the lock.
const sessionTTL = 2 * time.Second

// backend is one kind of real cluster and how to reach it.
type backend struct {
	kind   cluster.Kind
	scheme string
	// ttlKey is the URL query key that sets sessionTTL.
	ttlKey string
	// newRecords returns a function that counts the records (holder and
	// waiters) of a lock, talking to the cluster at eps directly.
	newRecords func(t *testing.T, eps []string) func(name string) int
}

var backends = []backend{
	{kind: cluster.Etcd, scheme: "etcd", ttlKey: "ttl", newRecords: etcdRecords},
	{kind: cluster.ZooKeeper, scheme: "zk", ttlKey: "session_timeout", newRecords: zkRecords},
}

// env is a running cluster of one backend.
type env struct {
	backend
	c       *cluster.Cluster
	records func(name string) int
}

// forEachBackend starts a cluster of each backend and runs f on it as a
// subtest named after the backend.
func forEachBackend(t *testing.T, f func(t *testing.T, env *env)) {
	for _, b := range backends {
		t.Run(string(b.kind), func(t *testing.T) {
			if !slices.Contains(lock.Schemes(), b.scheme) {
				// The backend's package registers its scheme; until it
				// exists the test cannot run.
				if cluster.InCI() {
					t.Fatalf("no lock driver registered for %q", b.scheme)
				}
				t.Skipf("no lock driver registered for %q", b.scheme)
			}
			c := cluster.FromEnv(t).Start(t, b.kind)
			e := &env{backend: b, c: c}
			e.records = b.newRecords(t, c.Endpoints())
			f(t, e)
		})
	}
}

// url returns the lock.Open URL of a Locker with identity id on eps.
func (e *env) url(eps []string, id string) string {
	q := url.Values{e.ttlKey: {sessionTTL.String()}, "identity": {id}}
	return fmt.Sprintf("%s://%s/%s?%s", e.scheme, strings.Join(eps, ","), prefix, q.Encode())
}

// open returns a Locker with identity id on eps (default: the cluster's
// endpoints), closed in t.Cleanup.
func (e *env) open(t *testing.T, id string, eps ...string) lock.Locker {
	t.Helper()
	if len(eps) == 0 {
		eps = e.c.Endpoints()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, e.url(eps, id))
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", e.url(eps, id), err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitRecords polls until name has n records.
func (e *env) waitRecords(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := e.records(name)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d records; want %d", name, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func etcdRecords(t *testing.T, eps []string) func(name string) int {
	t.Helper()
	cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	return func(name string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, prefix+"/"+name+"/#", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("count records of %q: %v", name, err)
		}
		return int(resp.Count)
	}
}
