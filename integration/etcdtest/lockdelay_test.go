package etcdtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock/locktest"
)

// testLockDelay is the lock-delay of the lock-delay tests: longer than
// the spread of a handoff, shorter than the TTL-driven waits around it.
const testLockDelay = 1500 * time.Millisecond

// TestLockDelay: the lock of a holder that was SIGKILLed (its record
// dropped at its session lease's expiry), revoked, or whose Locker was
// closed is granted no sooner than the lock-delay after a watch on the
// record's key, on each member, received the record's deletion; a
// cleanly released one is granted at once (testutil.RunLockDelay).
func TestLockDelay(t *testing.T) {
	c := startCluster(t)
	prefix := "lockdelay-" + testutil.UniqueName(t)
	url := "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix +
		"?ttl=2s&lock_delay=" + testLockDelay.String()
	testutil.RunLockDelay(t, url, testLockDelay, "TestLockDelayHolderProcess",
		markerCounter(newClient(t, c.Endpoints()), prefix), removalWatch(t, c.Endpoints(), prefix))
}

// removalWatch returns a testutil.WatchRemoval for the records under
// prefix. It finds the record whose create revision is the token and
// watches its key, through a client of each member of its own, from the
// revision after that read (so no event of the key can be missed), and
// returns once every member has created its watch. A member sends a
// watch event once it has applied the deletion, so the first event to
// arrive, from whichever member applied it first, follows the removal by
// no more than its delivery.
func removalWatch(t *testing.T, endpoints []string, prefix string) testutil.WatchRemoval {
	clients := make([]*clientv3.Client, len(endpoints))
	for i, ep := range endpoints {
		clients[i] = newClient(t, []string{ep})
	}
	return func(t *testing.T, name string, tok fencing.Token) <-chan testutil.Removal {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		t.Cleanup(func() { cancel(); wg.Wait() })
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		resp, err := clients[0].Get(rctx, prefix+"/"+name+"/#", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("Get(records of %q) = %v", name, err)
		}
		key := ""
		for _, kv := range resp.Kvs {
			if kv.CreateRevision == int64(tok) {
				key = string(kv.Key)
			}
		}
		if key == "" {
			t.Fatalf("no record of %q has create revision %d", name, tok)
		}
		removed, report := testutil.FirstRemoval(len(clients))
		for i, cl := range clients {
			wch := cl.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithCreatedNotify())
			select {
			case wr := <-wch:
				if !wr.Created {
					t.Fatalf("watch of %s on %s: first response %+v; want its creation", key, endpoints[i], wr)
				}
			case <-rctx.Done():
				t.Fatalf("watch of %s on %s: not created: %v", key, endpoints[i], rctx.Err())
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for wr := range wch {
					for _, ev := range wr.Events {
						if ev.Type == mvccpb.DELETE {
							report(fmt.Sprintf("deleted at revision %d, first seen on %s", ev.Kv.ModRevision, endpoints[i]), true)
							return
						}
					}
				}
				report("", false)
			}()
		}
		return removed
	}
}

// TestCancelledCalls: an Acquire or TryAcquire cancelled in flight, with
// and without a lock-delay, leaves no record and no marker once it has
// returned, so that another Locker's TryAcquire right after is granted
// at once.
func TestCancelledCalls(t *testing.T) {
	c := startCluster(t)
	prefix := "cancelled-" + testutil.UniqueName(t)
	url := "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix + "?ttl=2s"
	markers := markerCounter(newClient(t, c.Endpoints()), prefix)
	t.Run("no-lock-delay", func(t *testing.T) { testutil.RunCancelledCalls(t, url, 0, markers) })
	t.Run("lock-delay", func(t *testing.T) {
		testutil.RunCancelledCalls(t, url+"&lock_delay="+time.Second.String(), time.Second, markers)
	})
}

// markerCounter returns a function that counts the lock-delay markers of
// a name under prefix. The markers' layout is etcdlock's: under the
// reserved "#delay/" segment of the prefix.
func markerCounter(admin *clientv3.Client, prefix string) func(t *testing.T, name string) int {
	return func(t *testing.T, name string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := admin.Get(ctx, prefix+"/#delay/"+name+"/#", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("Get(markers of %q) = %v", name, err)
		}
		return int(resp.Count)
	}
}

// TestLockDelayHolderProcess is the holder process of TestLockDelay; run
// on its own it does nothing.
func TestLockDelayHolderProcess(t *testing.T) { testutil.LockDelayHolder(t) }

// TestEtcdConformanceLockDelay runs the conformance suite with a short
// lock-delay on every Locker: the suite's checks hold with markers written
// and read at every grant (its losses and expiries only delay the next
// grant by 50ms).
func TestEtcdConformanceLockDelay(t *testing.T) {
	c := startCluster(t)
	h := &harness{endpoints: c.Endpoints(), admin: newClient(t, c.Endpoints()), prefix: "conformance-lockdelay", records: "/#",
		opts: []etcdlock.Option{etcdlock.WithLockDelay(50 * time.Millisecond)}, gates: map[*etcdlock.Locker]*testutil.Gate{}}
	locktest.TestLockerWith(t, h, locktest.Options{RequireOptional: true})
}
