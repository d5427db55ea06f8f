package locktest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testReleaseTwice(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 1)
	le := s.mustAcquire(t, ctx, ls[0], name)
	mustRelease(t, ctx, le)
	checkReleased(t, le)
	for i := 2; i <= 3; i++ {
		wantErr(t, fmt.Sprintf("Release() #%d", i), le.Release(ctx), lock.ErrReleased)
	}
	checkReleased(t, le)

	// A stale Release must not end a later grant.
	le2 := s.mustAcquire(t, ctx, ls[0], name)
	_ = le.Release(ctx)
	checkHeld(t, name, le2)
	s.holderIs(t, ctx, ls[0], name, lock.Holder{Identity: ids[0], Token: le2.Token()})
	s.releaseLast(t, ctx, name, "Release", le2)
}

// closing is where the Close subtests start: a holds names[0] and
// names[1] and waits for names[2], which b holds.
type closing struct {
	ctx     context.Context
	a, b    lock.Locker
	names   []string
	held    []lock.Lease
	other   lock.Lease
	waiting <-chan result
}

func (s *suite) newClosing(t *testing.T) *closing {
	t.Helper()
	ctx, name, ls, _ := s.setup(t, 2)
	c := &closing{ctx: ctx, a: ls[0], b: ls[1], names: []string{lockName(t), lockName(t), name}}
	c.held = []lock.Lease{s.mustAcquire(t, ctx, c.a, c.names[0]), s.mustAcquire(t, ctx, c.a, c.names[1])}
	c.other = s.mustAcquire(t, ctx, c.b, name)
	c.waiting = s.enqueue(t, ctx, c.a, name, excl, 2, "waiter queued")
	return c
}

// finish checks that Close (what) of a interrupted its waiter and left no
// record, releasing b's lease.
func (c *closing) finish(t *testing.T, s *suite, what string) {
	t.Helper()
	s.awaitRefused(t, c.waiting, "Acquire interrupted by Close", lock.ErrClosed)
	s.noOrphans(t, c.names[0], what)
	s.noOrphans(t, c.names[1], what)
	s.checkRecords(t, c.names[2], 1, "after "+what+" interrupted a waiter")
	s.releaseLast(t, c.ctx, c.names[2], "Release", c.other)
}

func (s *suite) testClose(t *testing.T) {
	c := s.newClosing(t)
	noErr(t, "Close()", c.a.Close())
	for _, g := range stillGoing(c.held, nil) {
		t.Errorf("%s after Close returned; want it ended", g)
	}
	for _, le := range c.held {
		wantErr(t, fmt.Sprintf("lease %q: Release() after Close", le.Name()), le.Release(c.ctx), lock.ErrReleased, lock.ErrLost)
	}
	noErr(t, "second Close()", c.a.Close())
	refusesAll(t, c.ctx, c.a, c.names[2], " on a closed Locker", lock.ErrClosed)
	c.finish(t, s, "Close")

	// Close freed the locks at once.
	for _, n := range c.names[:2] {
		s.releaseLast(t, c.ctx, n, "Close and Release", mustTry(t, c.ctx, c.b, n, excl, "after its holder's Locker closed"))
	}
}

func (s *suite) testSessionExpiry(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 2)
	a, b := ls[0], ls[1]
	lost := s.mustAcquire(t, ctx, a, name)
	waiting := s.enqueue(t, ctx, b, name, excl, 2, "waiter queued")

	s.expirer.ExpireSession(t, a)
	s.checkLost(t, lost, "lease of an expired session", "Err() after session expiry")
	wantErr(t, "Release() of a lost lease", lost.Release(ctx), lock.ErrLost)

	// Another Locker wins, with a higher token.
	le := s.awaitLease(t, waiting, "waiter's Acquire after the holder's session expired")
	checkAfter(t, le, lost, "grant after the holder's expiry")
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: ids[1], Token: le.Token()})
	mustRelease(t, ctx, le)

	// The same Locker acquires again, on a new session.
	again := s.mustAcquire(t, ctx, a, name)
	checkAfter(t, again, le, "grant on a new session")
	checkHeld(t, name, again)
	s.holderIs(t, ctx, b, name, lock.Holder{Identity: ids[0], Token: again.Token()})
	wantErr(t, "lost lease Err() after a new grant", lost.Err(), lock.ErrLost)
	s.releaseLast(t, ctx, name, "session expiry and Release", again)
}

func (s *suite) testSessionExpiryWaiter(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	holder := s.mustAcquire(t, ctx, ls[1], name)
	waiting := s.enqueue(t, ctx, ls[0], name, excl, 2, "waiter queued")

	s.expirer.ExpireSession(t, ls[0])
	s.awaitRefused(t, waiting, "Acquire waiting on an expired session", lock.ErrLost)
	s.waitRecords(t, name, 1, "expired waiter's record deleted")
	checkHeld(t, name, holder)
	mustRelease(t, ctx, holder)

	le := s.mustAcquire(t, ctx, ls[0], name)
	checkAfter(t, le, holder, "grant on a new session")
	s.releaseLast(t, ctx, name, "a waiter's session expiry", le)
}

// testDoneBeforeNextGrant checks that Done closes before the next grant.
func (s *suite) testDoneBeforeNextGrant(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	for range 3 {
		holder := s.mustAcquire(t, ctx, ls[0], name)
		next := s.passOn(t, ctx, ls[1], holder, func() { mustRelease(t, ctx, holder) }, "waiter's Acquire after Release")
		mustRelease(t, ctx, next)
	}
	s.noOrphans(t, name, "Release")
}

// testLossDoneBeforeNextGrant checks that a lease lost with its session
// has ended before the next grant.
func (s *suite) testLossDoneBeforeNextGrant(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	lost := s.mustAcquire(t, ctx, ls[0], name)
	stall := func() { s.staller.StallSession(t, ls[0]) }
	next := s.passOn(t, ctx, ls[1], lost, stall, "waiter's Acquire after the holder's session was lost")
	s.checkLost(t, lost, "lease of a lost session", "Err() after the session was lost")
	s.releaseLast(t, ctx, name, "session loss and Release", next)
}

// passOn queues an Acquire through l behind prev, runs end, and returns
// the waiter's lease, which must come after prev's Done closed.
func (s *suite) passOn(t *testing.T, ctx context.Context, l lock.Locker, prev lock.Lease, end func(), what string) lock.Lease {
	t.Helper()
	prevDone := make(chan bool, 1)
	ch := goCall(func() (lock.Lease, error) {
		le, err := l.Acquire(ctx, prev.Name())
		prevDone <- isClosed(prev.Done())
		return le, err
	})
	s.waitRecords(t, prev.Name(), 2, "waiter queued")
	end()
	le := s.awaitLease(t, ch, what)
	if !<-prevDone {
		t.Errorf("%s: waiter granted token %d while the previous lease's Done() was still open; want Done closed before the next grant", what, le.Token())
	}
	return le
}

// testReleaseLostLease checks that releasing a lease lost with its session
// reports ErrLost and leaves alone the Locker's later grant of the name.
func (s *suite) testReleaseLostLease(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 2)
	a, b := ls[0], ls[1]
	lost := s.mustAcquire(t, ctx, a, name)
	s.expirer.ExpireSession(t, a)
	await(t, s, lost.Done(), "lease of an expired session: Done()")
	again := s.mustAcquire(t, ctx, a, name)

	for i := 1; i <= 2; i++ {
		wantErr(t, fmt.Sprintf("Release() #%d of a lost lease", i), lost.Release(ctx), lock.ErrLost)
	}
	wantErr(t, "lost lease Err() after Release", lost.Err(), lock.ErrLost)
	checkHeld(t, name, again)
	s.holderIs(t, ctx, b, name, lock.Holder{Identity: ids[0], Token: again.Token()})
	s.checkRecords(t, name, 1, "after Release of a lost lease")
	refuses(t, ctx, b, name, excl, true, " by another Locker after Release of a lost lease (the new grant holds)", lock.ErrLocked)
	s.releaseLast(t, ctx, name, "Release of a lost lease and of the new grant", again)
}

// testReleaseConcurrent checks that of concurrent Releases of one lease
// exactly one returns nil.
func (s *suite) testReleaseConcurrent(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	const n = 8
	for round := range 3 {
		le := s.mustAcquire(t, ctx, ls[0], name)
		nils := 0
		for _, err := range atOnce(n, func(int) error { return le.Release(ctx) }, nil) {
			if err == nil {
				nils++
			} else {
				wantErr(t, fmt.Sprintf("round %d: concurrent Release()", round), err, lock.ErrReleased)
			}
		}
		if nils != 1 {
			t.Errorf("round %d: %d of %d concurrent Release() calls returned nil; want exactly 1", round, nils, n)
		}
		checkReleased(t, le)
		s.noOrphans(t, name, "concurrent Release")
		mustRelease(t, ctx, mustTry(t, ctx, ls[1], name, excl, "after concurrent Release"))
	}
}

// atOnce runs f(0), …, f(n-1) in goroutines released together, and during
// (if not nil) while they run, and returns their results.
func atOnce[T any](n int, f func(i int) T, during func()) []T {
	start := make(chan struct{})
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = f(i)
		})
	}
	close(start)
	if during != nil {
		during()
	}
	wg.Wait()
	return out
}

// testCloseConcurrent checks that concurrent Close calls each return only
// once the Locker's leases and observations have ended.
func (s *suite) testCloseConcurrent(t *testing.T) {
	c := s.newClosing(t)
	var obs <-chan lock.Holder
	if o, ok := c.a.(lock.Observer); ok {
		obs = s.observe(t, c.ctx, o, c.names[0], "Observe").ch
	}
	const n = 6
	for _, going := range atOnce(n, func(int) []string {
		noErr(t, "concurrent Close()", c.a.Close())
		return stillGoing(c.held, obs)
	}, nil) {
		for _, g := range going {
			t.Errorf("when one of %d concurrent Close() calls returned: %s; want the Locker torn down", n, g)
		}
	}
	for i := 1; i <= 2; i++ {
		noErr(t, fmt.Sprintf("Close() #%d after the concurrent ones", i), c.a.Close())
	}
	c.finish(t, s, "concurrent Close")
}

// stillGoing says which of leases and observation obs (if any) go on.
func stillGoing(leases []lock.Lease, obs <-chan lock.Holder) []string {
	var going []string
	for _, le := range leases {
		if !isClosed(le.Done()) {
			going = append(going, fmt.Sprintf("lease %q: Done() open", le.Name()))
		} else if err := le.Err(); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
			going = append(going, fmt.Sprintf("lease %q: Err() = %v, wrapping neither %v nor %v", le.Name(), err, lock.ErrReleased, lock.ErrLost))
		}
	}
	if obs != nil && !observationEnded(obs) {
		going = append(going, "an observation's channel is open")
	}
	return going
}

// observationEnded reads what ch holds and reports whether it is closed.
func observationEnded(ch <-chan lock.Holder) bool {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		default:
			return false
		}
	}
}

// testCloseRace closes a Locker while calls are in flight on it: each
// returns ErrClosed (ErrLocked for a try), nil, or a lease Close ended.
func (s *suite) testCloseRace(t *testing.T) {
	for round := range 4 {
		c := s.newClosing(t)
		const acquires = 12
		out := atOnce(acquires+len(c.held), func(i int) result {
			if i >= acquires {
				return result{err: c.held[i-acquires].Release(c.ctx)}
			}
			le, err := excl.call(c.ctx, c.a, c.names[i%len(c.names)], i%2 == 1)
			return result{le, err}
		}, func() {
			for range round * 50 {
				runtime.Gosched()
			}
			noErr(t, fmt.Sprintf("round %d: Close()", round), c.a.Close())
		})
		for i, r := range out {
			if i >= acquires {
				if r.err != nil {
					wantErr(t, fmt.Sprintf("round %d: Release() racing Close", round), r.err, lock.ErrReleased, lock.ErrLost, lock.ErrClosed)
				}
				continue
			}
			what := fmt.Sprintf("round %d: %s racing Close", round, excl.op(i%2 == 1))
			if le := outcome(t, what, r, lock.ErrClosed, lock.ErrLocked); le != nil {
				if !isClosed(le.Done()) {
					t.Errorf("%s returned lease %q token %d, still held after Close returned; want it ended", what, le.Name(), le.Token())
				}
				wantErr(t, what+": Release() of its lease", le.Release(c.ctx), lock.ErrReleased, lock.ErrLost)
			}
		}
		for _, g := range stillGoing(c.held, nil) {
			t.Errorf("round %d: %s after Release and Close returned; want it ended", round, g)
		}
		c.finish(t, s, "Close racing Acquire and Release")
	}
}

// testHealthy checks Healthy over a Locker's life, and with a nil context.
func (s *suite) testHealthy(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	h := ls[0].(lock.HealthChecker)
	if err := h.Healthy(ctx); err != nil {
		t.Fatalf("Healthy() of a new Locker = %v; want nil", err)
	}
	le := s.mustAcquire(t, ctx, ls[0], name)
	noErr(t, "Healthy() while holding a lease", h.Healthy(ctx))
	var nilCtx context.Context
	wantErr(t, "Healthy(nil)", h.Healthy(nilCtx), lock.ErrInvalidConfig)
	mustRelease(t, ctx, le)
	if err := ls[0].Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	wantErr(t, "Healthy() after Close", h.Healthy(ctx), lock.ErrClosed)
}

// testHealthyAfterExpiry checks that Healthy opens a new session.
func (s *suite) testHealthyAfterExpiry(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	le := s.mustAcquire(t, ctx, ls[0], name)
	s.expirer.ExpireSession(t, ls[0])
	await(t, s, le.Done(), "lease of an expired session: Done()")
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ls[0].(lock.HealthChecker).Healthy(hctx); err != nil {
		t.Errorf("Healthy() after the session expired = %v; want nil once a new session is up", err)
	}
	again := s.mustAcquire(t, ctx, ls[0], name+"-again")
	checkAfter(t, again, le, "grant after Healthy on a new session")
	mustRelease(t, ctx, again)
}
