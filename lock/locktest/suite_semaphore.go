package locktest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// testSemaphoreLimit has many goroutines on a few Lockers take permits of
// one semaphore in rounds, each holding its permit until every other
// goroutine is inside or trying to get in, and counts the holders at once.
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
	mustRelease(t, ctx, w1, w2)
	s.noOrphans(t, name, "every permit released")
}

// testSemaphoreIncompatible checks that requests disagreeing with the
// queue of a name are refused, never admitted, and leave no record.
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
	mustRelease(t, ctx, p1, p2, held)
	s.noOrphans(t, sem, "every permit released")
	s.noOrphans(t, lk, "Release")
}

// testSemaphoreHandover checks that a cancelled waiter gives up its place
// and that Close of a holder's Locker passes its permit to the next
// waiter.
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
	mustRelease(t, ctx, p2, w)
	s.noOrphans(t, name, "a cancelled wait, Close and Release")
}

// testSemaphoreSessionExpiry checks that the expiry of a waiter's session
// ends its wait with ErrLost, and that of a holder's session ends its
// permit with ErrLost and admits the next waiter.
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
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "session expiry and Release")
}

// testHolders checks HolderLister: every holder in grant order, with
// Shared and Limit, and no waiter.
func (s *suite) testHolders(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 3)
	hl := ls[0].(lock.HolderLister)
	s.holdersAre(t, ctx, hl, name, nil, "a free lock")

	first := s.mustAcquire(t, ctx, ls[0], name)
	w := s.enqueue(t, ctx, ls[1], name, excl, 2, "writer queued")
	s.holdersAre(t, ctx, hl, name, []lock.Holder{{Identity: ids[0], Token: first.Token()}}, "an exclusive holder and a waiter")
	mustRelease(t, ctx, first)
	wl := s.awaitLease(t, w, "waiter's Acquire")
	s.holdersAre(t, ctx, hl, name, []lock.Holder{{Identity: ids[1], Token: wl.Token()}}, "the waiter granted")
	mustRelease(t, ctx, wl)

	if s.has[needsShared] {
		r1 := s.mustShared(t, ctx, ls[2], name, "first reader")
		r2 := s.mustShared(t, ctx, ls[0], name, "second reader")
		w := s.enqueue(t, ctx, ls[1], name, excl, 3, "writer queued behind readers")
		s.holdersAre(t, ctx, hl, name, []lock.Holder{
			{Identity: ids[2], Token: r1.Token(), Shared: true},
			{Identity: ids[0], Token: r2.Token(), Shared: true},
		}, "two readers and a queued writer")
		s.holderIs(t, ctx, ls[1], name, lock.Holder{Identity: ids[2], Token: r1.Token(), Shared: true})
		mustRelease(t, ctx, r1, r2)
		mustRelease(t, ctx, s.awaitLease(t, w, "writer after the readers"))
	}
	if s.has[needsSem] {
		sem := lockName(t)
		p1 := mustTry(t, ctx, ls[1], sem, permit(2), "of a free semaphore")
		p2 := mustTry(t, ctx, ls[2], sem, permit(2), "with one permit taken")
		waiting := s.enqueue(t, ctx, ls[0], sem, permit(2), 3, "semaphore waiter queued")
		s.holdersAre(t, ctx, hl, sem, []lock.Holder{
			{Identity: ids[1], Token: p1.Token(), Shared: true, Limit: 2},
			{Identity: ids[2], Token: p2.Token(), Shared: true, Limit: 2},
		}, "two permits taken and a waiter")
		mustRelease(t, ctx, p1, p2)
		mustRelease(t, ctx, s.awaitLease(t, waiting, "semaphore waiter"))
		s.noOrphans(t, sem, "every permit released")
	}
	s.holdersAre(t, ctx, hl, name, nil, "every grant released")
	s.noOrphans(t, name, "every grant released")
}

func (s *suite) holdersAre(t *testing.T, ctx context.Context, hl lock.HolderLister, name string, want []lock.Holder, when string) {
	t.Helper()
	got, err := hl.Holders(ctx, name)
	if err != nil || len(got) != len(want) {
		t.Errorf("Holders(%q) with %s = %+v, %v; want %+v, nil", name, when, got, err, want)
	} else if !slices.Equal(got, want) {
		t.Errorf("Holders(%q) with %s = %+v; want %+v (grant order)", name, when, got, want)
	}
}
