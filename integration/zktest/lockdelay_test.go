package zktest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock/locktest"
	"github.com/fencelock/fencelock/zklock"
)

// testLockDelay is the lock-delay of the lock-delay tests: longer than
// the spread of a handoff, shorter than the session-timeout-driven waits
// around it.
const testLockDelay = 1500 * time.Millisecond

// TestLockDelay: the lock of a holder that was SIGKILLed (its znode
// dropped at its session's expiry), revoked, or whose Locker was closed
// is granted no sooner than the lock-delay after an exists watch on the
// znode, set on each server, received its NodeDeleted event; a cleanly
// released one is granted at once (testutil.RunLockDelay).
func TestLockDelay(t *testing.T) {
	c := startEnsemble(t)
	root := uniqueRoot(t)
	url := "zk://" + strings.Join(c.Endpoints(), ",") + root +
		"?session_timeout=" + sessionTimeout.String() + "&lock_delay=" + testLockDelay.String()
	testutil.RunLockDelay(t, url, testLockDelay, "TestLockDelayHolderProcess",
		markerCounter(newAdmin(t, c.Endpoints()), root), removalWatch(t, c.Endpoints(), root))
}

// removalWatch returns a testutil.WatchRemoval for the locks under root.
// It finds the lock znode whose czxid is the token and sets an exists
// watch on it through a connection to each server of its own, each after
// a read barrier, so that the znode must still be there. A server fires
// a watch once it has applied the deletion, so the first NodeDeleted to
// arrive, from whichever server applied it first, follows the removal by
// no more than its delivery.
func removalWatch(t *testing.T, servers []string, root string) testutil.WatchRemoval {
	admins := make([]*admin, len(servers))
	for i, s := range servers {
		admins[i] = newAdmin(t, []string{s})
	}
	return func(t *testing.T, name string, tok fencing.Token) <-chan testutil.Removal {
		t.Helper()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		t.Cleanup(func() { close(stop); wg.Wait() })
		path := ""
		for _, k := range admins[0].records(t, root, name) {
			p := root + "/" + name + "/" + k
			_, st, err := admins[0].conn.Get(p)
			if err != nil {
				t.Fatalf("Get(%s) = %v", p, err)
			}
			if st.Czxid == int64(tok) {
				path = p
			}
		}
		if path == "" {
			t.Fatalf("no lock znode of %q has czxid %d", name, tok)
		}
		removed, report := testutil.FirstRemoval(len(admins))
		for i, a := range admins {
			a.sync(t, path)
			ok, _, ev, err := a.conn.ExistsW(path)
			if err != nil || !ok {
				t.Fatalf("ExistsW(%s) on %s = %t, %v; want the znode there", path, servers[i], ok, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case e := <-ev:
					if e.Type == zk.EventNodeDeleted {
						report(fmt.Sprintf("NodeDeleted %s, first seen on %s", e.Path, servers[i]), true)
						return
					}
				case <-stop:
				}
				report("", false)
			}()
		}
		return removed
	}
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
