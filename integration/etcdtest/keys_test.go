package etcdtest

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// keyOf returns the record key of a lease granted by etcdlock.
func keyOf(le lock.Lease) string { return le.(*etcdlock.Lease).Key() }

// TestRecordKeyReuse checks which acquisitions take a record key again
// (see "Record keys" in docs/design/etcd.md): the next acquisition of a name
// after a clean Release through the same Locker does, with a new token, and
// the released lease's IsHeld fails on the record that took its key over;
// the key of a lost record is never used again, and concurrent requests of
// one Locker have keys of their own.
func TestRecordKeyReuse(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	l := newLocker(t, newClient(t, c.Endpoints()))

	t.Run("AfterRelease", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		name := testutil.UniqueName(t)
		first, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		prev := first
		for range 3 {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("Acquire() = %v", err)
			}
			if keyOf(le) != keyOf(first) {
				t.Errorf("key after a clean Release = %q; want %q again", keyOf(le), keyOf(first))
			}
			if le.Token() <= prev.Token() {
				t.Errorf("token %d; want more than the previous grant's %d", le.Token(), prev.Token())
			}
			// The released lease's guard fails on the record that took its
			// key over; the new lease's holds. (The read in Then makes the
			// transaction linearizable: etcd serves one without operations
			// from the member it reaches, which may lag.)
			for _, g := range []struct {
				le   lock.Lease
				want bool
			}{{prev, false}, {le, true}} {
				resp, err := admin.Txn(ctx).If(g.le.(*etcdlock.Lease).IsHeld()).Then(clientv3.OpGet(keyOf(le))).Commit()
				if err != nil {
					t.Fatalf("Txn() = %v", err)
				}
				if resp.Succeeded != g.want {
					t.Errorf("Txn(IsHeld() of token %d).Succeeded = %v; want %v", g.le.Token(), resp.Succeeded, g.want)
				}
			}
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			prev = le
		}
	})

	t.Run("HandOver", func(t *testing.T) {
		// The holder queues again with its old key behind the waiter it
		// handed the lock to, and is granted after it.
		ctx := testutil.Context(t, 30*time.Second)
		name := testutil.UniqueName(t)
		other := newLocker(t, newClient(t, c.Endpoints()))
		held, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		waiter := make(chan lock.Lease, 1)
		go func() {
			le, err := other.Acquire(ctx, name)
			if err != nil {
				t.Errorf("waiter's Acquire() = %v", err)
			}
			waiter <- le
		}()
		testutil.Eventually(t, 10*time.Second, "the waiter's record", func() bool { return len(records(t, admin, l, name)) == 2 })
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		w := testutil.Recv(t, waiter, 10*time.Second, "the waiter's grant")
		if w == nil {
			t.FailNow()
		}
		again := make(chan lock.Lease, 1)
		go func() {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				t.Errorf("Acquire() again = %v", err)
			}
			again <- le
		}()
		testutil.Eventually(t, 10*time.Second, "the holder's record again", func() bool { return len(records(t, admin, l, name)) == 2 })
		select {
		case le := <-again:
			t.Fatalf("Acquire() again returned %v while the waiter held the lock", le)
		case <-time.After(300 * time.Millisecond):
		}
		if err := w.Release(ctx); err != nil {
			t.Fatalf("waiter's Release() = %v", err)
		}
		le := testutil.Recv(t, again, 10*time.Second, "the grant after the waiter's release")
		if le == nil {
			t.FailNow()
		}
		if keyOf(le) != keyOf(held) || le.Token() <= w.Token() {
			t.Errorf("grant with key %q, token %d; want key %q and a token above the waiter's %d", keyOf(le), le.Token(), keyOf(held), w.Token())
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	})

	t.Run("AfterLoss", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		name := testutil.UniqueName(t)
		lost, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if _, err := admin.Delete(ctx, keyOf(lost)); err != nil {
			t.Fatalf("Delete() = %v", err)
		}
		testutil.Recv(t, lost.Done(), 10*time.Second, "Done of the lease whose record was deleted")
		if err := lost.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Release() of the lost lease = %v; want %v", err, lock.ErrLost)
		}
		le, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if keyOf(le) == keyOf(lost) {
			t.Errorf("key after a lost lease = %q; want a new one", keyOf(le))
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		name := testutil.UniqueName(t)
		a, err := l.AcquireShared(ctx, name)
		if err != nil {
			t.Fatalf("AcquireShared() = %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		r1, err := l.AcquireShared(ctx, name)
		if err != nil {
			t.Fatalf("AcquireShared() = %v", err)
		}
		r2, err := l.AcquireShared(ctx, name)
		if err != nil {
			t.Fatalf("AcquireShared() = %v", err)
		}
		if keyOf(r1) != keyOf(a) || keyOf(r2) == keyOf(r1) {
			t.Errorf("keys %q and %q after %q was released; want the first the same, the second new", keyOf(r1), keyOf(r2), keyOf(a))
		}
		got := records(t, admin, l, name)
		if len(got) != 2 {
			t.Errorf("records = %v; want the two readers'", got)
		}
		for _, le := range []lock.Lease{r1, r2} {
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
		}
	})
}
