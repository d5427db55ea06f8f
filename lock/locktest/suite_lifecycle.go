package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testReleaseTwice(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	id := identity("a")
	l := s.newLocker(t, id)

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
	checkHeld(t, le2, name)
	s.holderIs(t, ctx, l, name, lock.Holder{Identity: id, Token: le2.Token()})
	mustRelease(t, ctx, le2)
	s.noOrphans(t, name, "Release")
}

// checkClosedLocker fails t unless every call on the closed Locker a
// (name is a lock it waited for) returns an error wrapping ErrClosed.
func checkClosedLocker(t *testing.T, ctx context.Context, a lock.Locker, name string) {
	t.Helper()
	if le, err := a.Acquire(ctx, lockName(t)); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Acquire on a closed Locker = %v, %v; want an error wrapping %v", le, err, lock.ErrClosed)
	}
	if le, err := a.TryAcquire(ctx, lockName(t)); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryAcquire on a closed Locker = %v, %v; want an error wrapping %v", le, err, lock.ErrClosed)
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

func (s *suite) testClose(t *testing.T) {
	ctx := s.ctx(t)
	n1, n2, n3 := lockName(t), lockName(t), lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	le1 := s.mustAcquire(t, ctx, a, n1)
	le2 := s.mustAcquire(t, ctx, a, n2)
	other := s.mustAcquire(t, ctx, b, n3)
	waiting := goAcquire(ctx, a, n3)
	s.waitRecords(t, n3, 2, "waiter queued")

	if err := a.Close(); err != nil {
		t.Errorf("Close() = %v; want nil", err)
	}
	for _, le := range []lock.Lease{le1, le2} {
		if !isClosed(le.Done()) {
			t.Errorf("lease %q: Done() open after Close returned; want closed", le.Name())
		}
		if err := le.Err(); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
			t.Errorf("lease %q: Err() = %v after Close; want an error wrapping %v or %v", le.Name(), err, lock.ErrReleased, lock.ErrLost)
		}
		if err := le.Release(ctx); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
			t.Errorf("lease %q: Release() after Close = %v; want an error wrapping %v or %v", le.Name(), err, lock.ErrReleased, lock.ErrLost)
		}
	}
	r := s.await(t, waiting, "Acquire interrupted by Close")
	if !errors.Is(r.err, lock.ErrClosed) {
		t.Errorf("Acquire interrupted by Close = %v, %v; want an error wrapping %v", r.lease, r.err, lock.ErrClosed)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	checkClosedLocker(t, ctx, a, n3)

	// Close freed the locks at once.
	for _, n := range []string{n1, n2} {
		s.noOrphans(t, n, "Close")
		le, err := b.TryAcquire(ctx, n)
		if err != nil {
			t.Errorf("TryAcquire(%q) after its holder's Locker closed = %v; want a lease", n, err)
			continue
		}
		mustRelease(t, ctx, le)
	}
	s.checkRecords(t, n3, 1, "after Close interrupted a waiter")
	mustRelease(t, ctx, other)
	for _, n := range []string{n1, n2, n3} {
		s.noOrphans(t, n, "Close and Release")
	}
}

func (s *suite) testSessionExpiry(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	idA, idB := identity("a"), identity("b")
	a := s.newLocker(t, idA)
	b := s.newLocker(t, idB)

	lost := s.mustAcquire(t, ctx, a, name)
	waiting := goAcquire(ctx, b, name)
	s.waitRecords(t, name, 2, "waiter queued")

	s.expirer.ExpireSession(t, a)
	s.waitDone(t, lost, "lease of an expired session")
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err() after session expiry = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if err := lost.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release() of a lost lease = %v; want an error wrapping %v", err, lock.ErrLost)
	}

	// Another Locker wins, with a higher token.
	le := s.awaitLease(t, waiting, "waiter's Acquire after the holder's session expired")
	if le.Token() <= lost.Token() {
		t.Errorf("Token() after expiry = %d; want > %d (the lost lease's)", le.Token(), lost.Token())
	}
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: idB, Token: le.Token()})
	mustRelease(t, ctx, le)

	// The same Locker acquires again, on a new session.
	again := s.mustAcquire(t, ctx, a, name)
	if again.Token() <= le.Token() {
		t.Errorf("Token() on a new session = %d; want > %d", again.Token(), le.Token())
	}
	checkHeld(t, again, name)
	s.holderIs(t, ctx, b, name, lock.Holder{Identity: idA, Token: again.Token()})
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("lost lease Err() after a new grant = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "session expiry and Release")
}

func (s *suite) testSessionExpiryWaiter(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	holder := s.mustAcquire(t, ctx, b, name)
	waiting := goAcquire(ctx, a, name)
	s.waitRecords(t, name, 2, "waiter queued")

	s.expirer.ExpireSession(t, a)
	r := s.await(t, waiting, "Acquire waiting on an expired session")
	if !errors.Is(r.err, lock.ErrLost) {
		t.Errorf("Acquire waiting on an expired session = %v, %v; want an error wrapping %v", r.lease, r.err, lock.ErrLost)
	}
	s.waitRecords(t, name, 1, "expired waiter's record deleted")
	checkHeld(t, holder, name)
	mustRelease(t, ctx, holder)

	le := s.mustAcquire(t, ctx, a, name)
	if le.Token() <= holder.Token() {
		t.Errorf("Token() on a new session = %d; want > %d", le.Token(), holder.Token())
	}
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "a waiter's session expiry")
}

// grantSeen is what a waiter saw at the moment its Acquire returned.
type grantSeen struct {
	result
	prevDone bool // the previous holder's Done was closed by then
}

// goAcquireAfter runs l.Acquire in a goroutine and reports, together with
// its result, whether prev's Done was already closed when Acquire returned.
// The check runs in the waiter's goroutine right after the grant, so it
// observes the order of the two events, not a time.
func goAcquireAfter(ctx context.Context, l lock.Locker, name string, prev lock.Lease) <-chan grantSeen {
	ch := make(chan grantSeen, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		ch <- grantSeen{result{le, err}, isClosed(prev.Done())}
	}()
	return ch
}

func (s *suite) awaitSeen(t *testing.T, ch <-chan grantSeen, what string) grantSeen {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case g := <-ch:
		if g.err != nil || g.lease == nil {
			t.Fatalf("%s = %v, %v; want a lease", what, g.lease, g.err)
		}
		return g
	case <-timer.C:
		t.Fatalf("%s did not return within %v", what, s.o.Timeout)
		return grantSeen{}
	}
}

// testDoneBeforeNextGrant checks that a released lease's Done is closed
// before a waiter on another Locker is granted the lock: a holder that
// watches Done must never overlap with the next holder.
func (s *suite) testDoneBeforeNextGrant(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	for round := range 3 {
		holder := s.mustAcquire(t, ctx, a, name)
		seen := goAcquireAfter(ctx, b, name, holder)
		s.waitRecords(t, name, 2, "waiter queued")
		mustRelease(t, ctx, holder)
		g := s.awaitSeen(t, seen, "waiter's Acquire after Release")
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
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	lost := s.mustAcquire(t, ctx, a, name)
	seen := goAcquireAfter(ctx, b, name, lost)
	s.waitRecords(t, name, 2, "waiter queued")
	s.staller.StallSession(t, a)
	g := s.awaitSeen(t, seen, "waiter's Acquire after the holder's session was lost")
	if !g.prevDone {
		t.Errorf("waiter granted token %d while the lost lease's Done() was still open; want Done closed before the next grant", g.lease.Token())
	}
	s.waitDone(t, lost, "lease of a lost session")
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err() after the session was lost = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	mustRelease(t, ctx, g.lease)
	s.noOrphans(t, name, "session loss and Release")
}

// testReleaseLostLease checks that releasing a lease lost with its session
// reports ErrLost and leaves alone a later grant of the same name to the
// same Locker, in its new session.
func (s *suite) testReleaseLostLease(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	id := identity("a")
	a := s.newLocker(t, id)
	b := s.newLocker(t, identity("b"))

	lost := s.mustAcquire(t, ctx, a, name)
	s.expirer.ExpireSession(t, a)
	s.waitDone(t, lost, "lease of an expired session")
	again := s.mustAcquire(t, ctx, a, name)
	want := lock.Holder{Identity: id, Token: again.Token()}

	for i := 1; i <= 2; i++ {
		if err := lost.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Release() #%d of a lost lease = %v; want an error wrapping %v", i, err, lock.ErrLost)
		}
	}
	if err := lost.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("lost lease Err() after Release = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	checkHeld(t, again, name)
	s.holderIs(t, ctx, b, name, want)
	s.checkRecords(t, name, 1, "after Release of a lost lease")
	if le, err := b.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire(%q) by another Locker after Release of a lost lease = %v, %v; want an error wrapping %v (the new grant holds)", name, le, err, lock.ErrLocked)
		if le != nil {
			_ = le.Release(ctx)
		}
	}
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "Release of a lost lease and of the new grant")
}

// testReleaseConcurrent checks that many concurrent Releases of one lease
// end it once: exactly one returns nil, the others errors wrapping
// ErrReleased, and the lock is freed.
func (s *suite) testReleaseConcurrent(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))
	const n = 8

	for round := range 3 {
		le := s.mustAcquire(t, ctx, a, name)
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- le.Release(ctx)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		nils := 0
		for err := range errs {
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
		other, err := b.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("round %d: TryAcquire(%q) after concurrent Release = %v; want a lease", round, name, err)
		}
		mustRelease(t, ctx, other)
	}
}

// testCloseConcurrent checks that concurrent Close calls each return only
// once the Locker is torn down (its leases ended, its observations ended),
// that later calls return nil, and that a waiting Acquire returns
// ErrClosed.
func (s *suite) testCloseConcurrent(t *testing.T) {
	ctx := s.ctx(t)
	n1, n2, n3 := lockName(t), lockName(t), lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	leases := []lock.Lease{s.mustAcquire(t, ctx, a, n1), s.mustAcquire(t, ctx, a, n2)}
	other := s.mustAcquire(t, ctx, b, n3)
	var waitRes result
	waitRet := make(chan struct{}) // closed when the waiting Acquire returned
	go func() {
		le, err := a.Acquire(ctx, n3)
		waitRes = result{le, err}
		close(waitRet)
	}()
	s.waitRecords(t, n3, 2, "waiter queued")
	var obs <-chan lock.Holder
	if o, ok := a.(lock.Observer); ok {
		ch, _, err := o.Observe(ctx, n1)
		if err != nil {
			t.Fatalf("Observe(%q) = %v; want nil", n1, err)
		}
		obs = ch
	}

	closeConcurrently(t, a, leases, obs)
	for i := 1; i <= 2; i++ {
		if err := a.Close(); err != nil {
			t.Errorf("Close() #%d after the concurrent ones = %v; want nil", i, err)
		}
	}
	select {
	case <-waitRet:
	case <-time.After(s.o.Timeout):
		t.Fatalf("Acquire interrupted by Close did not return within %v", s.o.Timeout)
	}
	if !errors.Is(waitRes.err, lock.ErrClosed) {
		t.Errorf("Acquire interrupted by Close = %v, %v; want an error wrapping %v", waitRes.lease, waitRes.err, lock.ErrClosed)
	}
	s.noOrphans(t, n1, "concurrent Close")
	s.noOrphans(t, n2, "concurrent Close")
	s.checkRecords(t, n3, 1, "after concurrent Close interrupted a waiter")
	mustRelease(t, ctx, other)
	s.noOrphans(t, n3, "Release")
}

// closeConcurrently calls a.Close from several goroutines at once, and
// fails t unless each returns nil once a is torn down: its leases ended,
// its observation obs (nil if none) ended.
func closeConcurrently(t *testing.T, a lock.Locker, leases []lock.Lease, obs <-chan lock.Holder) {
	t.Helper()
	const n = 6
	start := make(chan struct{})
	out := make(chan []string, n) // per Close: what was still going when it returned
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var going []string
			if err := a.Close(); err != nil {
				going = append(going, fmt.Sprintf("Close() #%d = %v; want nil", i, err))
			}
			out <- append(going, stillGoing(leases, obs)...)
		}()
	}
	close(start)
	wg.Wait()
	close(out)
	for going := range out {
		for _, g := range going {
			t.Errorf("when one of %d concurrent Close() calls returned: %s; want the Locker torn down", n, g)
		}
	}
}

// stillGoing says what of a closed Locker's leases and observation (obs,
// nil if none) has not ended.
func stillGoing(leases []lock.Lease, obs <-chan lock.Holder) []string {
	var going []string
	for _, le := range leases {
		if !isClosed(le.Done()) {
			going = append(going, fmt.Sprintf("lease %q: Done() open", le.Name()))
		} else if err := le.Err(); !errorsIsAny(err, lock.ErrReleased, lock.ErrLost) {
			going = append(going, fmt.Sprintf("lease %q: Err() = %v", le.Name(), err))
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

// raced is the outcome of an Acquire or TryAcquire (op) that raced Close.
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

	start := make(chan struct{})
	acqs := make(chan raced, 16)
	rels := make(chan error, len(held))
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			name := names[i%len(names)]
			if i%2 == 0 {
				le, err := a.Acquire(ctx, name)
				acqs <- raced{"Acquire", result{le, err}}
			} else {
				le, err := a.TryAcquire(ctx, name)
				acqs <- raced{"TryAcquire", result{le, err}}
			}
		}()
	}
	for _, le := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rels <- le.Release(ctx)
		}()
	}
	close(start)
	for range round * 50 {
		runtime.Gosched()
	}
	if err := a.Close(); err != nil {
		t.Errorf("round %d: Close() = %v; want nil", round, err)
	}
	wg.Wait()
	close(acqs)
	close(rels)
	checkRaced(t, ctx, round, acqs, rels, held)
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
func checkRaced(t *testing.T, ctx context.Context, round int, acqs <-chan raced, rels <-chan error, held []lock.Lease) {
	t.Helper()
	for r := range acqs {
		switch {
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
	for err := range rels {
		if err != nil && !errorsIsAny(err, lock.ErrReleased, lock.ErrLost, lock.ErrClosed) {
			t.Errorf("round %d: Release() racing Close = %v; want nil or an error wrapping %v or %v", round, err, lock.ErrReleased, lock.ErrClosed)
		}
	}
	for _, le := range held {
		if !isClosed(le.Done()) {
			t.Errorf("round %d: lease %q: Done() open after Release and Close returned; want closed", round, le.Name())
		}
	}
}
