package locktest

import (
	"context"
	"fmt"
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

	// The release must still reach the waiter behind the cancelled one.
	mustRelease(t, ctx, holder)
	le := s.awaitLease(t, next, "second waiter's Acquire after the holder released")
	checkAfter(t, le, holder, "second waiter")
	s.releaseLast(t, ctx, name, "a cancelled wait and two releases", le)
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
	s.releaseLast(t, ctx, name, "a timed-out wait", s.mustAcquire(t, ctx, ls[1], name))
}

func (s *suite) testCancelledContext(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	check := func(state string) {
		t.Helper()
		for _, try := range []bool{false, true} {
			what := excl.op(try) + "(" + name + ") with a cancelled context on a " + state + " lock"
			s.awaitRefused(t, goCall(func() (lock.Lease, error) { return excl.call(done, ls[1], name, try) }), what, context.Canceled)
		}
	}
	check("free")
	s.noOrphans(t, name, "Acquire with a cancelled context")
	s.notHeld(t, ctx, ls[0], name)

	holder := s.mustAcquire(t, ctx, ls[0], name)
	check("held")
	s.checkRecords(t, name, 1, "after Acquire with a cancelled context on a held lock")
	s.releaseLast(t, ctx, name, "Release", holder)
}

// testCancelInFlight cancels calls right after they start: each returns a
// lease it holds or no lease, and no record is left behind.
func (s *suite) testCancelInFlight(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	s.cancelInFlight(t, ctx, ls[1], name, "free")
	s.noOrphans(t, name, "Acquire calls cancelled in flight on a free lock")
	le := mustTry(t, ctx, ls[0], name, excl, "after cancelled calls (no record may be left)")
	s.cancelInFlight(t, ctx, ls[1], name, "held")
	s.waitRecords(t, name, 1, "records of calls cancelled in flight on a held lock deleted")
	s.releaseLast(t, ctx, name, "Acquire calls cancelled in flight", le)
}

// cancelInFlight is testCancelInFlight on a "free" or "held" lock.
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
		what := fmt.Sprintf("iteration %d on a %s lock: cancelled Acquire", i, state)
		if le := outcome(t, what, await(t, s, ch, what), context.Canceled, lock.ErrLocked); le != nil {
			granted++
			if state == "held" {
				t.Errorf("%s returned a lease (token %d)", what, le.Token())
			}
			checkHeld(t, name, le)
			mustRelease(t, ctx, le)
		}
	}
	t.Logf("on a %s lock: %d of %d cancelled calls were granted first", state, granted, iterations)
}

// testReleaseCancelledContext checks that Release with a cancelled
// context returns nil or ctx's error, and either way ends the lease and
// lets its record go.
func (s *suite) testReleaseCancelledContext(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	for round := range 3 {
		le := s.mustAcquire(t, ctx, ls[0], name)
		release := func() {
			if err := le.Release(done); err != nil {
				wantErr(t, fmt.Sprintf("round %d: Release() with a cancelled context", round), err, context.Canceled)
			}
			checkReleased(t, le)
		}
		next := s.passOn(t, ctx, ls[1], le, release, "waiter's Acquire after a Release with a cancelled context")
		wantErr(t, fmt.Sprintf("round %d: second Release()", round), le.Release(ctx), lock.ErrReleased)
		mustRelease(t, ctx, next)
	}
	s.noOrphans(t, name, "Release with a cancelled context")
}
