package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testCancelWait(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))
	c := s.newLocker(t, identity("c"))

	holder := s.mustAcquire(t, ctx, a, name)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelled := goAcquire(wctx, b, name)
	s.waitRecords(t, name, 2, "first waiter queued")
	next := goAcquire(ctx, c, name)
	s.waitRecords(t, name, 3, "second waiter queued")

	cancel()
	r := s.await(t, cancelled, "Acquire after its context was cancelled")
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled Acquire = %v, %v; want an error wrapping %v", r.lease, r.err, context.Canceled)
	}
	if r.lease != nil {
		t.Errorf("cancelled Acquire returned a lease %v", r.lease)
	}
	s.waitRecords(t, name, 2, "cancelled waiter's record deleted")
	notReturned(t, next, "second waiter")

	// The cancelled waiter was the second waiter's predecessor: the
	// release must still reach the second waiter.
	mustRelease(t, ctx, holder)
	le := s.awaitLease(t, next, "second waiter's Acquire after the holder released")
	if le.Token() <= holder.Token() {
		t.Errorf("second waiter Token() = %d; want > %d", le.Token(), holder.Token())
	}
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "a cancelled wait and two releases")
}

func (s *suite) testDeadlineWait(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	holder := s.mustAcquire(t, ctx, a, name)
	// Time is the subject here, not the order of steps.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	r := s.await(t, goAcquire(wctx, b, name), "Acquire with a deadline")
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline = %v, %v; want an error wrapping %v", r.lease, r.err, context.DeadlineExceeded)
	}
	s.waitRecords(t, name, 1, "timed-out waiter's record deleted")
	checkHeld(t, holder, name)
	mustRelease(t, ctx, holder)
	le := s.mustAcquire(t, ctx, b, name)
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "a timed-out wait")
}

func (s *suite) testCancelledContext(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))
	done, cancel := context.WithCancel(ctx)
	cancel()

	check := func(state string) {
		t.Helper()
		for _, op := range []struct {
			name string
			f    func(context.Context, string) (lock.Lease, error)
		}{{"Acquire", b.Acquire}, {"TryAcquire", b.TryAcquire}} {
			ch := make(chan result, 1)
			go func() {
				le, err := op.f(done, name)
				ch <- result{le, err}
			}()
			r := s.await(t, ch, op.name+" with a cancelled context")
			le, err := r.lease, r.err
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s(%q) with a cancelled context on a %s lock = %v, %v; want an error wrapping %v", op.name, name, state, le, err, context.Canceled)
			}
			if le != nil {
				_ = le.Release(ctx)
			}
		}
	}
	check("free")
	s.noOrphans(t, name, "Acquire with a cancelled context")
	s.notHeld(t, ctx, a, name)

	holder := s.mustAcquire(t, ctx, a, name)
	check("held")
	s.checkRecords(t, name, 1, "after Acquire with a cancelled context on a held lock")
	mustRelease(t, ctx, holder)
	s.noOrphans(t, name, "Release")
}
