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
// expiry); a cleanly released one is granted at once.
func TestLockDelay(t *testing.T) {
	c := startCluster(t)
	prefix := "lockdelay-" + testutil.UniqueName(t)
	url := "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix +
		"?ttl=2s&lock_delay=" + testLockDelay.String()
	admin := newClient(t, c.Endpoints())
	// The markers' layout is etcdlock's: under the reserved "#delay/"
	// segment of the prefix.
	markers := func(t *testing.T, name string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := admin.Get(ctx, prefix+"/#delay/"+name+"/#", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("Get(markers of %q) = %v", name, err)
		}
		return int(resp.Count)
	}
	testutil.RunLockDelay(t, url, testLockDelay, "TestLockDelayHolderProcess", markers)
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
