package zktest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock/locktest"
	"github.com/fencelock/fencelock/zklock"
)

// testLockDelay is the lock-delay of the lock-delay tests: longer than
// the spread of a handoff, shorter than the session-timeout-driven waits
// around it.
const testLockDelay = 1500 * time.Millisecond

// TestLockDelay: a SIGKILLed holder's lock is granted no sooner than the
// lock-delay after the server dropped its znode (at its session's
// expiry), a revoked holder's no sooner than the lock-delay after Revoke
// was called; a cleanly released one is granted at once.
func TestLockDelay(t *testing.T) {
	c := startEnsemble(t)
	root := uniqueRoot(t)
	url := "zk://" + strings.Join(c.Endpoints(), ",") + root +
		"?session_timeout=" + sessionTimeout.String() + "&lock_delay=" + testLockDelay.String()
	testutil.RunLockDelay(t, url, testLockDelay, "TestLockDelayHolderProcess", markerCounter(newAdmin(t, c.Endpoints()), root))
}

// TestCancelledCalls: an Acquire or TryAcquire cancelled in flight, with
// and without a lock-delay, leaves no znode and no marker once it has
// returned, so that another Locker's TryAcquire right after is granted
// at once.
func TestCancelledCalls(t *testing.T) {
	c := startEnsemble(t)
	root := uniqueRoot(t)
	url := "zk://" + strings.Join(c.Endpoints(), ",") + root + "?session_timeout=" + sessionTimeout.String()
	markers := markerCounter(newAdmin(t, c.Endpoints()), root)
	t.Run("no-lock-delay", func(t *testing.T) { testutil.RunCancelledCalls(t, url, 0, markers) })
	t.Run("lock-delay", func(t *testing.T) {
		testutil.RunCancelledCalls(t, url+"&lock_delay="+time.Second.String(), time.Second, markers)
	})
}

// markerCounter returns a function that counts the lock-delay markers of
// a name under root. The markers' layout is zklock's: persistent children
// of the lock's parent named "~delay~" and the protection prefix of their
// lock znode.
func markerCounter(admin *admin, root string) func(t *testing.T, name string) int {
	return func(t *testing.T, name string) int {
		t.Helper()
		admin.sync(t, root+"/"+name)
		kids, _, err := admin.conn.Children(root + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			return 0
		}
		if err != nil {
			t.Fatalf("Children(%s/%s) = %v", root, name, err)
		}
		n := 0
		for _, k := range kids {
			if strings.HasPrefix(k, "~delay~") {
				n++
			}
		}
		return n
	}
}

// TestLockDelayHolderProcess is the holder process of TestLockDelay; run
// on its own it does nothing.
func TestLockDelayHolderProcess(t *testing.T) { testutil.LockDelayHolder(t) }

// TestZKConformanceLockDelay runs the conformance suite with a short
// lock-delay on every Locker: the suite's checks hold with markers written
// and read at every grant (its losses and expiries only delay the next
// grant by 50ms).
func TestZKConformanceLockDelay(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	h.opts = []zklock.Option{zklock.WithLockDelay(50 * time.Millisecond)}
	locktest.TestLockerWith(t, h, locktest.Options{ObserveMaySkip: true, RequireOptional: true})
}
