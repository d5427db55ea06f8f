package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// suite holds what every subtest needs.
type suite struct {
	h       Harness
	o       Options
	expirer SessionExpirer // nil if h does not implement it
	lister  RecordLister   // nil if h does not implement it
}

type subtest struct {
	name string
	fn   func(t *testing.T)
}

func (s *suite) subtests() []subtest {
	return []subtest{
		{"AcquireRelease", s.testAcquireRelease},
		{"TryAcquire", s.testTryAcquire},
		{"TokensIncrease", s.testTokensIncrease},
		{"SameLockerExcludes", s.testSameLockerExcludes},
		{"MutualExclusion", s.testMutualExclusion},
		{"FIFO", s.testFIFO},
		{"CancelWait", s.testCancelWait},
		{"DeadlineWait", s.testDeadlineWait},
		{"CancelledContext", s.testCancelledContext},
		{"Holder", s.testHolder},
		{"ReleaseTwice", s.testReleaseTwice},
		{"Close", s.testClose},
		{"InvalidName", s.testInvalidName},
		{"LongName", s.testLongName},
		{"IndependentNames", s.testIndependentNames},
		{"SessionExpiry", s.testSessionExpiry},
		{"SessionExpiryWaiter", s.testSessionExpiryWaiter},
		{"Observe", s.testObserve},
	}
}

// newLocker returns a Locker from the harness that is closed when t ends.
func (s *suite) newLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	l := s.h.NewLocker(t, identity)
	if l == nil {
		t.Fatalf("NewLocker(%q) = nil", identity)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
	})
	return l
}

// identity returns an identity unique to this run, so that a Holder check
// cannot pass by matching a record another run left behind.
func identity(who string) string {
	return fmt.Sprintf("locktest-%s-%s", who, randHex(3))
}

// lockName returns a valid lock name that no other test or run uses.
func lockName(t *testing.T) string {
	t.Helper()
	b := []byte(t.Name())
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 150 {
		b = b[len(b)-150:]
	}
	return "locktest/" + string(b) + "-" + randHex(4)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}

// ctx returns a context for the calls of one subtest, cancelled when t
// ends. It outlasts the waits bounded by Options.Timeout, so that a call
// that hangs is reported as hanging rather than as failing with ctx's
// error.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.o.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// result is what a background Acquire returned.
type result struct {
	lease lock.Lease
	err   error
}

// goAcquire runs l.Acquire in a goroutine and delivers its result. The
// goroutine ends when Acquire returns: at the latest when ctx ends or when
// the Locker is closed by t's cleanup. A lease nobody collects is released
// by that Close.
func goAcquire(ctx context.Context, l lock.Locker, name string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		ch <- result{le, err}
	}()
	return ch
}

// await waits for a background Acquire to return.
func (s *suite) await(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r
	case <-timer.C:
		t.Fatalf("%s did not return within %v", what, s.o.Timeout)
		return result{}
	}
}

// awaitLease waits for a background Acquire to return a lease.
func (s *suite) awaitLease(t *testing.T, ch <-chan result, what string) lock.Lease {
	t.Helper()
	r := s.await(t, ch, what)
	if r.err != nil {
		t.Fatalf("%s = %v; want a lease", what, r.err)
	}
	if r.lease == nil {
		t.Fatalf("%s = nil lease, nil error", what)
	}
	return r.lease
}

// notReturned fails t if a background Acquire has returned.
func notReturned(t *testing.T, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v, %v) while the lock was held; want it to wait", what, r.lease, r.err)
	default:
	}
}

// waitRecords waits until name has n records: with a RecordLister by
// polling it, without one by waiting Options.Settle, the only place where
// the suite relies on time to order steps.
func (s *suite) waitRecords(t *testing.T, name string, n int, why string) {
	t.Helper()
	if s.lister == nil {
		time.Sleep(s.o.Settle)
		return
	}
	deadline := time.Now().Add(s.o.Timeout)
	for {
		recs := s.lister.Records(t, name)
		if len(recs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Records(%q) = %q after %v; want %d records", why, name, recs, s.o.Timeout, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// noOrphans checks, with a RecordLister, that name has no record left, or
// gets none within Options.Timeout (a backend may delete asynchronously).
func (s *suite) noOrphans(t *testing.T, name string, after string) {
	t.Helper()
	if s.lister == nil {
		return
	}
	deadline := time.Now().Add(s.o.Timeout)
	for {
		recs := s.lister.Records(t, name)
		if len(recs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after %s: Records(%q) = %q; want none (orphaned records)", after, name, recs)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkRecords checks, with a RecordLister, that name has n records now.
func (s *suite) checkRecords(t *testing.T, name string, n int, when string) {
	t.Helper()
	if s.lister == nil {
		return
	}
	if recs := s.lister.Records(t, name); len(recs) != n {
		t.Errorf("%s: Records(%q) = %q; want %d records", when, name, recs, n)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitDone waits for a lease's Done channel.
func (s *suite) waitDone(t *testing.T, le lock.Lease, what string) {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case <-le.Done():
	case <-timer.C:
		t.Fatalf("%s: Done() not closed within %v", what, s.o.Timeout)
	}
}

// mustAcquire acquires name on l or stops the test.
func (s *suite) mustAcquire(t *testing.T, ctx context.Context, l lock.Locker, name string) lock.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
	}
	if le == nil {
		t.Fatalf("Acquire(%q) = nil lease, nil error", name)
	}
	return le
}

// mustRelease releases le or fails the test.
func mustRelease(t *testing.T, ctx context.Context, le lock.Lease) {
	t.Helper()
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() of %q token %d = %v; want nil", le.Name(), le.Token(), err)
	}
}

// checkHeld checks the state of a lease that should be held.
func checkHeld(t *testing.T, le lock.Lease, name string) {
	t.Helper()
	if got := le.Name(); got != name {
		t.Errorf("Name() = %q; want %q", got, name)
	}
	if le.Token() == 0 {
		t.Errorf("Token() = 0; want a non-zero token")
	}
	if err := le.Err(); err != nil {
		t.Errorf("Err() = %v while held; want nil", err)
	}
	if isClosed(le.Done()) {
		t.Errorf("Done() closed while held; want open")
	}
}

// checkReleased checks the state of a lease that Release ended.
func checkReleased(t *testing.T, le lock.Lease) {
	t.Helper()
	if !isClosed(le.Done()) {
		t.Errorf("Done() open after Release returned; want closed")
	}
	if err := le.Err(); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("Err() = %v after Release; want an error wrapping %v", err, lock.ErrReleased)
	}
}

func (s *suite) holderIs(t *testing.T, ctx context.Context, l lock.Locker, name string, want lock.Holder) {
	t.Helper()
	got, err := l.Holder(ctx, name)
	if err != nil || got != want {
		t.Errorf("Holder(%q) = %+v, %v; want %+v, nil", name, got, err, want)
	}
}

func (s *suite) notHeld(t *testing.T, ctx context.Context, l lock.Locker, name string) {
	t.Helper()
	if got, err := l.Holder(ctx, name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder(%q) = %+v, %v; want an error wrapping %v", name, got, err, lock.ErrNotHeld)
	}
}

func (s *suite) testAcquireRelease(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	l := s.newLocker(t, identity("a"))

	le := s.mustAcquire(t, ctx, l, name)
	checkHeld(t, le, name)
	s.checkRecords(t, name, 1, "while held")
	mustRelease(t, ctx, le)
	checkReleased(t, le)
	s.noOrphans(t, name, "Release")

	// The lock is free again, with a higher token.
	le2 := s.mustAcquire(t, ctx, l, name)
	checkHeld(t, le2, name)
	if le2.Token() <= le.Token() {
		t.Errorf("second grant Token() = %d; want > %d (the first grant's)", le2.Token(), le.Token())
	}
	mustRelease(t, ctx, le2)
	s.noOrphans(t, name, "second Release")
}

func (s *suite) testTryAcquire(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a := s.newLocker(t, identity("a"))
	b := s.newLocker(t, identity("b"))

	le, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q) of a free lock = %v; want a lease", name, err)
	}
	checkHeld(t, le, name)
	for _, c := range []struct {
		who string
		l   lock.Locker
	}{{"another Locker", b}, {"the holding Locker", a}} {
		got, err := c.l.TryAcquire(ctx, name)
		if !errors.Is(err, lock.ErrLocked) {
			t.Errorf("TryAcquire(%q) on %s while held = %v, %v; want an error wrapping %v", name, c.who, got, err, lock.ErrLocked)
		}
		if got != nil {
			t.Errorf("TryAcquire(%q) on %s while held returned a lease %v with the error", name, c.who, got)
		}
	}
	s.checkRecords(t, name, 1, "after TryAcquire returned ErrLocked")
	checkHeld(t, le, name)
	mustRelease(t, ctx, le)

	le2, err := b.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q) after Release = %v; want a lease", name, err)
	}
	if le2.Token() <= le.Token() {
		t.Errorf("TryAcquire after Release: Token() = %d; want > %d", le2.Token(), le.Token())
	}
	mustRelease(t, ctx, le2)
	s.noOrphans(t, name, "Release")
}

func (s *suite) testTokensIncrease(t *testing.T) {
	name := lockName(t)
	lockers := []lock.Locker{
		s.newLocker(t, identity("a")),
		s.newLocker(t, identity("b")),
		s.newLocker(t, identity("c")),
	}
	var prev fencing.Token
	for i := range s.o.Rounds {
		ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
		l := lockers[i%len(lockers)]
		var le lock.Lease
		var err error
		if i%2 == 0 {
			le, err = l.Acquire(ctx, name)
		} else {
			le, err = l.TryAcquire(ctx, name)
		}
		if err != nil {
			cancel()
			t.Fatalf("round %d: acquire = %v; want a lease", i, err)
		}
		if tok := le.Token(); tok <= prev {
			t.Errorf("round %d: Token() = %d; want > %d (the previous grant's)", i, tok, prev)
		}
		prev = le.Token()
		mustRelease(t, ctx, le)
		cancel()
	}
	s.noOrphans(t, name, "the last Release")
}

func (s *suite) testSameLockerExcludes(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	l := s.newLocker(t, identity("a"))

	first := s.mustAcquire(t, ctx, l, name)
	ch := goAcquire(ctx, l, name)
	s.waitRecords(t, name, 2, "second Acquire on the same Locker")
	notReturned(t, ch, "second Acquire on the same Locker")
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire(%q) on the holding Locker = %v; want an error wrapping %v", name, err, lock.ErrLocked)
	}
	mustRelease(t, ctx, first)
	second := s.awaitLease(t, ch, "second Acquire on the same Locker")
	if second.Token() <= first.Token() {
		t.Errorf("second lease Token() = %d; want > %d", second.Token(), first.Token())
	}
	if err := first.Err(); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("first lease Err() = %v after its Release; want %v", err, lock.ErrReleased)
	}
	checkHeld(t, second, name)
	mustRelease(t, ctx, second)
	s.noOrphans(t, name, "Release")
}

// grant is one critical section of the mutual-exclusion subtest, timed by a
// logical clock.
type grant struct {
	start, end int64
	token      fencing.Token
	who        string
}

func (s *suite) testMutualExclusion(t *testing.T) {
	name := lockName(t)
	perG := max(1, s.o.Rounds/s.o.Goroutines)
	var (
		inside     atomic.Int32 // goroutines in the critical section
		attempting atomic.Int32 // goroutines in Acquire
		active     atomic.Int32 // goroutines not done with their rounds
		clock      atomic.Int64
		mu         sync.Mutex
		grants     []grant
		wg         sync.WaitGroup
	)
	active.Store(int32(s.o.Lockers * s.o.Goroutines))
	for li := range s.o.Lockers {
		id := identity(fmt.Sprintf("l%d", li))
		l := s.newLocker(t, id)
		for gi := range s.o.Goroutines {
			who := fmt.Sprintf("locker %d goroutine %d", li, gi)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer active.Add(-1)
				for r := range perG {
					ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
					attempting.Add(1)
					le, err := l.Acquire(ctx, name)
					attempting.Add(-1)
					if err != nil {
						cancel()
						t.Errorf("%s round %d: Acquire = %v; want a lease", who, r, err)
						return
					}
					start := clock.Add(1)
					if n := inside.Add(1); n != 1 {
						t.Errorf("%s round %d: %d holders in the critical section at once", who, r, n)
					}
					// Hold the section until every other goroutine is
					// trying to acquire (or briefly, if that never
					// happens), so that a Locker that would let a second
					// holder in does so while the first is inside.
					deadline := time.Now().Add(50 * time.Millisecond)
					for inside.Load() == 1 && attempting.Load() < active.Load()-1 && time.Now().Before(deadline) {
						runtime.Gosched()
					}
					for i := 0; i < 100 && inside.Load() == 1; i++ {
						runtime.Gosched()
					}
					// The backend must agree that this lease holds the
					// lock; the round trip also widens the window in
					// which a second holder would be caught.
					if h, err := l.Holder(ctx, name); err != nil || h.Token != le.Token() {
						t.Errorf("%s round %d: Holder() inside the critical section = %+v, %v; want token %d", who, r, h, err, le.Token())
					}
					inside.Add(-1)
					end := clock.Add(1)
					mu.Lock()
					grants = append(grants, grant{start, end, le.Token(), who})
					mu.Unlock()
					if err := le.Release(ctx); err != nil {
						t.Errorf("%s round %d: Release = %v; want nil", who, r, err)
					}
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	slices.SortFunc(grants, func(a, b grant) int { return int(a.start - b.start) })
	for i := 1; i < len(grants); i++ {
		p, g := grants[i-1], grants[i]
		if g.start < p.end {
			t.Errorf("critical sections overlap: %s (token %d) [%d,%d] and %s (token %d) [%d,%d]",
				p.who, p.token, p.start, p.end, g.who, g.token, g.start, g.end)
		}
		if g.token <= p.token {
			t.Errorf("tokens not increasing in grant order: %s got %d after %s got %d", g.who, g.token, p.who, p.token)
		}
	}
	if want := s.o.Lockers * s.o.Goroutines * perG; len(grants) != want && !t.Failed() {
		t.Errorf("%d grants; want %d", len(grants), want)
	}
	s.noOrphans(t, name, "the last Release")
}

func (s *suite) testFIFO(t *testing.T) {
	var wg sync.WaitGroup
	// Registered first so that it runs last, after Close of the Lockers
	// has interrupted any waiter still blocked.
	t.Cleanup(wg.Wait)
	ctx := s.ctx(t)
	name := lockName(t)
	const n = 4
	lockers := []lock.Locker{
		s.newLocker(t, identity("a")),
		s.newLocker(t, identity("b")),
		s.newLocker(t, identity("c")),
	}
	holder := s.mustAcquire(t, ctx, lockers[0], name)

	type granted struct {
		i     int
		token fencing.Token
		err   error
	}
	order := make(chan granted, n)
	for i := range n {
		// Waiter i uses Locker (i+1)%3, so the queue mixes waiters of
		// the holder's Locker and of others.
		l := lockers[(i+1)%len(lockers)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			le, err := l.Acquire(ctx, name)
			if err != nil {
				order <- granted{i, 0, err}
				return
			}
			// Report before releasing: the next grant cannot happen
			// before this send, so the channel holds grant order.
			order <- granted{i, le.Token(), nil}
			if err := le.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release = %v; want nil", i, err)
			}
		}()
		s.waitRecords(t, name, i+2, fmt.Sprintf("waiter %d queued", i))
	}
	mustRelease(t, ctx, holder)
	prev := holder.Token()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	for want := range n {
		select {
		case g := <-order:
			if g.err != nil {
				t.Fatalf("waiter %d: Acquire = %v; want a lease", g.i, g.err)
			}
			if g.i != want {
				t.Errorf("grant %d went to waiter %d; want waiter %d (arrival order)", want, g.i, want)
			}
			if g.token <= prev {
				t.Errorf("waiter %d: Token() = %d; want > %d", g.i, g.token, prev)
			}
			prev = g.token
		case <-timer.C:
			t.Fatalf("only %d of %d waiters were granted within %v", want, n, s.o.Timeout)
		}
	}
	wg.Wait()
	s.noOrphans(t, name, "every waiter released")
}

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

func (s *suite) testHolder(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	idA, idB := identity("a"), identity("b")
	a := s.newLocker(t, idA)
	b := s.newLocker(t, idB)

	s.notHeld(t, ctx, a, name)
	le := s.mustAcquire(t, ctx, a, name)
	want := lock.Holder{Identity: idA, Token: le.Token()}
	s.holderIs(t, ctx, a, name, want)
	s.holderIs(t, ctx, b, name, want)

	// A waiter does not change the holder.
	ch := goAcquire(ctx, b, name)
	s.waitRecords(t, name, 2, "waiter queued")
	s.holderIs(t, ctx, b, name, want)

	mustRelease(t, ctx, le)
	le2 := s.awaitLease(t, ch, "waiter's Acquire")
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: idB, Token: le2.Token()})
	mustRelease(t, ctx, le2)
	s.notHeld(t, ctx, a, name)
	s.notHeld(t, ctx, b, name)
	s.noOrphans(t, name, "Release")
}

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

	if le, err := a.Acquire(ctx, lockName(t)); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Acquire on a closed Locker = %v, %v; want an error wrapping %v", le, err, lock.ErrClosed)
	}
	if le, err := a.TryAcquire(ctx, lockName(t)); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryAcquire on a closed Locker = %v, %v; want an error wrapping %v", le, err, lock.ErrClosed)
	}
	if h, err := a.Holder(ctx, n3); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Holder on a closed Locker = %+v, %v; want an error wrapping %v", h, err, lock.ErrClosed)
	}
	if o, ok := a.(lock.Observer); ok {
		if _, _, err := o.Observe(ctx, n3); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("Observe on a closed Locker = %v; want an error wrapping %v", err, lock.ErrClosed)
		}
	}

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

// invalidNames are names every backend must refuse.
var invalidNames = []string{
	"",
	"/",
	"/a",
	"a/",
	"a//b",
	".",
	"..",
	"a/./b",
	"a/../b",
	"a b",
	"a\x00b",
	"a\nb",
	"a*",
	"a%2Fb",
	"ä",
	strings.Repeat("a", lock.MaxNameLen+1),
}

func (s *suite) testInvalidName(t *testing.T) {
	ctx := s.ctx(t)
	l := s.newLocker(t, identity("a"))
	o, _ := l.(lock.Observer)
	for _, name := range invalidNames {
		if le, err := l.Acquire(ctx, name); !errors.Is(err, lock.ErrInvalidName) || le != nil {
			t.Errorf("Acquire(%q) = %v, %v; want nil, an error wrapping %v", name, le, err, lock.ErrInvalidName)
		}
		if le, err := l.TryAcquire(ctx, name); !errors.Is(err, lock.ErrInvalidName) || le != nil {
			t.Errorf("TryAcquire(%q) = %v, %v; want nil, an error wrapping %v", name, le, err, lock.ErrInvalidName)
		}
		if h, err := l.Holder(ctx, name); !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("Holder(%q) = %+v, %v; want an error wrapping %v", name, h, err, lock.ErrInvalidName)
		}
		if o != nil {
			if _, _, err := o.Observe(ctx, name); !errors.Is(err, lock.ErrInvalidName) {
				t.Errorf("Observe(%q) = %v; want an error wrapping %v", name, err, lock.ErrInvalidName)
			}
		}
	}
}

func (s *suite) testLongName(t *testing.T) {
	ctx := s.ctx(t)
	l := s.newLocker(t, identity("a"))
	base := lockName(t) + "/"
	name := base + strings.Repeat("x", lock.MaxNameLen-len(base))
	le := s.mustAcquire(t, ctx, l, name)
	checkHeld(t, le, name)
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "Release")
}

// testIndependentNames checks that names sharing a prefix are distinct
// locks: a backend that lists records by key prefix must not mix them up.
func (s *suite) testIndependentNames(t *testing.T) {
	ctx := s.ctx(t)
	base := lockName(t)
	names := []string{base, base + "/child", base + "x", base + "/child/grandchild"}
	id := identity("a")
	a := s.newLocker(t, id)
	leases := make([]lock.Lease, len(names))
	for i, n := range names {
		le, err := a.TryAcquire(ctx, n)
		if err != nil {
			t.Fatalf("TryAcquire(%q) while only other names are held = %v; want a lease", n, err)
		}
		leases[i] = le
	}
	for i, n := range names {
		s.holderIs(t, ctx, a, n, lock.Holder{Identity: id, Token: leases[i].Token()})
		s.checkRecords(t, n, 1, "each name held once")
	}
	// Releasing the parent frees only the parent.
	mustRelease(t, ctx, leases[0])
	s.notHeld(t, ctx, a, names[0])
	for i, n := range names[1:] {
		s.holderIs(t, ctx, a, n, lock.Holder{Identity: id, Token: leases[i+1].Token()})
		mustRelease(t, ctx, leases[i+1])
	}
	for _, n := range names {
		s.noOrphans(t, n, "Release")
	}
}

func (s *suite) testSessionExpiry(t *testing.T) {
	if s.expirer == nil {
		t.Skip("the Harness does not implement SessionExpirer")
	}
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
	if s.expirer == nil {
		t.Skip("the Harness does not implement SessionExpirer")
	}
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

func (s *suite) testObserve(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	idA, idB := identity("a"), identity("b")
	watcher := s.newLocker(t, identity("w"))
	o, ok := watcher.(lock.Observer)
	if !ok {
		t.Skip("the Locker does not implement lock.Observer")
	}
	a := s.newLocker(t, idA)
	b := s.newLocker(t, idB)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := o.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe(%q) = %v; want nil", name, err)
	}
	next := func(what string) lock.Holder {
		t.Helper()
		timer := time.NewTimer(s.o.Timeout)
		defer timer.Stop()
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("%s: observation ended: %v", what, errf())
			}
			return h
		case <-timer.C:
			t.Fatalf("%s: no holder observed within %v", what, s.o.Timeout)
			return lock.Holder{}
		}
	}
	expect := func(want lock.Holder, what string) {
		t.Helper()
		if got := next(what); got != want {
			t.Errorf("%s: observed %+v; want %+v", what, got, want)
		}
	}
	expect(lock.Holder{}, "initial state (free)")

	// A few quick grants, not read as they happen: none may be dropped
	// (unless Options.ObserveMaySkip). A grant to b, awaited, ends the
	// burst.
	const cycles = 5
	var want []lock.Holder
	for range cycles {
		le := s.mustAcquire(t, ctx, a, name)
		want = append(want, lock.Holder{Identity: idA, Token: le.Token()}, lock.Holder{})
		mustRelease(t, ctx, le)
	}
	end := s.mustAcquire(t, ctx, b, name)
	wantEnd := lock.Holder{Identity: idB, Token: end.Token()}
	if !s.o.ObserveMaySkip {
		for i, w := range want {
			expect(w, fmt.Sprintf("change %d of %d quick grants", i+1, len(want)))
		}
		expect(wantEnd, "grant after quick grants")
	} else {
		for rest := want; ; {
			got := next("quick grants")
			if got == wantEnd {
				break
			}
			i := slices.Index(rest, got)
			if i < 0 {
				t.Fatalf("quick grants: observed %+v; want, in order, a subsequence of %+v, then %+v", got, want, wantEnd)
			}
			rest = rest[i+1:]
		}
	}
	mustRelease(t, ctx, end)
	expect(lock.Holder{}, "released after quick grants")

	// A hand-over from a to a queued b: free in between is allowed.
	la := s.mustAcquire(t, ctx, a, name)
	expect(lock.Holder{Identity: idA, Token: la.Token()}, "a acquired")
	waiting := goAcquire(ctx, b, name)
	s.waitRecords(t, name, 2, "b queued")
	mustRelease(t, ctx, la)
	lb := s.awaitLease(t, waiting, "b's Acquire")
	wantB := lock.Holder{Identity: idB, Token: lb.Token()}
	if got := next("hand-over to b"); got != wantB {
		if got != (lock.Holder{}) {
			t.Errorf("hand-over to b: observed %+v; want %+v or the free state", got, wantB)
		}
		expect(wantB, "hand-over to b, after free")
	}
	mustRelease(t, ctx, lb)
	expect(lock.Holder{}, "b released")

	// An observation that starts while the lock is held sees the holder
	// first.
	la = s.mustAcquire(t, ctx, a, name)
	ch2, errf2, err := o.Observe(octx, name)
	if err != nil {
		t.Fatalf("second Observe(%q) = %v; want nil", name, err)
	}
	select {
	case h := <-ch2:
		if w := (lock.Holder{Identity: idA, Token: la.Token()}); h != w {
			t.Errorf("second observation's first holder = %+v; want %+v", h, w)
		}
	case <-time.After(s.o.Timeout):
		t.Fatalf("second observation: no holder within %v", s.o.Timeout)
	}
	mustRelease(t, ctx, la)

	cancel()
	for i, c := range []struct {
		ch   <-chan lock.Holder
		errf func() error
	}{{ch, errf}, {ch2, errf2}} {
		s.drainClosed(t, c.ch, fmt.Sprintf("observation %d after cancel", i+1))
		if err := c.errf(); !errors.Is(err, context.Canceled) {
			t.Errorf("observation %d: error after cancel = %v; want an error wrapping %v", i+1, err, context.Canceled)
		}
	}
	s.noOrphans(t, name, "observation")
}

// drainClosed reads ch until it is closed.
func (s *suite) drainClosed(t *testing.T, ch <-chan lock.Holder, what string) {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("%s: channel not closed within %v", what, s.o.Timeout)
		}
	}
}
