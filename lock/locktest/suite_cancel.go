package locktest

import (
	"context"
	"errors"
	"runtime"
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

// testCancelInFlight cancels Acquire and TryAcquire calls right after they
// start, at varied points of their create request, on a free and on a held
// lock: a call that fails with the cancellation returns no lease, one that
// returns a lease holds it, and no record is left behind.
func (s *suite) testCancelInFlight(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))
	const iterations = 40

	run := func(state string) {
		t.Helper()
		granted := 0
		for i := range iterations {
			cctx, cancel := context.WithCancel(ctx)
			f := b.Acquire
			if i%4 == 3 {
				f = b.TryAcquire
			}
			ch := make(chan result, 1)
			go func() {
				le, err := f(cctx, name)
				ch <- result{le, err}
			}()
			// Time is the subject: land the cancellation before, during
			// and after the create request.
			switch i % 3 {
			case 1:
				runtime.Gosched()
			case 2:
				time.Sleep(time.Duration(i*i) * 5 * time.Microsecond)
			}
			cancel()
			r := s.await(t, ch, "Acquire cancelled in flight")
			switch {
			case r.err == nil && r.lease == nil:
				t.Fatalf("iteration %d on a %s lock: Acquire = nil lease, nil error", i, state)
			case r.err == nil:
				granted++
				if state == "held" {
					t.Errorf("iteration %d: Acquire on a held lock returned a lease (token %d)", i, r.lease.Token())
				}
				checkHeld(t, r.lease, name)
				mustRelease(t, ctx, r.lease)
			case r.lease != nil:
				t.Errorf("iteration %d on a %s lock: Acquire = %v, %v; want no lease with an error", i, state, r.lease, r.err)
			case !errorsIsAny(r.err, context.Canceled, lock.ErrLocked):
				t.Errorf("iteration %d on a %s lock: cancelled Acquire = %v; want an error wrapping %v", i, state, r.err, context.Canceled)
			}
		}
		t.Logf("on a %s lock: %d of %d cancelled calls were granted first", state, granted, iterations)
	}
	run("free")
	s.noOrphans(t, name, "Acquire calls cancelled in flight on a free lock")
	le, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q) after cancelled calls = %v; want a lease (no record may be left)", name, err)
	}
	run("held")
	s.waitRecords(t, name, 1, "records of calls cancelled in flight on a held lock deleted")
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "Acquire calls cancelled in flight")
}

// testReleaseCancelledContext releases a lease with a context that is
// already cancelled. Either outcome is allowed: Release still deletes the
// record (bounded by a timeout of its own) and returns nil, or it returns
// ctx's error. Either way the lease has ended when Release returns (Err
// wraps ErrReleased), and the record goes, at once or in the background,
// so that another Locker gets the lock.
func (s *suite) testReleaseCancelledContext(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))
	done, cancel := context.WithCancel(ctx)
	cancel()

	for round := range 3 {
		le := s.mustAcquire(t, ctx, a, name)
		seen := goAcquireAfter(ctx, b, name, le)
		s.waitRecords(t, name, 2, "waiter queued")
		err := le.Release(done)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("round %d: Release() with a cancelled context = %v; want nil or an error wrapping %v", round, err, context.Canceled)
		}
		checkReleased(t, le)
		g := s.awaitSeen(t, seen, "waiter's Acquire after a Release with a cancelled context")
		if !g.prevDone {
			t.Errorf("round %d: waiter granted while the released lease's Done() was still open", round)
		}
		if err := le.Release(ctx); !errors.Is(err, lock.ErrReleased) {
			t.Errorf("round %d: second Release() = %v; want an error wrapping %v", round, err, lock.ErrReleased)
		}
		mustRelease(t, ctx, g.lease)
	}
	s.noOrphans(t, name, "Release with a cancelled context")
}
