package locktest

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testSharedExclusion(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	a, b, c := ls[0], ls[1], ls[2]

	r1 := s.mustShared(t, ctx, a, name, "AcquireShared of a free lock")
	r2 := s.mustShared(t, ctx, b, name, "AcquireShared while another Locker's reader holds")
	r3 := mustTry(t, ctx, a, name, shared, "while readers, one of the same Locker, hold")
	s.checkRecords(t, name, 3, "three readers")

	// Readers exclude a writer, on their own Locker and on another.
	refuses(t, ctx, a, name, excl, true, " on a reader's Locker while readers hold", lock.ErrLocked)
	refuses(t, ctx, c, name, excl, true, " while readers hold", lock.ErrLocked)
	w := s.enqueue(t, ctx, c, name, excl, 4, "writer queued behind readers")
	notReturned(t, w, "writer's Acquire while readers hold")
	mustRelease(t, ctx, r1, r2)
	notReturned(t, w, "writer's Acquire while one reader still holds")
	mustRelease(t, ctx, r3)
	wl := s.awaitLease(t, w, "writer's Acquire after the readers released")
	checkHeld(t, name, wl)

	// A writer excludes readers, and other writers.
	refuses(t, ctx, c, name, shared, true, " on the writer's Locker while it holds", lock.ErrLocked)
	rch := s.enqueue(t, ctx, a, name, shared, 2, "reader queued behind a writer")
	wch := s.enqueue(t, ctx, b, name, excl, 3, "writer queued behind a reader")
	notReturned(t, rch, "AcquireShared while a writer holds")
	notReturned(t, wch, "second writer's Acquire while a writer holds")
	mustRelease(t, ctx, wl)
	rl := s.awaitLease(t, rch, "reader's AcquireShared after the writer released")
	checkAfter(t, rl, wl, "reader after the writer")
	notReturned(t, wch, "writer's Acquire while a reader holds")
	mustRelease(t, ctx, rl)
	s.releaseLast(t, ctx, name, "every grant released", s.awaitLease(t, wch, "second writer's Acquire"))
}

func (s *suite) testSharedFIFO(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	r1 := s.mustShared(t, ctx, ls[0], name, "first reader")
	w := s.enqueue(t, ctx, ls[1], name, excl, 2, "writer queued behind a reader")
	late1 := s.enqueue(t, ctx, ls[2], name, shared, 3, "reader queued behind the writer")
	late2 := s.enqueue(t, ctx, ls[3], name, shared, 4, "second reader queued behind the writer")
	notReturned(t, w, "writer's Acquire while a reader holds")
	notReturned(t, late1, "AcquireShared of a reader that arrived after a queued writer")
	notReturned(t, late2, "AcquireShared of a second reader that arrived after a queued writer")

	mustRelease(t, ctx, r1)
	wl := s.awaitLease(t, w, "writer's Acquire after the first reader released")
	checkAfter(t, wl, r1, "writer after the reader admitted before it")
	notReturned(t, late1, "AcquireShared queued behind a holding writer")
	notReturned(t, late2, "second AcquireShared queued behind a holding writer")

	// Both readers get in together: neither releases before both hold.
	mustRelease(t, ctx, wl)
	l1 := s.awaitLease(t, late1, "first late reader after the writer released")
	l2 := s.awaitLease(t, late2, "second late reader while the first holds")
	checkHeld(t, name, l1, l2)
	checkAfter(t, l1, wl, "first late reader after the writer")
	checkAfter(t, l2, l1, "second late reader (request order)")
	s.releaseLast(t, ctx, name, "every grant released", l1, l2)
}

func (s *suite) testTryAcquireShared(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	r1 := mustTry(t, ctx, ls[0], name, shared, "of a free lock")
	r2 := mustTry(t, ctx, ls[1], name, shared, "while a reader holds")
	w := s.enqueue(t, ctx, ls[2], name, excl, 3, "writer queued behind readers")
	refuses(t, ctx, ls[2], name, shared, true, " while a writer waits", lock.ErrLocked)
	refuses(t, ctx, ls[0], name, shared, true, " on a reader's Locker while a writer waits", lock.ErrLocked)
	s.checkRecords(t, name, 3, "after TryAcquireShared returned ErrLocked")

	mustRelease(t, ctx, r1, r2)
	wl := s.awaitLease(t, w, "writer's Acquire after the readers released")
	refuses(t, ctx, ls[0], name, shared, true, " while a writer holds", lock.ErrLocked)
	s.checkRecords(t, name, 1, "after TryAcquireShared returned ErrLocked")
	mustRelease(t, ctx, wl)

	r3 := mustTry(t, ctx, ls[2], name, shared, "after the writer released")
	checkAfter(t, r3, wl, "TryAcquireShared after the writer")
	s.releaseLast(t, ctx, name, "every grant released", r3)
}

// testSharedTokens checks that tokens rise in request order over
// alternating phases of readers and writers.
func (s *suite) testSharedTokens(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	var prev lock.Lease // the writer of the round before
	for round := range max(3, s.o.Rounds/10) {
		var readers []lock.Lease
		for i, l := range ls[:2] {
			r := s.mustShared(t, ctx, l, name, "reader")
			if prev != nil && r.Token() <= prev.Token() {
				t.Errorf("round %d: reader %d Token() = %d; want > %d (the writer's before it)", round, i, r.Token(), prev.Token())
			}
			if i > 0 && r.Token() <= readers[i-1].Token() {
				t.Errorf("round %d: reader %d Token() = %d; want > %d (the reader requested before it)", round, i, r.Token(), readers[i-1].Token())
			}
			readers = append(readers, r)
		}
		w := s.enqueue(t, ctx, ls[2], name, excl, 3, "writer queued behind readers")
		mustRelease(t, ctx, readers...)
		prev = s.awaitLease(t, w, "writer after the readers released")
		for _, r := range readers {
			if prev.Token() <= r.Token() {
				t.Errorf("round %d: writer Token() = %d; want > %d (a reader admitted before it)", round, prev.Token(), r.Token())
			}
		}
		mustRelease(t, ctx, prev)
	}
	s.noOrphans(t, name, "every grant released")
}

// testSharedHandover checks that a cancelled writer does not hold back the
// readers behind it, and that a reader's Close lets the writer in.
func (s *suite) testSharedHandover(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	r1 := s.mustShared(t, ctx, ls[0], name, "first reader")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := s.enqueue(t, wctx, ls[1], name, excl, 2, "writer queued behind a reader")
	rch := s.enqueue(t, ctx, ls[2], name, shared, 3, "reader queued behind the writer")
	notReturned(t, rch, "AcquireShared behind a queued writer")

	cancel()
	s.awaitRefused(t, w, "writer's Acquire after its context was cancelled", context.Canceled)
	r2 := s.awaitLease(t, rch, "reader queued behind a cancelled writer")
	checkHeld(t, name, r1)

	wd := s.enqueue(t, ctx, ls[3], name, excl, 3, "writer queued behind two readers")
	closeHolder(t, ls[0], r1, "reader lease")
	s.waitRecords(t, name, 2, "closed reader's record deleted")
	notReturned(t, wd, "writer's Acquire while a reader still holds")
	mustRelease(t, ctx, r2)
	s.releaseLast(t, ctx, name, "a cancelled wait, Close and Release", s.awaitLease(t, wd, "writer's Acquire after Close and Release of the readers"))
}

// closeHolder closes l and checks that its lease le ended with it.
func closeHolder(t *testing.T, l lock.Locker, le lock.Lease, what string) {
	t.Helper()
	noErr(t, "Close() of the Locker of a "+what, l.Close())
	for _, g := range stillGoing([]lock.Lease{le}, nil) {
		t.Errorf("%s after Close of its Locker: %s; want it ended", what, g)
	}
}

// testSharedSessionExpiry checks that a holding and a queued reader's
// session expiry end their lease and wait with ErrLost, and nothing else.
func (s *suite) testSharedSessionExpiry(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	r1 := s.mustShared(t, ctx, ls[0], name, "first reader")
	r2 := s.mustShared(t, ctx, ls[1], name, "second reader")
	w := s.enqueue(t, ctx, ls[2], name, excl, 3, "writer queued behind readers")
	rd := s.enqueue(t, ctx, ls[3], name, shared, 4, "reader queued behind the writer")

	s.expirer.ExpireSession(t, ls[0])
	s.checkLost(t, r1, "reader lease of an expired session", "reader Err() after session expiry")
	s.expirer.ExpireSession(t, ls[3])
	s.awaitRefused(t, rd, "AcquireShared waiting on an expired session", lock.ErrLost)
	s.waitRecords(t, name, 2, "expired sessions' records deleted")
	notReturned(t, w, "writer's Acquire while a reader still holds")
	checkHeld(t, name, r2)

	mustRelease(t, ctx, r2)
	wl := s.awaitLease(t, w, "writer's Acquire after the other reader released")
	// The expired reader's Locker reads again, on a new session.
	rch := s.enqueue(t, ctx, ls[0], name, shared, 2, "reader on a new session queued")
	mustRelease(t, ctx, wl)
	again := s.awaitLease(t, rch, "AcquireShared on a new session")
	checkAfter(t, again, wl, "reader on a new session")
	s.releaseLast(t, ctx, name, "session expiry and Release", again)
}

// testRefused checks that the requests Options says the Locker refuses
// are refused with lock.ErrIncompatible, waiting or not, writing nothing.
func (s *suite) testRefused(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	for _, k := range []kind{shared, permit(2)} {
		if k.shared && s.o.RefusesShared && is[lock.SharedLocker](ls[0]) || k.sem && s.o.RefusesSemaphores && is[lock.Semaphore](ls[0]) {
			refuses(t, ctx, ls[0], name, k, false, " of a free lock", lock.ErrIncompatible)
			refuses(t, ctx, ls[0], name, k, true, " of a free lock", lock.ErrIncompatible)
		}
	}
	s.noOrphans(t, name, "the refusals")
}
