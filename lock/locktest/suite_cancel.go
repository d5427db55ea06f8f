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
	ctx, name, ls, _ := s.setup(t, 3)
	holder := s.mustAcquire(t, ctx, ls[0], name)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelled := s.enqueue(t, wctx, ls[1], name, excl, 2, "first waiter queued")
	next := s.enqueue(t, ctx, ls[2], name, excl, 3, "second waiter queued")

	cancel()
	s.awaitRefused(t, cancelled, "Acquire after its context was cancelled", context.Canceled)
	s.waitRecords(t, name, 2, "cancelled waiter's record deleted")
	notReturned(t, next, "second waiter")

	// The cancelled waiter was the second waiter's predecessor: the
	// release must still reach the second waiter.
	mustRelease(t, ctx, holder)
	le := s.awaitLease(t, next, "second waiter's Acquire after the holder released")
	checkAfter(t, le, holder, "second waiter")
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "a cancelled wait and two releases")
}

func (s *suite) testDeadlineWait(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	holder := s.mustAcquire(t, ctx, ls[0], name)
	// Time is the subject here, not the order of steps.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	s.awaitRefused(t, goAcquire(wctx, ls[1], name, excl), "Acquire with a deadline", context.DeadlineExceeded)
	s.waitRecords(t, name, 1, "timed-out waiter's record deleted")
	checkHeld(t, name, holder)
	mustRelease(t, ctx, holder)
	mustRelease(t, ctx, s.mustAcquire(t, ctx, ls[1], name))
	s.noOrphans(t, name, "a timed-out wait")
}

func (s *suite) testCancelledContext(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	check := func(state string) {
		t.Helper()
		for _, try := range []bool{false, true} {
			what := excl.op(try) + "(" + name + ") with a cancelled context on a " + state + " lock"
			r := await(t, s, goCall(func() (lock.Lease, error) { return excl.call(done, ls[1], name, try) }), what)
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("%s = %v, %v; want an error wrapping %v", what, r.lease, r.err, context.Canceled)
			}
			if r.lease != nil {
				_ = r.lease.Release(ctx)
			}
		}
	}
	check("free")
	s.noOrphans(t, name, "Acquire with a cancelled context")
	s.notHeld(t, ctx, ls[0], name)

	holder := s.mustAcquire(t, ctx, ls[0], name)
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
	ctx, name, ls, _ := s.setup(t, 2)
	s.cancelInFlight(t, ctx, ls[1], name, "free")
	s.noOrphans(t, name, "Acquire calls cancelled in flight on a free lock")
	le, err := ls[0].TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q) after cancelled calls = %v; want a lease (no record may be left)", name, err)
	}
	s.cancelInFlight(t, ctx, ls[1], name, "held")
	s.waitRecords(t, name, 1, "records of calls cancelled in flight on a held lock deleted")
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "Acquire calls cancelled in flight")
}

// cancelInFlight is one half of testCancelInFlight, on a lock in state
// ("free" or "held").
func (s *suite) cancelInFlight(t *testing.T, ctx context.Context, b lock.Locker, name, state string) {
	t.Helper()
	const iterations = 40
	granted := 0
	for i := range iterations {
		cctx, cancel := context.WithCancel(ctx)
		ch := goCall(func() (lock.Lease, error) { return excl.call(cctx, b, name, i%4 == 3) })
		// Time is the subject: land the cancellation before, during and
		// after the create request.
		switch i % 3 {
		case 1:
			runtime.Gosched()
		case 2:
			time.Sleep(time.Duration(i*i) * 5 * time.Microsecond)
		}
		cancel()
		r := await(t, s, ch, "Acquire cancelled in flight")
		switch {
		case r.err == nil && r.lease == nil:
			t.Fatalf("iteration %d on a %s lock: Acquire = nil lease, nil error", i, state)
		case r.err == nil:
			granted++
			if state == "held" {
				t.Errorf("iteration %d: Acquire on a held lock returned a lease (token %d)", i, r.lease.Token())
			}
			checkHeld(t, name, r.lease)
			mustRelease(t, ctx, r.lease)
		case r.lease != nil:
			t.Errorf("iteration %d on a %s lock: Acquire = %v, %v; want no lease with an error", i, state, r.lease, r.err)
		case !errorsIsAny(r.err, context.Canceled, lock.ErrLocked):
			t.Errorf("iteration %d on a %s lock: cancelled Acquire = %v; want an error wrapping %v", i, state, r.err, context.Canceled)
		}
	}
	t.Logf("on a %s lock: %d of %d cancelled calls were granted first", state, granted, iterations)
}

// testReleaseCancelledContext releases a lease with a context that is
// already cancelled. Either outcome is allowed: Release still deletes the
// record (bounded by a timeout of its own) and returns nil, or it returns
// ctx's error. Either way the lease has ended when Release returns (Err
// wraps ErrReleased), and the record goes, at once or in the background,
// so that another Locker gets the lock.
func (s *suite) testReleaseCancelledContext(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	for round := range 3 {
		le := s.mustAcquire(t, ctx, ls[0], name)
		seen := goAcquireAfter(ctx, ls[1], name, le)
		s.waitRecords(t, name, 2, "waiter queued")
		err := le.Release(done)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("round %d: Release() with a cancelled context = %v; want nil or an error wrapping %v", round, err, context.Canceled)
		}
		checkReleased(t, le)
		g := s.awaitGrant(t, seen, "waiter's Acquire after a Release with a cancelled context")
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
