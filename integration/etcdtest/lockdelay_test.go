package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock/locktest"
)

// testLockDelay is the lock-delay of the lock-delay tests: longer than
// the spread of a handoff, shorter than the TTL-driven waits around it.
const testLockDelay = 1500 * time.Millisecond

// TestLockDelay: a SIGKILLed holder's lock is granted no sooner than the
// lock-delay after the server dropped its record (at its session lease's
// expiry), a revoked holder's no sooner than the lock-delay after Revoke
// was called; a cleanly released one is granted at once.
func TestLockDelay(t *testing.T) {
	c := startCluster(t)
	prefix := "lockdelay-" + testutil.UniqueName(t)
	url := "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix +
		"?ttl=2s&lock_delay=" + testLockDelay.String()
	testutil.RunLockDelay(t, url, testLockDelay, "TestLockDelayHolderProcess", markerCounter(newClient(t, c.Endpoints()), prefix))
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
	h := &harness{endpoints: c.Endpoints(), admin: newClient(t, c.Endpoints()), prefix: "conformance-lockdelay",
		opts: []etcdlock.Option{etcdlock.WithLockDelay(50 * time.Millisecond)}, gates: map[*etcdlock.Locker]*testutil.Gate{}}
	locktest.TestLockerWith(t, h, locktest.Options{RequireOptional: true})
}
