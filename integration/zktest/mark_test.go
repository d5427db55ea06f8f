package zktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// acquireAsync starts l.Acquire(ctx, name) and returns where its result
// comes.
func acquireAsync(ctx context.Context, l *zklock.Locker, name string) <-chan markResult {
	ch := make(chan markResult, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		ch <- markResult{le, err}
	}()
	return ch
}

type markResult struct {
	le  lock.Lease
	err error
}

// waitQueued waits until name's queue has n records.
func waitQueued(t *testing.T, h *harness, name string, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the queue's records", func() bool { return len(h.admin.records(t, h.root, name)) == n })
}

// heldAndQueued has one Locker hold name and another queue for it, and
// returns the lease and where the waiter's result comes.
func heldAndQueued(t *testing.T, ctx context.Context, h *harness, name string) (lock.Lease, <-chan markResult) {
	t.Helper()
	held, err := h.dial(t).Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	got := acquireAsync(ctx, h.dial(t), name)
	waitQueued(t, h, name, 2)
	return held, got
}

// TestZKReleaseMark checks the hand-over on a release mark (a Dial
// Locker's exclusive release sets its znode's data and deletes it in one
// transaction; the waiter behind is granted on the data change alone):
// the next holder is granted after the release and not before, a waiter
// ahead that gives up (a plain deletion) grants nobody, a deletion of the
// holder's znode by hand grants the waiter behind it, and a data change
// made by someone else, which the waiter cannot tell from a mark, ends
// the lease it granted (when its watch is set, 50ms after the grant)
// while the holder holds on.
func TestZKReleaseMark(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())

	t.Run("HandOver", func(t *testing.T) {
		ctx := testutil.Context(t, time.Minute)
		name := lockName(t)
		held, got := heldAndQueued(t, ctx, h, name)
		select {
		case r := <-got:
			t.Fatalf("Acquire() returned (%v, %v) while the lock was held", r.le, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		r := testutil.Recv(t, got, 10*time.Second, "the waiter's grant after the release")
		if r.err != nil {
			t.Fatalf("Acquire() after the release = %v; want a lease", r.err)
		}
		if r.le.Token() <= held.Token() {
			t.Errorf("token %d after the release; want more than the holder's %d", r.le.Token(), held.Token())
		}
		// The listing after the grant finds it rightful: the lease stays.
		select {
		case <-r.le.Done():
			t.Fatalf("the lease granted on the mark ended: %v", r.le.Err())
		case <-time.After(500 * time.Millisecond):
		}
		if err := r.le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	})

	t.Run("WaiterAheadGivesUp", func(t *testing.T) {
		ctx := testutil.Context(t, time.Minute)
		name := lockName(t)
		a, b, w := h.dial(t), h.dial(t), h.dial(t)
		held, err := a.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		bctx, cancel := context.WithCancel(ctx)
		gotB := acquireAsync(bctx, b, name)
		waitQueued(t, h, name, 2)
		gotW := acquireAsync(ctx, w, name)
		waitQueued(t, h, name, 3)
		cancel()
		if r := testutil.Recv(t, gotB, 10*time.Second, "the cancelled Acquire"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Acquire() = (%v, %v); want context.Canceled", r.le, r.err)
		}
		waitQueued(t, h, name, 2)
		select {
		case r := <-gotW:
			t.Fatalf("Acquire() returned (%v, %v) when the waiter ahead gave up, with the lock held", r.le, r.err)
		case <-time.After(500 * time.Millisecond):
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		if r := testutil.Recv(t, gotW, 10*time.Second, "the grant after the release"); r.err != nil {
			t.Fatalf("Acquire() after the release = %v", r.err)
		}
	})

	t.Run("HolderDeletedByHand", func(t *testing.T) {
		// A plain deletion of the holder's znode (no mark) admits the
		// waiter watching it: the holder was the head of the queue.
		ctx := testutil.Context(t, time.Minute)
		name := lockName(t)
		held, got := heldAndQueued(t, ctx, h, name)
		time.Sleep(200 * time.Millisecond) // the waiter's watch is set
		path := held.(*zklock.Lease).Path()
		if err := h.admin.conn.Delete(path, -1); err != nil {
			t.Fatalf("Delete(%s) = %v", path, err)
		}
		r := testutil.Recv(t, got, 10*time.Second, "the waiter's grant after the holder's znode was deleted")
		if r.err != nil {
			t.Fatalf("Acquire() = %v; want a lease", r.err)
		}
		testutil.Recv(t, held.Done(), 5*time.Second, "Done of the lease whose znode was deleted")
		if err := held.Err(); !errors.Is(err, lock.ErrLost) {
			t.Errorf("the holder's Err() = %v; want an error wrapping %v", err, lock.ErrLost)
		}
		// The listing that goes with the new lease's watch finds it
		// rightful.
		select {
		case <-r.le.Done():
			t.Fatalf("the lease granted on the holder's deletion ended: %v", r.le.Err())
		case <-time.After(500 * time.Millisecond):
		}
		if err := r.le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	})

	t.Run("DataSetByHand", func(t *testing.T) {
		ctx := testutil.Context(t, time.Minute)
		name := lockName(t)
		held, got := heldAndQueued(t, ctx, h, name)
		time.Sleep(200 * time.Millisecond) // the waiter's watch is set (a grant below proves it was)
		path := held.(*zklock.Lease).Path()
		if _, err := h.admin.conn.Set(path, []byte("meddled"), -1); err != nil {
			t.Fatalf("Set(%s) = %v", path, err)
		}
		select {
		case r := <-got:
			// Granted on what looked like a mark: the listing that goes
			// with the lease's watch must end it, and the holder holds
			// on.
			if r.err != nil {
				t.Fatalf("Acquire() = %v; want a lease, or none while the lock is held", r.err)
			}
			testutil.Recv(t, r.le.Done(), 5*time.Second, "Done of the lease granted on a data change made by hand")
			if err := r.le.Err(); !errors.Is(err, lock.ErrLost) {
				t.Errorf("Err() = %v; want an error wrapping %v", err, lock.ErrLost)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("no grant within 2s of the data change made by hand; the waiter did not watch the holder's data")
		}
		if err := held.Err(); err != nil {
			t.Fatalf("the holder's Err() = %v; want nil", err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	})
}
