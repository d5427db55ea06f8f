package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// goSem runs l.AcquireSemaphore in a goroutine.
func goSem(ctx context.Context, l lock.Locker, name string, limit int) <-chan result {
	return goCall(func() (lock.Lease, error) {
		sem, ok := l.(lock.Semaphore)
		if !ok {
			return nil, errNotShared
		}
		return sem.AcquireSemaphore(ctx, name, limit)
	})
}

// trySem calls l.TryAcquireSemaphore.
func trySem(ctx context.Context, l lock.Locker, name string, limit int) (lock.Lease, error) {
	sem, ok := l.(lock.Semaphore)
	if !ok {
		return nil, errNotShared
	}
	return sem.TryAcquireSemaphore(ctx, name, limit)
}

// mustTrySem calls TryAcquireSemaphore, which must grant.
func mustTrySem(t *testing.T, ctx context.Context, l lock.Locker, name string, limit int, when string) lock.Lease {
	t.Helper()
	le, err := trySem(ctx, l, name, limit)
	if err != nil || le == nil {
		t.Fatalf("TryAcquireSemaphore(%q, %d) %s = %v, %v; want a lease", name, limit, when, le, err)
	}
	checkHeld(t, le, name)
	return le
}

// testSemaphoreLimit has many goroutines on a few Lockers take permits of
// one semaphore in rounds, each holding its permit until every other
// goroutine is inside or trying to get in, and counts the holders at once.
func (s *suite) testSemaphoreLimit(t *testing.T) {
	name := lockName(t)
	const limit, goroutines = 3, 8
	rounds := max(3, s.o.Rounds/goroutines)
	lockers := []lock.Locker{s.newLocker(t, identity("a")), s.newLocker(t, identity("b")), s.newLocker(t, identity("c"))}
	var inside, attempting, active, most atomic.Int32
	var grants atomic.Int32
	var wg sync.WaitGroup
	active.Store(goroutines)
	for g := range goroutines {
		l := lockers[g%len(lockers)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer active.Add(-1)
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
				attempting.Add(1)
				le, err := s.semAcquire(ctx, l, name, limit, r%2 == 1)
				attempting.Add(-1)
				if err != nil {
					cancel()
					t.Errorf("goroutine %d round %d: AcquireSemaphore = %v; want a lease", g, r, err)
					return
				}
				grants.Add(1)
				n := inside.Add(1)
				if n > limit {
					t.Errorf("goroutine %d round %d: %d holders of a semaphore of limit %d", g, r, n, limit)
				}
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				deadline := time.Now().Add(50 * time.Millisecond)
				for inside.Load()+attempting.Load() < active.Load() && time.Now().Before(deadline) {
					runtime.Gosched()
				}
				for range 100 {
					runtime.Gosched()
				}
				inside.Add(-1)
				if err := le.Release(ctx); err != nil {
					t.Errorf("goroutine %d round %d: Release = %v; want nil", g, r, err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if got, want := grants.Load(), int32(goroutines*rounds); got != want && !t.Failed() {
		t.Errorf("%d grants; want %d", got, want)
	}
	t.Logf("at most %d holders at once (limit %d)", most.Load(), limit)
	s.noOrphans(t, name, "the last Release")
}

// semAcquire takes a permit by AcquireSemaphore, or with try by
// TryAcquireSemaphore repeated until it succeeds.
func (s *suite) semAcquire(ctx context.Context, l lock.Locker, name string, limit int, try bool) (lock.Lease, error) {
	if !try {
		sem, ok := l.(lock.Semaphore)
		if !ok {
			return nil, errNotShared
		}
		return sem.AcquireSemaphore(ctx, name, limit)
	}
	for {
		le, err := trySem(ctx, l, name, limit)
		if !errors.Is(err, lock.ErrLocked) {
			return le, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (s *suite) testSemaphoreFIFO(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	const limit = 2
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	waiters := []lock.Locker{s.newLocker(t, identity("c")), s.newLocker(t, identity("d")), s.newLocker(t, identity("e"))}

	p1 := mustTrySem(t, ctx, a, name, limit, "of a free semaphore")
	p2 := mustTrySem(t, ctx, b, name, limit, "with one permit taken")
	le, err := trySem(ctx, waiters[0], name, limit)
	refused(t, fmt.Sprintf("TryAcquireSemaphore(%d) with every permit taken", limit), le, err, lock.ErrLocked)
	s.checkRecords(t, name, limit, "after TryAcquireSemaphore returned ErrLocked")
	var chs []<-chan result
	for i, l := range waiters {
		chs = append(chs, goSem(ctx, l, name, limit))
		s.waitRecords(t, name, limit+1+i, fmt.Sprintf("waiter %d queued", i))
	}
	for i, ch := range chs {
		notReturned(t, ch, fmt.Sprintf("waiter %d with every permit taken", i))
	}

	// Permits are released out of grant order: the later holder first.
	mustRelease(t, ctx, p2)
	w0 := s.awaitLease(t, chs[0], "first waiter after the later holder released")
	checkHeld(t, w0, name)
	notReturned(t, chs[1], "second waiter after one permit was released")
	notReturned(t, chs[2], "third waiter after one permit was released")
	mustRelease(t, ctx, p1)
	w1 := s.awaitLease(t, chs[1], "second waiter after both first holders released")
	notReturned(t, chs[2], "third waiter while the first two waiters hold")
	mustRelease(t, ctx, w0)
	w2 := s.awaitLease(t, chs[2], "third waiter after the first waiter released")
	prev := p2.Token()
	for i, le := range []lock.Lease{w0, w1, w2} {
		if le.Token() <= prev {
			t.Errorf("waiter %d Token() = %d; want > %d (request order)", i, le.Token(), prev)
		}
		prev = le.Token()
	}
	checkHeld(t, w1, name)
	checkHeld(t, w2, name)
	mustRelease(t, ctx, w1)
	mustRelease(t, ctx, w2)
	s.noOrphans(t, name, "every permit released")
}

// testSemaphoreIncompatible checks that requests disagreeing with the
// queue of a name are refused, never admitted, and leave no record.
func (s *suite) testSemaphoreIncompatible(t *testing.T) {
	ctx := s.ctx(t)
	sem, lk := lockName(t), lockName(t)
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	p1 := mustTrySem(t, ctx, a, sem, 2, "of a free semaphore")
	type call struct {
		what string
		do   func() (lock.Lease, error)
	}
	bad := []call{
		{"TryAcquireSemaphore(limit 1) of a limit-2 semaphore", func() (lock.Lease, error) { return trySem(ctx, b, sem, 1) }},
		{"TryAcquireSemaphore(limit 3) of a limit-2 semaphore", func() (lock.Lease, error) { return trySem(ctx, b, sem, 3) }},
		{"AcquireSemaphore(limit 3) of a limit-2 semaphore", func() (lock.Lease, error) { r := <-goSem(ctx, b, sem, 3); return r.lease, r.err }},
		{"Acquire of a semaphore", func() (lock.Lease, error) { return b.Acquire(ctx, sem) }},
		{"TryAcquire of a semaphore", func() (lock.Lease, error) { return b.TryAcquire(ctx, sem) }},
	}
	if s.shared {
		bad = append(bad,
			call{"AcquireShared of a semaphore", func() (lock.Lease, error) { r := <-goShared(ctx, b, sem); return r.lease, r.err }},
			call{"TryAcquireShared of a semaphore", func() (lock.Lease, error) { return trySharedErr(ctx, b, sem) }})
	}
	for _, c := range bad {
		le, err := c.do()
		refused(t, c.what, le, err, lock.ErrIncompatible)
	}
	s.checkRecords(t, sem, 1, "after refused requests")
	p2 := mustTrySem(t, ctx, b, sem, 2, "with the queue's limit")

	held := s.mustAcquire(t, ctx, a, lk)
	for _, limit := range []int{1, 5} {
		le, err := trySem(ctx, b, lk, limit)
		refused(t, fmt.Sprintf("TryAcquireSemaphore(limit %d) of a held lock", limit), le, err, lock.ErrIncompatible)
		r := <-goSem(ctx, b, lk, limit)
		refused(t, fmt.Sprintf("AcquireSemaphore(limit %d) of a held lock", limit), r.lease, r.err, lock.ErrIncompatible)
	}
	s.checkRecords(t, lk, 1, "after refused semaphore requests")
	for _, limit := range []int{0, -1} {
		le, err := trySem(ctx, b, lockName(t), limit)
		refused(t, fmt.Sprintf("TryAcquireSemaphore(limit %d)", limit), le, err, lock.ErrInvalidConfig)
		r := <-goSem(ctx, b, lockName(t), limit)
		refused(t, fmt.Sprintf("AcquireSemaphore(limit %d)", limit), r.lease, r.err, lock.ErrInvalidConfig)
	}
	for _, le := range []lock.Lease{p1, p2, held} {
		mustRelease(t, ctx, le)
	}
	s.noOrphans(t, sem, "every permit released")
	s.noOrphans(t, lk, "Release")
}

// testSemaphoreHandover checks that a cancelled waiter gives up its place
// and that Close of a holder's Locker passes its permit to the next
// waiter.
func (s *suite) testSemaphoreHandover(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	const limit = 2
	a, b := s.newLocker(t, identity("a")), s.newLocker(t, identity("b"))
	c, d := s.newLocker(t, identity("c")), s.newLocker(t, identity("d"))

	p1 := mustTrySem(t, ctx, a, name, limit, "of a free semaphore")
	p2 := mustTrySem(t, ctx, b, name, limit, "with one permit taken")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelled := goSem(wctx, c, name, limit)
	s.waitRecords(t, name, 3, "first waiter queued")
	next := goSem(ctx, d, name, limit)
	s.waitRecords(t, name, 4, "second waiter queued")

	cancel()
	r := s.await(t, cancelled, "AcquireSemaphore after its context was cancelled")
	if !errors.Is(r.err, context.Canceled) || r.lease != nil {
		t.Errorf("cancelled AcquireSemaphore = %v, %v; want nil, an error wrapping %v", r.lease, r.err, context.Canceled)
	}
	s.waitRecords(t, name, 3, "cancelled waiter's record deleted")
	notReturned(t, next, "second waiter with every permit taken")

	if err := a.Close(); err != nil {
		t.Errorf("Close() of a holder's Locker = %v; want nil", err)
	}
	if !isClosed(p1.Done()) || !errorsIsAny(p1.Err(), lock.ErrReleased, lock.ErrLost) {
		t.Errorf("permit after Close of its Locker: Done closed %v, Err() = %v; want closed, an error wrapping %v", isClosed(p1.Done()), p1.Err(), lock.ErrReleased)
	}
	w := s.awaitLease(t, next, "second waiter after Close of a holder's Locker")
	if w.Token() <= p2.Token() {
		t.Errorf("waiter Token() = %d; want > %d", w.Token(), p2.Token())
	}
	checkHeld(t, p2, name)
	mustRelease(t, ctx, p2)
	mustRelease(t, ctx, w)
	s.noOrphans(t, name, "a cancelled wait, Close and Release")
}

// testSemaphoreSessionExpiry checks that the expiry of a waiter's session
// ends its wait with ErrLost, and that of a holder's session ends its
// permit with ErrLost and admits the next waiter.
func (s *suite) testSemaphoreSessionExpiry(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	const limit = 1
	a, b, c := s.newLocker(t, identity("a")), s.newLocker(t, identity("b")), s.newLocker(t, identity("c"))

	p := mustTrySem(t, ctx, a, name, limit, "of a free semaphore")
	w1 := goSem(ctx, b, name, limit)
	s.waitRecords(t, name, 2, "first waiter queued")
	w2 := goSem(ctx, c, name, limit)
	s.waitRecords(t, name, 3, "second waiter queued")

	s.expirer.ExpireSession(t, b)
	r := s.await(t, w1, "AcquireSemaphore waiting on an expired session")
	if !errors.Is(r.err, lock.ErrLost) || r.lease != nil {
		t.Errorf("AcquireSemaphore waiting on an expired session = %v, %v; want nil, an error wrapping %v", r.lease, r.err, lock.ErrLost)
	}
	s.waitRecords(t, name, 2, "expired waiter's record deleted")
	notReturned(t, w2, "second waiter while the permit is held")

	s.expirer.ExpireSession(t, a)
	s.waitDone(t, p, "permit of an expired session")
	if err := p.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("permit Err() after session expiry = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	le := s.awaitLease(t, w2, "second waiter after the holder's session expired")
	if le.Token() <= p.Token() {
		t.Errorf("Token() after expiry = %d; want > %d (the lost permit's)", le.Token(), p.Token())
	}
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "session expiry and Release")
}

// testHolders checks HolderLister: every holder in grant order, with
// Shared and Limit, and no waiter.
func (s *suite) testHolders(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	ids := []string{identity("a"), identity("b"), identity("c")}
	ls := []lock.Locker{s.newLocker(t, ids[0]), s.newLocker(t, ids[1]), s.newLocker(t, ids[2])}
	hl := ls[0].(lock.HolderLister)
	s.holdersAre(t, ctx, hl, name, nil, "a free lock")

	first := s.mustAcquire(t, ctx, ls[0], name)
	w := goAcquire(ctx, ls[1], name)
	s.waitRecords(t, name, 2, "writer queued")
	s.holdersAre(t, ctx, hl, name, []lock.Holder{{Identity: ids[0], Token: first.Token()}}, "an exclusive holder and a waiter")
	mustRelease(t, ctx, first)
	wl := s.awaitLease(t, w, "waiter's Acquire")
	s.holdersAre(t, ctx, hl, name, []lock.Holder{{Identity: ids[1], Token: wl.Token()}}, "the waiter granted")
	mustRelease(t, ctx, wl)

	if s.shared {
		r1 := s.mustShared(t, ctx, ls[2], name, "first reader")
		r2 := s.mustShared(t, ctx, ls[0], name, "second reader")
		w := goAcquire(ctx, ls[1], name)
		s.waitRecords(t, name, 3, "writer queued behind readers")
		s.holdersAre(t, ctx, hl, name, []lock.Holder{
			{Identity: ids[2], Token: r1.Token(), Shared: true},
			{Identity: ids[0], Token: r2.Token(), Shared: true},
		}, "two readers and a queued writer")
		s.holderIs(t, ctx, ls[1], name, lock.Holder{Identity: ids[2], Token: r1.Token(), Shared: true})
		mustRelease(t, ctx, r1)
		mustRelease(t, ctx, r2)
		mustRelease(t, ctx, s.awaitLease(t, w, "writer after the readers"))
	}
	if s.sem {
		sem := lockName(t)
		p1 := mustTrySem(t, ctx, ls[1], sem, 2, "of a free semaphore")
		p2 := mustTrySem(t, ctx, ls[2], sem, 2, "with one permit taken")
		waiting := goSem(ctx, ls[0], sem, 2)
		s.waitRecords(t, sem, 3, "semaphore waiter queued")
		s.holdersAre(t, ctx, hl, sem, []lock.Holder{
			{Identity: ids[1], Token: p1.Token(), Shared: true, Limit: 2},
			{Identity: ids[2], Token: p2.Token(), Shared: true, Limit: 2},
		}, "two permits taken and a waiter")
		mustRelease(t, ctx, p1)
		mustRelease(t, ctx, p2)
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
		return
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Holders(%q) with %s = %+v; want %+v (grant order)", name, when, got, want)
			return
		}
	}
}
