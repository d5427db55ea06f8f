package interoptest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKHolderEnds ends a holder without a release — a foreign client
// killed with SIGKILL or cut off by its proxies, a fencelock Locker cut
// off by its dialer or its process killed — while a client of the other kind waits, and checks
// that the waiter is granted only once the servers dropped the holder's
// record at its session's expiry (handoff), and that nothing is left
// once the rest closed.
func TestZKHolderEnds(t *testing.T) {
	e := newEnv(t)
	killed := []struct {
		recipe foreign.Recipe
		layout zklock.Layout
	}{
		{foreign.CuratorMutex, zklock.LayoutCurator},
		{foreign.CuratorWrite, zklock.LayoutCuratorReadWrite},
		{foreign.CuratorLatch, zklock.LayoutCuratorLatch},
		{foreign.KazooLock, zklock.LayoutCurator},
	}
	for _, k := range killed {
		t.Run(k.recipe.String()+"-killed", func(t *testing.T) {
			t.Parallel()
			name, path := e.dir(t)
			holder := foreign.Fleet(t, e.c, k.recipe, path, 1, foreign.Options{})[0]
			waiter := e.lockers(t, k.layout, name, 1, false)[0]
			e.handoff(t, path, holder, waiter, func(t *testing.T) {
				if err := holder.Kill(); err != nil {
					t.Fatal(err)
				}
			})
			closeLockers(t, waiter)
			e.checkEmpty(t, path)
		})
	}
	t.Run("curator-mutex-partitioned", func(t *testing.T) {
		t.Parallel()
		foreignPartitioned(t, e)
	})
	t.Run("fencelock-partitioned", func(t *testing.T) {
		t.Parallel()
		fencelockPartitioned(t, e)
	})
	t.Run("fencelock-killed", func(t *testing.T) {
		t.Parallel()
		fencelockKilled(t, e)
	})
}

// foreignPartitioned: a Curator holder cut off by its proxies (a
// blackhole: its pings are held, not refused) hands over to a fencelock
// waiter once its session expired.
func foreignPartitioned(t *testing.T, e *env) {
	name, path := e.dir(t)
	holder := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 1, foreign.Options{Proxied: true})[0]
	waiter := e.lockers(t, zklock.LayoutCurator, name, 1, false)[0]
	e.handoff(t, path, holder, waiter, func(*testing.T) { holder.Proxies().Blackhole() })
	if st := holder.Proxies().Stats(); st.HeldWhileBlackholed == 0 {
		t.Errorf("the proxies held nothing of the cut-off holder's traffic (%+v); want its pings held", st)
	}
	closeLockers(t, waiter)
	holder.Proxies().Heal()
	if err := holder.Close(ctxOf(t)); err != nil {
		t.Errorf("Close(%s) after its session expired = %v", holder.Name(), err)
	}
	e.checkEmpty(t, path)
}

// fencelockPartitioned: a fencelock holder cut off by its dialer loses
// its lease, and hands over to a Curator waiter once its session expired.
func fencelockPartitioned(t *testing.T, e *env) {
	name, path := e.dir(t)
	var gate testutil.Gate
	holder := &locker{name: "fencelock-cut", lock: name,
		l: e.dial(t, zklock.LayoutCurator, zklock.WithDialer(gate.ZKDialer()))}
	waiter := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 1, foreign.Options{})[0]
	e.handoff(t, path, holder, waiter, func(*testing.T) { gate.Cut() })
	le := holder.lease
	testutil.Recv(t, le.Done(), 2*sessionTimeout, "the cut-off holder's lease to end")
	if err := le.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("the cut-off holder's lease: Err() = %v; want %v", err, lock.ErrLost)
	}
	if err := waiter.Unlock(ctxOf(t)); err != nil {
		t.Errorf("Unlock(%s) = %v", waiter.Name(), err)
	}
	gate.Heal()
	closeLockers(t, holder)
	e.closeAll(t, path, waiter)
}

// removalSlack is how much earlier than the first observer's report of
// the removal a grant may come: both follow the same deletion, and the
// observers' goroutines may be scheduled late on a loaded machine. A
// grant that did not wait for the deletion would come a session timeout
// too early.
const removalSlack = 500 * time.Millisecond

// handoff has holder take the lock in path, queues waiter behind it, ends
// the holder with end, and checks that the waiter waited while the holder
// lived, that the servers removed the holder's record no sooner than a
// third of the session timeout after end (its session expired; it was not
// released), and that the waiter was granted only once they had, with a
// higher token. The waiter still holds when handoff returns.
func (e *env) handoff(t *testing.T, path string, holder, waiter fleet.Contender, end func(t *testing.T)) {
	t.Helper()
	ctx := ctxOf(t)
	tok, err := holder.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(%s) = %v", holder.Name(), err)
	}
	removed := e.watchRemoval(t, path, tok)
	granted := lockAsync(ctx, waiter)
	testutil.Eventually(t, 10*time.Second, "the waiter's record", func() bool { return len(e.children(t, path)) == 2 })
	select {
	case g := <-granted:
		t.Fatalf("%s granted (token %d, %v) while %s holds", waiter.Name(), g.tok, g.err, holder.Name())
	case <-time.After(time.Second):
	}
	ended := time.Now()
	end(t)
	rm := testutil.Recv(t, removed, 4*sessionTimeout, "the observers' report of the holder's removal")
	if rm.At.IsZero() {
		t.Fatalf("no observer saw %s's record removed", holder.Name())
	}
	g := testutil.Recv(t, granted, 4*sessionTimeout, "the waiter's grant")
	if g.err != nil {
		t.Fatalf("Lock(%s) = %v", waiter.Name(), g.err)
	}
	t.Logf("%s ended; record removed after %v (%s); %s granted %v after the removal, token %d after %d",
		holder.Name(), rm.At.Sub(ended), rm.Event, waiter.Name(), g.at.Sub(rm.At), g.tok, tok)
	if gap := rm.At.Sub(ended); gap < sessionTimeout/3 {
		t.Errorf("record removed %v after the holder ended; want its session to expire (at least %v)", gap, sessionTimeout/3)
	}
	if early := rm.At.Sub(g.at); early > removalSlack {
		t.Errorf("%s granted %v before the holder's record was removed", waiter.Name(), early)
	}
	if g.tok <= tok {
		t.Errorf("%s granted token %d after the holder's %d; want it higher", waiter.Name(), g.tok, tok)
	}
}

// watchRemoval sets an exists watch on the record in path whose czxid is
// tok, through a connection to each server of its own, each after a read
// barrier so that the record must still be there. A server fires the
// watch once it has applied the deletion, so the first NodeDeleted to
// arrive follows the removal by no more than its delivery.
func (e *env) watchRemoval(t *testing.T, path string, tok int64) <-chan testutil.Removal {
	t.Helper()
	e.barrier(t)
	rec := ""
	for _, k := range e.children(t, path) {
		if _, st, err := e.admin.Get(path + "/" + k); err == nil && st.Czxid == tok {
			rec = path + "/" + k
		}
	}
	if rec == "" {
		t.Fatalf("no record in %s has czxid %d", path, tok)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	removed, report := testutil.FirstRemoval(len(e.c.Members))
	for _, s := range e.c.Endpoints() {
		conn := testutil.ZKConn(t, []string{s}, 10*time.Second, nil)
		testutil.ZKReadBarrier(t, conn)(t)
		ok, _, ev, err := conn.ExistsW(rec)
		if err != nil || !ok {
			t.Fatalf("ExistsW(%s) on %s = %t, %v; want the record there", rec, s, ok, err)
		}
		go func() {
			select {
			case v := <-ev:
				report(fmt.Sprintf("%v %s, first seen on %s", v.Type, v.Path, s), v.Type == zk.EventNodeDeleted)
			case <-stop:
				report("", false)
			}
		}()
	}
	return removed
}
