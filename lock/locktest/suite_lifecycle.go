package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testReleaseTwice(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 1)
	l := ls[0]
	le := s.mustAcquire(t, ctx, l, name)
	mustRelease(t, ctx, le)
	checkReleased(t, le)
	for i := 2; i <= 3; i++ {
		if err := le.Release(ctx); !errors.Is(err, lock.ErrReleased) {
			t.Errorf("Release() #%d = %v; want an error wrapping %v", i, err, lock.ErrReleased)
		}
	}
	checkReleased(t, le)

	// A stale Release must not end a later grant.
	le2 := s.mustAcquire(t, ctx, l, name)
	_ = le.Release(ctx)
	checkHeld(t, name, le2)
	s.holderIs(t, ctx, l, name, lock.Holder{Identity: ids[0], Token: le2.Token()})
	mustRelease(t, ctx, le2)
	s.noOrphans(t, name, "Release")
}

// checkClosedLocker fails t unless every call on the closed Locker a
// (name is a lock it waited for) returns an error wrapping ErrClosed.
func checkClosedLocker(t *testing.T, ctx context.Context, a lock.Locker, name string) {
	t.Helper()
	for _, try := range []bool{false, true} {
		le, err := excl.call(ctx, a, lockName(t), try)
		refused(t, excl.op(try)+" on a closed Locker", le, err, lock.ErrClosed)
	}
	if h, err := a.Holder(ctx, name); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Holder on a closed Locker = %+v, %v; want an error wrapping %v", h, err, lock.ErrClosed)
	}
	if o, ok := a.(lock.Observer); ok {
		if _, _, err := o.Observe(ctx, name); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("Observe on a closed Locker = %v; want an error wrapping %v", err, lock.ErrClosed)
		}
	}
}

// closing is where the Close subtests start: a holds names[0] and
// names[1] (held) and waits for names[2], which b holds (other).
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
// record, and releases other.
func (c *closing) finish(t *testing.T, s *suite, what string) {
	t.Helper()
	s.awaitRefused(t, c.waiting, "Acquire interrupted by Close", lock.ErrClosed)
	s.noOrphans(t, c.names[0], what)
	s.noOrphans(t, c.names[1], what)
	s.checkRecords(t, c.names[2], 1, "after "+what+" interrupted a waiter")
	mustRelease(t, c.ctx, c.other)
	s.noOrphans(t, c.names[2], "Release")
}

func (s *suite) testClose(t *testing.T) {
	c := s.newClosing(t)
	if err := c.a.Close(); err != nil {
		t.Errorf("Close() = %v; want nil", err)
	}
	for _, g := range stillGoing(c.held, nil) {
		t.Errorf("%s after Close returned; want it ended", g)
	}
	for _, le := range c.held {
		if err := le.Release(c.ctx); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
			t.Errorf("lease %q: Release() after Close = %v; want an error wrapping %v or %v", le.Name(), err, lock.ErrReleased, lock.ErrLost)
		}
	}
	if err := c.a.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	checkClosedLocker(t, c.ctx, c.a, c.names[2])
	c.finish(t, s, "Close")

	// Close freed the locks at once.
	for _, n := range c.names[:2] {
		le, err := c.b.TryAcquire(c.ctx, n)
		if err != nil {
			t.Errorf("TryAcquire(%q) after its holder's Locker closed = %v; want a lease", n, err)
			continue
		}
		mustRelease(t, c.ctx, le)
		s.noOrphans(t, n, "Close and Release")
	}
}

func (s *suite) testSessionExpiry(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 2)
	a, b := ls[0], ls[1]
	lost := s.mustAcquire(t, ctx, a, name)
	waiting := s.enqueue(t, ctx, b, name, excl, 2, "waiter queued")

	s.expirer.ExpireSession(t, a)
	s.checkLost(t, lost, "lease of an expired session", "Err() after session expiry")
	if err := lost.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release() of a lost lease = %v; want an error wrapping %v", err, lock.ErrLost)
	}

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
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("lost lease Err() after a new grant = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "session expiry and Release")
}

func (s *suite) testSessionExpiryWaiter(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	a, b := ls[0], ls[1]
	holder := s.mustAcquire(t, ctx, b, name)
	waiting := s.enqueue(t, ctx, a, name, excl, 2, "waiter queued")

	s.expirer.ExpireSession(t, a)
	s.awaitRefused(t, waiting, "Acquire waiting on an expired session", lock.ErrLost)
	s.waitRecords(t, name, 1, "expired waiter's record deleted")
	checkHeld(t, name, holder)
	mustRelease(t, ctx, holder)

	le := s.mustAcquire(t, ctx, a, name)
	checkAfter(t, le, holder, "grant on a new session")
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "a waiter's session expiry")
}

// testDoneBeforeNextGrant checks that a released lease's Done is closed
// before a waiter on another Locker is granted the lock: a holder that
// watches Done must never overlap with the next holder.
func (s *suite) testDoneBeforeNextGrant(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	for round := range 3 {
		holder := s.mustAcquire(t, ctx, ls[0], name)
		seen := goAcquireAfter(ctx, ls[1], name, holder)
		s.waitRecords(t, name, 2, "waiter queued")
		mustRelease(t, ctx, holder)
		g := s.awaitGrant(t, seen, "waiter's Acquire after Release")
		if !g.prevDone {
			t.Errorf("round %d: waiter granted token %d while the released lease's Done() was still open; want Done closed before the next grant", round, g.lease.Token())
		}
		mustRelease(t, ctx, g.lease)
	}
	s.noOrphans(t, name, "Release")
}

// testLossDoneBeforeNextGrant checks, with a SessionStaller, that a lease
// whose session is lost has ended (Done closed, Err wrapping ErrLost)
// before a waiter on another Locker is granted the lock.
func (s *suite) testLossDoneBeforeNextGrant(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	lost := s.mustAcquire(t, ctx, ls[0], name)
	seen := goAcquireAfter(ctx, ls[1], name, lost)
	s.waitRecords(t, name, 2, "waiter queued")
	s.staller.StallSession(t, ls[0])
	g := s.awaitGrant(t, seen, "waiter's Acquire after the holder's session was lost")
	if !g.prevDone {
		t.Errorf("waiter granted token %d while the lost lease's Done() was still open; want Done closed before the next grant", g.lease.Token())
	}
	s.checkLost(t, lost, "lease of a lost session", "Err() after the session was lost")
	mustRelease(t, ctx, g.lease)
	s.noOrphans(t, name, "session loss and Release")
}

// testReleaseLostLease checks that releasing a lease lost with its session
// reports ErrLost and leaves alone a later grant of the same name to the
// same Locker, in its new session.
func (s *suite) testReleaseLostLease(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 2)
	a, b := ls[0], ls[1]
	lost := s.mustAcquire(t, ctx, a, name)
	s.expirer.ExpireSession(t, a)
	s.waitDone(t, lost, "lease of an expired session")
	again := s.mustAcquire(t, ctx, a, name)

	for i := 1; i <= 2; i++ {
		if err := lost.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Release() #%d of a lost lease = %v; want an error wrapping %v", i, err, lock.ErrLost)
		}
	}
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("lost lease Err() after Release = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	checkHeld(t, name, again)
	s.holderIs(t, ctx, b, name, lock.Holder{Identity: ids[0], Token: again.Token()})
	s.checkRecords(t, name, 1, "after Release of a lost lease")
	le, err := b.TryAcquire(ctx, name)
	refused(t, fmt.Sprintf("TryAcquire(%q) by another Locker after Release of a lost lease (the new grant holds)", name), le, err, lock.ErrLocked)
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "Release of a lost lease and of the new grant")
}

// testReleaseConcurrent checks that many concurrent Releases of one lease
// end it once: exactly one returns nil, the others errors wrapping
// ErrReleased, and the lock is freed.
func (s *suite) testReleaseConcurrent(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	const n = 8
	for round := range 3 {
		le := s.mustAcquire(t, ctx, ls[0], name)
		nils := 0
		for _, err := range atOnce(n, func(int) error { return le.Release(ctx) }, nil) {
			switch {
			case err == nil:
				nils++
			case !errors.Is(err, lock.ErrReleased):
				t.Errorf("round %d: concurrent Release() = %v; want nil or an error wrapping %v", round, err, lock.ErrReleased)
			}
		}
		if nils != 1 {
			t.Errorf("round %d: %d of %d concurrent Release() calls returned nil; want exactly 1", round, nils, n)
		}
		checkReleased(t, le)
		s.noOrphans(t, name, "concurrent Release")
		other, err := ls[1].TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("round %d: TryAcquire(%q) after concurrent Release = %v; want a lease", round, name, err)
		}
		mustRelease(t, ctx, other)
	}
}

// atOnce runs f(0), …, f(n-1) in goroutines released together, and during
// (if not nil) while they run, and returns their results.
func atOnce[T any](n int, f func(i int) T, during func()) []T {
	start := make(chan struct{})
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = f(i)
		}()
	}
	close(start)
	if during != nil {
		during()
	}
	wg.Wait()
	return out
}

// testCloseConcurrent checks that concurrent Close calls each return only
// once the Locker is torn down (its leases ended, its observations ended),
// that later calls return nil, and that a waiting Acquire returns
// ErrClosed.
func (s *suite) testCloseConcurrent(t *testing.T) {
	c := s.newClosing(t)
	var obs <-chan lock.Holder
	if o, ok := c.a.(lock.Observer); ok {
		obs = s.observe(t, c.ctx, o, c.names[0], "Observe").ch
	}
	const n = 6
	for _, going := range atOnce(n, func(int) []string {
		if err := c.a.Close(); err != nil {
			return append(stillGoing(c.held, obs), fmt.Sprintf("Close() = %v; want nil", err))
		}
		return stillGoing(c.held, obs)
	}, nil) {
		for _, g := range going {
			t.Errorf("when one of %d concurrent Close() calls returned: %s; want the Locker torn down", n, g)
		}
	}
	for i := 1; i <= 2; i++ {
		if err := c.a.Close(); err != nil {
			t.Errorf("Close() #%d after the concurrent ones = %v; want nil", i, err)
		}
	}
	c.finish(t, s, "concurrent Close")
}

// stillGoing says what of a closed Locker's leases and observation (obs,
// nil if none) has not ended.
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

// observationEnded reports whether an observation's channel is closed,
// reading what is pending; false if a read would block.
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

// testCloseRace runs Close while Acquire, TryAcquire and Release calls are
// in flight on the same Locker: nothing may panic, every Acquire returns
// either an error wrapping ErrClosed or a lease that has ended by the time
// Close returns, every Release returns nil or an error wrapping
// ErrReleased, and no record is left.
func (s *suite) testCloseRace(t *testing.T) {
	ctx := s.ctx(t)
	b := s.newLocker(t, identity("b"))
	for round := range 4 {
		s.closeRaceRound(t, ctx, b, round)
	}
}

// raced is the outcome of a call (op) that raced Close.
type raced struct {
	op string
	result
}

// closeRaceRound is one round of testCloseRace: a new Locker holding two
// locks and waiting for one that b holds is closed while calls on it are
// in flight; round varies where Close lands among them.
func (s *suite) closeRaceRound(t *testing.T, ctx context.Context, b lock.Locker, round int) {
	a := s.newLocker(t, identity("a"))
	names := []string{lockName(t), lockName(t), lockName(t)}
	held := []lock.Lease{s.mustAcquire(t, ctx, a, names[0]), s.mustAcquire(t, ctx, a, names[1])}
	other := s.mustAcquire(t, ctx, b, names[2])
	const acquires = 12
	out := atOnce(acquires+len(held), func(i int) raced {
		if i >= acquires {
			return raced{"Release", result{err: held[i-acquires].Release(ctx)}}
		}
		le, err := excl.call(ctx, a, names[i%len(names)], i%2 == 1)
		return raced{excl.op(i%2 == 1), result{lease: le, err: err}}
	}, func() {
		for range round * 50 {
			runtime.Gosched()
		}
		if err := a.Close(); err != nil {
			t.Errorf("round %d: Close() = %v; want nil", round, err)
		}
	})
	checkRaced(t, ctx, round, out, held)
	s.noOrphans(t, names[0], "Close racing Acquire and Release")
	s.noOrphans(t, names[1], "Close racing Acquire and Release")
	s.checkRecords(t, names[2], 1, "Close racing waiters")
	mustRelease(t, ctx, other)
	s.noOrphans(t, names[2], "Release")
}

// checkRaced fails t unless every acquisition that raced Close returned
// an error wrapping ErrClosed (or ErrLocked for a try) or a lease that
// Close ended, and every Release of the held leases returned nil or an
// error that says the lease had ended.
func checkRaced(t *testing.T, ctx context.Context, round int, out []raced, held []lock.Lease) {
	t.Helper()
	for _, r := range out {
		switch {
		case r.op == "Release":
			if r.err != nil && !errorsIsAny(r.err, lock.ErrReleased, lock.ErrLost, lock.ErrClosed) {
				t.Errorf("round %d: Release() racing Close = %v; want nil or an error wrapping %v or %v", round, r.err, lock.ErrReleased, lock.ErrClosed)
			}
		case r.err == nil && r.lease == nil:
			t.Errorf("round %d: %s racing Close = nil lease, nil error", round, r.op)
		case r.err == nil:
			// Granted before Close: Close ended it.
			if !isClosed(r.lease.Done()) {
				t.Errorf("round %d: %s racing Close returned lease %q token %d, still held after Close returned; want it ended", round, r.op, r.lease.Name(), r.lease.Token())
			}
			if err := r.lease.Release(ctx); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
				t.Errorf("round %d: Release() of a lease ended by Close = %v; want an error wrapping %v or %v", round, err, lock.ErrReleased, lock.ErrLost)
			}
		case r.lease != nil:
			t.Errorf("round %d: %s racing Close = %v, %v; want no lease with an error", round, r.op, r.lease, r.err)
		case !errorsIsAny(r.err, lock.ErrClosed, lock.ErrLocked):
			t.Errorf("round %d: %s racing Close = %v; want a lease or an error wrapping %v (or %v from TryAcquire)", round, r.op, r.err, lock.ErrClosed, lock.ErrLocked)
		}
	}
	for _, le := range held {
		if !isClosed(le.Done()) {
			t.Errorf("round %d: lease %q: Done() open after Release and Close returned; want closed", round, le.Name())
		}
	}
}
