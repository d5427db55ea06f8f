package locktest

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// testSemaphoreLimit counts the holders at once of a contended semaphore.
func (s *suite) testSemaphoreLimit(t *testing.T) {
	_, name, ls, _ := s.setup(t, 3)
	const limit, goroutines = 3, 8
	c := s.runCrowd(t, ls, name, permit(limit), goroutines, max(3, s.o.Rounds/goroutines))
	t.Logf("at most %d holders at once (limit %d)", c.most.Load(), limit)
	s.noOrphans(t, name, "the last Release")
}

func (s *suite) testSemaphoreFIFO(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 5)
	const limit = 2
	p1 := mustTry(t, ctx, ls[0], name, permit(limit), "of a free semaphore")
	p2 := mustTry(t, ctx, ls[1], name, permit(limit), "with one permit taken")
	refuses(t, ctx, ls[2], name, permit(limit), true, " with every permit taken", lock.ErrLocked)
	s.checkRecords(t, name, limit, "after TryAcquireSemaphore returned ErrLocked")
	var chs []<-chan result
	for i, l := range ls[2:] {
		chs = append(chs, s.enqueue(t, ctx, l, name, permit(limit), limit+1+i, fmt.Sprintf("waiter %d queued", i)))
	}
	for i, ch := range chs {
		notReturned(t, ch, fmt.Sprintf("waiter %d with every permit taken", i))
	}

	// Permits are released out of grant order: the later holder first.
	mustRelease(t, ctx, p2)
	w0 := s.awaitLease(t, chs[0], "first waiter after the later holder released")
	notReturned(t, chs[1], "second waiter after one permit was released")
	notReturned(t, chs[2], "third waiter after one permit was released")
	mustRelease(t, ctx, p1)
	w1 := s.awaitLease(t, chs[1], "second waiter after both first holders released")
	notReturned(t, chs[2], "third waiter while the first two waiters hold")
	checkHeld(t, name, w0, w1)
	mustRelease(t, ctx, w0)
	w2 := s.awaitLease(t, chs[2], "third waiter after the first waiter released")
	checkHeld(t, name, w2)
	prev := p2
	for i, le := range []lock.Lease{w0, w1, w2} {
		checkAfter(t, le, prev, fmt.Sprintf("waiter %d (request order)", i))
		prev = le
	}
	s.releaseLast(t, ctx, name, "every permit released", w1, w2)
}

// testSemaphoreIncompatible checks that requests disagreeing with a
// name's queue are refused and leave no record.
func (s *suite) testSemaphoreIncompatible(t *testing.T) {
	ctx, sem, ls, _ := s.setup(t, 2)
	a, b := ls[0], ls[1]
	p1 := mustTry(t, ctx, a, sem, permit(2), "of a free semaphore")
	type request struct {
		k   kind
		try bool
	}
	bad := []request{{permit(1), true}, {permit(3), true}, {permit(3), false}, {excl, false}, {excl, true}}
	if s.has[needsShared] {
		bad = append(bad, request{shared, false}, request{shared, true})
	}
	for _, c := range bad {
		refuses(t, ctx, b, sem, c.k, c.try, " of a limit-2 semaphore", lock.ErrIncompatible)
	}
	s.checkRecords(t, sem, 1, "after refused requests")
	p2 := mustTry(t, ctx, b, sem, permit(2), "with the queue's limit")

	lk := lockName(t)
	held := s.mustAcquire(t, ctx, a, lk)
	for _, limit := range []int{1, 5} {
		for _, try := range []bool{true, false} {
			refuses(t, ctx, b, lk, permit(limit), try, " of a held lock", lock.ErrIncompatible)
		}
	}
	s.checkRecords(t, lk, 1, "after refused semaphore requests")
	for _, limit := range []int{0, -1} {
		for _, try := range []bool{true, false} {
			refuses(t, ctx, b, lockName(t), permit(limit), try, "", lock.ErrInvalidConfig)
		}
	}
	s.releaseLast(t, ctx, sem, "every permit released", p1, p2, held)
	s.noOrphans(t, lk, "Release")
}

// testSemaphoreHandover checks that a cancelled waiter gives up its place
// and that a holder's Close passes its permit on.
func (s *suite) testSemaphoreHandover(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	const limit = 2
	p1 := mustTry(t, ctx, ls[0], name, permit(limit), "of a free semaphore")
	p2 := mustTry(t, ctx, ls[1], name, permit(limit), "with one permit taken")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelled := s.enqueue(t, wctx, ls[2], name, permit(limit), 3, "first waiter queued")
	next := s.enqueue(t, ctx, ls[3], name, permit(limit), 4, "second waiter queued")

	cancel()
	s.awaitRefused(t, cancelled, "AcquireSemaphore after its context was cancelled", context.Canceled)
	s.waitRecords(t, name, 3, "cancelled waiter's record deleted")
	notReturned(t, next, "second waiter with every permit taken")

	closeHolder(t, ls[0], p1, "permit")
	w := s.awaitLease(t, next, "second waiter after Close of a holder's Locker")
	checkAfter(t, w, p2, "waiter")
	checkHeld(t, name, p2)
	s.releaseLast(t, ctx, name, "a cancelled wait, Close and Release", p2, w)
}

// testSemaphoreSessionExpiry checks that a waiter's and a holder's session
// expiry end their wait and permit with ErrLost, and admit the next.
func (s *suite) testSemaphoreSessionExpiry(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	p := mustTry(t, ctx, ls[0], name, permit(1), "of a free semaphore")
	w1 := s.enqueue(t, ctx, ls[1], name, permit(1), 2, "first waiter queued")
	w2 := s.enqueue(t, ctx, ls[2], name, permit(1), 3, "second waiter queued")

	s.expirer.ExpireSession(t, ls[1])
	s.awaitRefused(t, w1, "AcquireSemaphore waiting on an expired session", lock.ErrLost)
	s.waitRecords(t, name, 2, "expired waiter's record deleted")
	notReturned(t, w2, "second waiter while the permit is held")

	s.expirer.ExpireSession(t, ls[0])
	s.checkLost(t, p, "permit of an expired session", "permit Err() after session expiry")
	le := s.awaitLease(t, w2, "second waiter after the holder's session expired")
	checkAfter(t, le, p, "grant after the permit holder's expiry")
	s.releaseLast(t, ctx, name, "session expiry and Release", le)
}
