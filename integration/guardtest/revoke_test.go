package guardtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// revokeTrials is how many revocations each backend's test times.
const revokeTrials = 5

// TestRevokeGuard revokes a holder that has stopped (it writes again only
// after its successor did, as a paused process would) and checks that a
// fencing.Guard refuses its late write because the successor's token is
// higher; the revoked lease ends with ErrLost and a cause saying so. Each
// trial times the revocation, from the Revoke call to the waiter's grant.
func TestRevokeGuard(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		c := cluster.FromEnv(t).Start(t, cluster.Etcd)
		cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
		testRevokeGuard(t, func(id string) lock.Locker { return newEtcdLocker(t, cli, id) })
	})
	t.Run("zookeeper", func(t *testing.T) {
		c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
		root := "/guardtest-revoke-" + testutil.UniqueName(t)
		testRevokeGuard(t, func(id string) lock.Locker { return newZKLocker(t, c.Endpoints(), root, id) })
	})
}

func testRevokeGuard(t *testing.T, newLocker func(identity string) lock.Locker) {
	holder, waiter, admin := newLocker("holder"), newLocker("waiter"), newLocker("admin")
	rv, ok := admin.(lock.Revoker)
	if !ok {
		t.Fatalf("%T is not a lock.Revoker", admin)
	}
	guard, err := fencing.NewGuard(revokeTrials)
	if err != nil {
		t.Fatalf("NewGuard() = %v", err)
	}
	var latencies []time.Duration
	for trial := range revokeTrials {
		ctx := testutil.Context(t, 30*time.Second)
		name := fmt.Sprintf("%s-%d", testutil.UniqueName(t), trial)
		var data []string
		write := func(who string, tok fencing.Token) error {
			return guard.Apply(name, tok, func() error { data = append(data, who); return nil })
		}

		old, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if err := write("holder", old.Token()); err != nil {
			t.Fatalf("holder's write while it holds = %v; want nil", err)
		}
		got := make(chan lock.Lease, 1)
		go func() {
			le, err := waiter.Acquire(ctx, name)
			if err != nil {
				t.Errorf("waiter's Acquire() = %v", err)
			}
			got <- le
		}()
		waitQueued(t, admin, name, 2)

		start := time.Now()
		if err := rv.Revoke(ctx, name, old.Token()); err != nil {
			t.Fatalf("Revoke(%d) = %v; want nil", old.Token(), err)
		}
		next := <-got
		latencies = append(latencies, time.Since(start))
		if next == nil {
			t.FailNow()
		}
		if err := write("waiter", next.Token()); err != nil {
			t.Fatalf("new holder's write = %v; want nil", err)
		}
		// The revoked holder wakes up and writes with its old token.
		err = write("holder, late", old.Token())
		var stale *fencing.StaleTokenError
		if !errors.As(err, &stale) || !errors.Is(err, fencing.ErrStaleToken) || stale.Highest != next.Token() {
			t.Errorf("revoked holder's late write = %v; want a *StaleTokenError with Highest %d", err, next.Token())
		}
		if want := []string{"holder", "waiter"}; !slices.Equal(data, want) {
			t.Errorf("writes applied = %q; want %q", data, want)
		}
		select {
		case <-old.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("revoked lease's Done() not closed within 10s")
		}
		if err := old.Err(); !errors.Is(err, lock.ErrLost) || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("revoked lease's Err() = %v; want an error wrapping %v that says revoked", err, lock.ErrLost)
		}
		if err := next.Release(ctx); err != nil {
			t.Errorf("Release() of the new holder = %v", err)
		}
	}
	slices.Sort(latencies)
	t.Logf("Revoke call to the next grant, %d trials: min %v, median %v, max %v (all %v)",
		len(latencies), latencies[0], latencies[len(latencies)/2], latencies[len(latencies)-1], latencies)
}

// waitQueued waits until name's queue has n requests.
func waitQueued(t *testing.T, l lock.Locker, name string, n int) {
	t.Helper()
	ql, ok := l.(lock.QueueLister)
	if !ok {
		t.Fatalf("%T is not a lock.QueueLister", l)
	}
	ctx := testutil.Context(t, 10*time.Second)
	for {
		es, err := ql.Queue(ctx, name)
		if err != nil {
			t.Fatalf("Queue(%q) = %v", name, err)
		}
		if len(es) == n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
