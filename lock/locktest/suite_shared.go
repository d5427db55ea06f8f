package locktest

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// goCall runs acquire in a goroutine and delivers its result, like
// goAcquire.
func goCall(acquire func() (lock.Lease, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		le, err := acquire()
		ch <- result{le, err}
	}()
	return ch
}

// errNotShared is what the helpers report for a Locker that lacks an
// interface the check needs; the suite runs the check only when the
// harness's Lockers have it, so this means a harness mixes Locker types.
var errNotShared = errors.New("locktest: Locker lacks the optional interface the check needs")

// goShared runs l.AcquireShared in a goroutine.
func goShared(ctx context.Context, l lock.Locker, name string) <-chan result {
	return goCall(func() (lock.Lease, error) {
		sl, ok := l.(lock.SharedLocker)
		if !ok {
			return nil, errNotShared
		}
		return sl.AcquireShared(ctx, name)
	})
}

// trySharedErr calls l.TryAcquireShared.
func trySharedErr(ctx context.Context, l lock.Locker, name string) (lock.Lease, error) {
	sl, ok := l.(lock.SharedLocker)
	if !ok {
		return nil, errNotShared
	}
	return sl.TryAcquireShared(ctx, name)
}

// mustShared acquires a shared grant of name on l or stops the test.
func (s *suite) mustShared(t *testing.T, ctx context.Context, l lock.Locker, name, what string) lock.Lease {
	t.Helper()
	le := s.awaitLease(t, goShared(ctx, l, name), what)
	checkHeld(t, le, name)
	return le
}

// mustTryShared calls TryAcquireShared, which must grant.
func mustTryShared(t *testing.T, ctx context.Context, l lock.Locker, name, when string) lock.Lease {
	t.Helper()
	le, err := trySharedErr(ctx, l, name)
	if err != nil || le == nil {
		t.Fatalf("TryAcquireShared(%q) %s = %v, %v; want a lease", name, when, le, err)
	}
	checkHeld(t, le, name)
	return le
}

// refused checks that a Try call returned no lease and an error wrapping
// want.
func refused(t *testing.T, call string, le lock.Lease, err error, want error) {
	t.Helper()
	if !errors.Is(err, want) || le != nil {
		t.Errorf("%s = %v, %v; want nil, an error wrapping %v", call, le, err, want)
	}
	if le != nil {
		_ = le.Release(context.Background())
	}
}

func (s *suite) testSharedExclusion(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a, b, c := s.newLocker(t, identity("a")), s.newLocker(t, identity("b")), s.newLocker(t, identity("c"))

	r1 := s.mustShared(t, ctx, a, name, "AcquireShared of a free lock")
	r2 := s.mustShared(t, ctx, b, name, "AcquireShared while another Locker's reader holds")
	r3 := mustTryShared(t, ctx, a, name, "while readers, one of the same Locker, hold")
	s.checkRecords(t, name, 3, "three readers")

	// Readers exclude a writer, on their own Locker and on another.
	le, err := a.TryAcquire(ctx, name)
	refused(t, "TryAcquire on a reader's Locker while readers hold", le, err, lock.ErrLocked)
	le, err = c.TryAcquire(ctx, name)
	refused(t, "TryAcquire while readers hold", le, err, lock.ErrLocked)
	w := goAcquire(ctx, c, name)
	s.waitRecords(t, name, 4, "writer queued behind readers")
	notReturned(t, w, "writer's Acquire while readers hold")
	mustRelease(t, ctx, r1)
	mustRelease(t, ctx, r2)
	notReturned(t, w, "writer's Acquire while one reader still holds")
	mustRelease(t, ctx, r3)
	wl := s.awaitLease(t, w, "writer's Acquire after the readers released")
	checkHeld(t, wl, name)

	// A writer excludes readers, and other writers.
	le, err = trySharedErr(ctx, c, name)
	refused(t, "TryAcquireShared on the writer's Locker while it holds", le, err, lock.ErrLocked)
	rch := goShared(ctx, a, name)
	s.waitRecords(t, name, 2, "reader queued behind a writer")
	wch := goAcquire(ctx, b, name)
	s.waitRecords(t, name, 3, "writer queued behind a reader")
	notReturned(t, rch, "AcquireShared while a writer holds")
	notReturned(t, wch, "second writer's Acquire while a writer holds")
	mustRelease(t, ctx, wl)
	rl := s.awaitLease(t, rch, "reader's AcquireShared after the writer released")
	if rl.Token() <= wl.Token() {
		t.Errorf("reader Token() = %d; want > %d (the writer's before it)", rl.Token(), wl.Token())
	}
	notReturned(t, wch, "writer's Acquire while a reader holds")
	mustRelease(t, ctx, rl)
	mustRelease(t, ctx, s.awaitLease(t, wch, "second writer's Acquire"))
	s.noOrphans(t, name, "every grant released")
}

func (s *suite) testSharedFIFO(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	c, d := s.newLocker(t, identity("c")), s.newLocker(t, identity("d"))

	r1 := s.mustShared(t, ctx, a, name, "first reader")
	w := goAcquire(ctx, b, name)
	s.waitRecords(t, name, 2, "writer queued behind a reader")
	late1 := goShared(ctx, c, name)
	s.waitRecords(t, name, 3, "reader queued behind the writer")
	late2 := goShared(ctx, d, name)
	s.waitRecords(t, name, 4, "second reader queued behind the writer")
	notReturned(t, w, "writer's Acquire while a reader holds")
	notReturned(t, late1, "AcquireShared of a reader that arrived after a queued writer")
	notReturned(t, late2, "AcquireShared of a second reader that arrived after a queued writer")

	mustRelease(t, ctx, r1)
	wl := s.awaitLease(t, w, "writer's Acquire after the first reader released")
	if wl.Token() <= r1.Token() {
		t.Errorf("writer Token() = %d; want > %d (the reader admitted before it)", wl.Token(), r1.Token())
	}
	notReturned(t, late1, "AcquireShared queued behind a holding writer")
	notReturned(t, late2, "second AcquireShared queued behind a holding writer")

	// Both readers get in together: neither releases before both hold.
	mustRelease(t, ctx, wl)
	l1 := s.awaitLease(t, late1, "first late reader after the writer released")
	l2 := s.awaitLease(t, late2, "second late reader while the first holds")
	for _, le := range []lock.Lease{l1, l2} {
		checkHeld(t, le, name)
		if le.Token() <= wl.Token() {
			t.Errorf("late reader Token() = %d; want > %d (the writer's before it)", le.Token(), wl.Token())
		}
	}
	if l2.Token() <= l1.Token() {
		t.Errorf("second late reader Token() = %d; want > %d (request order)", l2.Token(), l1.Token())
	}
	mustRelease(t, ctx, l1)
	mustRelease(t, ctx, l2)
	s.noOrphans(t, name, "every grant released")
}

func (s *suite) testTryAcquireShared(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a, b, c := s.newLocker(t, identity("a")), s.newLocker(t, identity("b")), s.newLocker(t, identity("c"))

	r1 := mustTryShared(t, ctx, a, name, "of a free lock")
	r2 := mustTryShared(t, ctx, b, name, "while a reader holds")
	w := goAcquire(ctx, c, name)
	s.waitRecords(t, name, 3, "writer queued behind readers")
	le, err := trySharedErr(ctx, c, name)
	refused(t, "TryAcquireShared while a writer waits", le, err, lock.ErrLocked)
	le, err = trySharedErr(ctx, a, name)
	refused(t, "TryAcquireShared on a reader's Locker while a writer waits", le, err, lock.ErrLocked)
	s.checkRecords(t, name, 3, "after TryAcquireShared returned ErrLocked")

	mustRelease(t, ctx, r1)
	mustRelease(t, ctx, r2)
	wl := s.awaitLease(t, w, "writer's Acquire after the readers released")
	le, err = trySharedErr(ctx, a, name)
	refused(t, "TryAcquireShared while a writer holds", le, err, lock.ErrLocked)
	s.checkRecords(t, name, 1, "after TryAcquireShared returned ErrLocked")
	mustRelease(t, ctx, wl)

	r3 := mustTryShared(t, ctx, c, name, "after the writer released")
	if r3.Token() <= wl.Token() {
		t.Errorf("TryAcquireShared after the writer: Token() = %d; want > %d", r3.Token(), wl.Token())
	}
	mustRelease(t, ctx, r3)
	s.noOrphans(t, name, "every grant released")
}

// testSharedTokens checks the token order of a read-write lock over
// alternating phases: readers' tokens rise in request order, and every
// writer's token exceeds those of the readers admitted before it, and
// every reader's that of the writer before it.
func (s *suite) testSharedTokens(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	lockers := []lock.Locker{s.newLocker(t, identity("a")), s.newLocker(t, identity("b")), s.newLocker(t, identity("c"))}
	var before []lock.Lease // the grants the next writer comes after
	for round := range max(3, s.o.Rounds/10) {
		var readers []lock.Lease
		for i, l := range lockers[:2] {
			r := s.mustShared(t, ctx, l, name, "reader")
			for _, p := range before {
				if r.Token() <= p.Token() {
					t.Errorf("round %d: reader %d Token() = %d; want > %d (the writer's before it)", round, i, r.Token(), p.Token())
				}
			}
			if len(readers) > 0 && r.Token() <= readers[len(readers)-1].Token() {
				t.Errorf("round %d: reader %d Token() = %d; want > %d (the reader requested before it)", round, i, r.Token(), readers[len(readers)-1].Token())
			}
			readers = append(readers, r)
		}
		w := goAcquire(ctx, lockers[2], name)
		s.waitRecords(t, name, 3, "writer queued behind readers")
		for _, r := range readers {
			mustRelease(t, ctx, r)
		}
		wl := s.awaitLease(t, w, "writer after the readers released")
		for _, r := range readers {
			if wl.Token() <= r.Token() {
				t.Errorf("round %d: writer Token() = %d; want > %d (a reader admitted before it)", round, wl.Token(), r.Token())
			}
		}
		mustRelease(t, ctx, wl)
		before = []lock.Lease{wl}
	}
	s.noOrphans(t, name, "every grant released")
}

// testSharedHandover checks that a cancelled writer does not hold back the
// readers queued behind it, and that Close of a reader's Locker lets the
// writer behind it in once the other readers are gone.
func (s *suite) testSharedHandover(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	c, d := s.newLocker(t, identity("c")), s.newLocker(t, identity("d"))

	r1 := s.mustShared(t, ctx, a, name, "first reader")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := goAcquire(wctx, b, name)
	s.waitRecords(t, name, 2, "writer queued behind a reader")
	rch := goShared(ctx, c, name)
	s.waitRecords(t, name, 3, "reader queued behind the writer")
	notReturned(t, rch, "AcquireShared behind a queued writer")

	cancel()
	r := s.await(t, w, "writer's Acquire after its context was cancelled")
	if !errors.Is(r.err, context.Canceled) || r.lease != nil {
		t.Errorf("cancelled Acquire = %v, %v; want nil, an error wrapping %v", r.lease, r.err, context.Canceled)
	}
	r2 := s.awaitLease(t, rch, "reader queued behind a cancelled writer")
	checkHeld(t, r1, name)

	wd := goAcquire(ctx, d, name)
	s.waitRecords(t, name, 3, "writer queued behind two readers")
	if err := a.Close(); err != nil {
		t.Errorf("Close() of a reader's Locker = %v; want nil", err)
	}
	if !isClosed(r1.Done()) || !errorsIsAny(r1.Err(), lock.ErrReleased, lock.ErrLost) {
		t.Errorf("reader lease after Close of its Locker: Done closed %v, Err() = %v; want closed, an error wrapping %v", isClosed(r1.Done()), r1.Err(), lock.ErrReleased)
	}
	s.waitRecords(t, name, 2, "closed reader's record deleted")
	notReturned(t, wd, "writer's Acquire while a reader still holds")
	mustRelease(t, ctx, r2)
	wl := s.awaitLease(t, wd, "writer's Acquire after Close and Release of the readers")
	mustRelease(t, ctx, wl)
	s.noOrphans(t, name, "a cancelled wait, Close and Release")
}

// testSharedSessionExpiry checks that the expiry of a reader's session
// ends its lease with ErrLost but leaves other readers holding, and that
// the expiry of a queued reader's session ends its wait with ErrLost and
// takes its record away.
func (s *suite) testSharedSessionExpiry(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	c, d := s.newLocker(t, identity("c")), s.newLocker(t, identity("d"))

	r1 := s.mustShared(t, ctx, a, name, "first reader")
	r2 := s.mustShared(t, ctx, b, name, "second reader")
	w := goAcquire(ctx, c, name)
	s.waitRecords(t, name, 3, "writer queued behind readers")
	rd := goShared(ctx, d, name)
	s.waitRecords(t, name, 4, "reader queued behind the writer")

	s.expirer.ExpireSession(t, a)
	s.waitDone(t, r1, "reader lease of an expired session")
	if err := r1.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("reader Err() after session expiry = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	s.expirer.ExpireSession(t, d)
	r := s.await(t, rd, "AcquireShared waiting on an expired session")
	if !errors.Is(r.err, lock.ErrLost) || r.lease != nil {
		t.Errorf("AcquireShared waiting on an expired session = %v, %v; want nil, an error wrapping %v", r.lease, r.err, lock.ErrLost)
	}
	s.waitRecords(t, name, 2, "expired sessions' records deleted")
	notReturned(t, w, "writer's Acquire while a reader still holds")
	checkHeld(t, r2, name)

	mustRelease(t, ctx, r2)
	wl := s.awaitLease(t, w, "writer's Acquire after the other reader released")
	// The expired reader's Locker reads again, on a new session.
	rch := goShared(ctx, a, name)
	s.waitRecords(t, name, 2, "reader on a new session queued")
	mustRelease(t, ctx, wl)
	again := s.awaitLease(t, rch, "AcquireShared on a new session")
	if again.Token() <= wl.Token() {
		t.Errorf("reader Token() on a new session = %d; want > %d", again.Token(), wl.Token())
	}
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "session expiry and Release")
}
