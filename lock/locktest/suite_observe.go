package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testObserve(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	watcher := s.newLocker(t, identity("w"))
	o := watcher.(lock.Observer) // run only for Observers
	r := &observeRig{s: s, t: t, ctx: ctx, name: name, idA: identity("a"), idB: identity("b")}
	r.a, r.b = s.newLocker(t, r.idA), s.newLocker(t, r.idB)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ob := s.observe(t, octx, o, name, "Observe")
	r.ob = ob
	ob.expect(lock.Holder{}, "initial state (free)")
	r.quickGrants()
	r.handOver()

	// An observation that starts while the lock is held sees the holder
	// first.
	la := s.mustAcquire(t, ctx, r.a, name)
	ob2 := s.observe(t, octx, o, name, "second Observe")
	select {
	case h := <-ob2.ch:
		if w := (lock.Holder{Identity: r.idA, Token: la.Token()}); h != w {
			t.Errorf("second observation's first holder = %+v; want %+v", h, w)
		}
	case <-time.After(s.o.Timeout):
		t.Fatalf("second observation: no holder within %v", s.o.Timeout)
	}
	mustRelease(t, ctx, la)

	cancel()
	for i, c := range []holderFeed{ob, ob2} {
		s.checkCancelled(t, c, fmt.Sprintf("observation %d", i+1))
	}
	s.noOrphans(t, name, "observation")
}

// holderFeed is an observation under testObserve: its channel and its
// error.
type holderFeed struct {
	s    *suite
	t    *testing.T
	ch   <-chan lock.Holder
	errf func() error
}

// observe starts an observation of name through o; op names the call in
// a failure.
func (s *suite) observe(t *testing.T, ctx context.Context, o lock.Observer, name, op string) holderFeed {
	t.Helper()
	ch, errf, err := o.Observe(ctx, name)
	if err != nil {
		t.Fatalf("%s(%q) = %v; want nil", op, name, err)
	}
	return holderFeed{s: s, t: t, ch: ch, errf: errf}
}

// next returns the next holder observed; what names the step in a
// failure.
func (ob holderFeed) next(what string) lock.Holder {
	ob.t.Helper()
	timer := time.NewTimer(ob.s.o.Timeout)
	defer timer.Stop()
	select {
	case h, ok := <-ob.ch:
		if !ok {
			ob.t.Fatalf("%s: observation ended: %v", what, ob.errf())
		}
		return h
	case <-timer.C:
		ob.t.Fatalf("%s: no holder observed within %v", what, ob.s.o.Timeout)
		return lock.Holder{}
	}
}

// expect fails the test unless the next holder observed is want.
func (ob holderFeed) expect(want lock.Holder, what string) {
	ob.t.Helper()
	if got := ob.next(what); got != want {
		ob.t.Errorf("%s: observed %+v; want %+v", what, got, want)
	}
}

// observeRig is testObserve's set-up: Lockers a and b (identities idA
// and idB) change the lock name, which ob observes.
type observeRig struct {
	s        *suite
	t        *testing.T
	ctx      context.Context
	name     string
	idA, idB string
	a, b     lock.Locker
	ob       holderFeed
}

// quickGrants makes a few quick grants, not read as they happen: none may
// be dropped (unless Options.ObserveMaySkip). A grant to b, awaited, ends
// the burst.
func (r *observeRig) quickGrants() {
	t, ctx, ob := r.t, r.ctx, r.ob
	const cycles = 5
	var want []lock.Holder
	for range cycles {
		le := r.s.mustAcquire(t, ctx, r.a, r.name)
		want = append(want, lock.Holder{Identity: r.idA, Token: le.Token()}, lock.Holder{})
		mustRelease(t, ctx, le)
	}
	end := r.s.mustAcquire(t, ctx, r.b, r.name)
	wantEnd := lock.Holder{Identity: r.idB, Token: end.Token()}
	if !r.s.o.ObserveMaySkip {
		for i, w := range want {
			ob.expect(w, fmt.Sprintf("change %d of %d quick grants", i+1, len(want)))
		}
		ob.expect(wantEnd, "grant after quick grants")
	} else {
		for rest := want; ; {
			got := ob.next("quick grants")
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
	ob.expect(lock.Holder{}, "released after quick grants")
}

// handOver hands the lock from a to a queued b: free in between is
// allowed.
func (r *observeRig) handOver() {
	t, ctx, ob := r.t, r.ctx, r.ob
	la := r.s.mustAcquire(t, ctx, r.a, r.name)
	ob.expect(lock.Holder{Identity: r.idA, Token: la.Token()}, "a acquired")
	waiting := goAcquire(ctx, r.b, r.name)
	r.s.waitRecords(t, r.name, 2, "b queued")
	mustRelease(t, ctx, la)
	lb := r.s.awaitLease(t, waiting, "b's Acquire")
	wantB := lock.Holder{Identity: r.idB, Token: lb.Token()}
	if got := ob.next("hand-over to b"); got != wantB {
		if got != (lock.Holder{}) {
			t.Errorf("hand-over to b: observed %+v; want %+v or the free state", got, wantB)
		}
		ob.expect(wantB, "hand-over to b, after free")
	}
	mustRelease(t, ctx, lb)
	ob.expect(lock.Holder{}, "b released")
}

// checkCancelled checks that the observation f (what, in messages) ended
// after its context was cancelled, with an error wrapping
// context.Canceled.
func (s *suite) checkCancelled(t *testing.T, f holderFeed, what string) {
	t.Helper()
	s.drainClosed(t, f.ch, what+" after cancel")
	if err := f.errf(); !errors.Is(err, context.Canceled) {
		t.Errorf("%s: error after cancel = %v; want an error wrapping %v", what, err, context.Canceled)
	}
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

// testObserveEndsOnClose checks that closing a Locker ends its
// observations: by the time Close returns, each channel is closed and the
// error function reports ErrClosed.
func (s *suite) testObserveEndsOnClose(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	watcher := s.newLocker(t, identity("w"))
	a := s.newLocker(t, identity("a"))
	o := watcher.(lock.Observer) // run only for Observers

	le := s.mustAcquire(t, ctx, a, name)
	type obs struct {
		ch   <-chan lock.Holder
		errf func() error
	}
	var all []obs
	for i := range 3 {
		ch, errf, err := o.Observe(ctx, name)
		if err != nil {
			t.Fatalf("Observe(%q) #%d = %v; want nil", name, i+1, err)
		}
		all = append(all, obs{ch, errf})
	}
	// The first observation is read; the others have a holder pending.
	select {
	case <-all[0].ch:
	case <-time.After(s.o.Timeout):
		t.Fatalf("no holder observed within %v", s.o.Timeout)
	}
	if err := watcher.Close(); err != nil {
		t.Errorf("Close() = %v; want nil", err)
	}
	for i, ob := range all {
		if !observationEnded(ob.ch) {
			t.Errorf("observation %d: channel open after Close returned; want it closed", i+1)
			s.drainClosed(t, ob.ch, fmt.Sprintf("observation %d after Close", i+1))
		}
		if err := ob.errf(); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("observation %d: error after Close = %v; want an error wrapping %v", i+1, err, lock.ErrClosed)
		}
	}
	mustRelease(t, ctx, le)
	s.noOrphans(t, name, "Release")
}

// observed reads one observation for a check, and fails the check when the
// channel closes or the same holder is sent twice in a row.
type observed struct {
	s       *suite
	ch      <-chan lock.Holder
	errf    func() error
	last    lock.Holder
	started bool
}

// next returns the next holder observed.
func (ob *observed) next(t *testing.T, what string) lock.Holder {
	t.Helper()
	timer := time.NewTimer(ob.s.o.Timeout)
	defer timer.Stop()
	select {
	case h, ok := <-ob.ch:
		if !ok {
			t.Fatalf("%s: observation ended: %v; want it to go on until its context ends", what, ob.errf())
		}
		if ob.started && h == ob.last {
			t.Errorf("%s: observed %+v twice in a row; want each change reported once", what, h)
		}
		ob.started, ob.last = true, h
		return h
	case <-timer.C:
		t.Fatalf("%s: no holder observed within %v", what, ob.s.o.Timeout)
		return lock.Holder{}
	}
}

// expect checks that the next holder observed is want.
func (ob *observed) expect(t *testing.T, want lock.Holder, what string) {
	t.Helper()
	if got := ob.next(t, what); got != want {
		t.Errorf("%s: observed %+v; want %+v", what, got, want)
	}
}

// reach reads until the observation reports want, the state after changes
// made while the observing Locker was cut off. What it reports before must
// be, in order, some of between: a backend that lost track of the events
// of the outage (an etcd compaction, a ZooKeeper watch that fired once)
// may report only the state it finds afterwards, but never a state that did
// not happen or one out of order.
func (ob *observed) reach(t *testing.T, want lock.Holder, between []lock.Holder, what string) []lock.Holder {
	t.Helper()
	var seen []lock.Holder
	for rest := between; ; {
		got := ob.next(t, what)
		seen = append(seen, got)
		if got == want {
			return seen
		}
		i := slices.Index(rest, got)
		if i < 0 {
			t.Fatalf("%s: observed %+v; want, in order, a subsequence of %+v, then %+v (observed so far: %+v)", what, got, between, want, seen)
		}
		rest = rest[i+1:]
	}
}

// testObserveSessionLoss checks that an observation outlives the loss of
// its Locker's connection and session: frozen for a moment
// (SessionFreezer), cut off until the server expired its session
// (SessionStaller), and its session ended by the server (SessionExpirer).
// After each, the observation reports the state the lock is in (having
// reported, in order, at most the states in between), and afterwards
// every change one at a time, vacancy included; it reports no holder
// twice in a row and ends only with its context.
func (s *suite) testObserveSessionLoss(t *testing.T) {
	ctx := s.ctx(t)
	name := lockName(t)
	idA, idB := identity("a"), identity("b")
	watcher := s.newLocker(t, identity("w"))
	o := watcher.(lock.Observer) // run only for Observers
	a := s.newLocker(t, idA)
	b := s.newLocker(t, idB)

	// The harness can only stall or expire a session that exists: the
	// watcher holds a lock of its own.
	own := s.mustAcquire(t, ctx, watcher, name+"-own")

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	feed := s.observe(t, octx, o, name, "Observe")
	ob := &observed{s: s, ch: feed.ch, errf: feed.errf}
	free := lock.Holder{}
	ob.expect(t, free, "initial state (free)")
	la := s.mustAcquire(t, ctx, a, name)
	ob.expect(t, lock.Holder{Identity: idA, Token: la.Token()}, "a acquired")

	// Changes while the watcher is frozen.
	cur := la
	if s.freezer != nil {
		thaw := s.freezer.FreezeSession(t, watcher)
		mustRelease(t, ctx, la)
		cur = s.mustAcquire(t, ctx, b, name)
		thaw()
		seen := ob.reach(t, lock.Holder{Identity: idB, Token: cur.Token()}, []lock.Holder{free}, "b acquired while the watcher was frozen")
		t.Logf("observed across a freeze: %+v", seen)
	}

	// Changes while the watcher is cut off until its session expires:
	// made once the watcher's own lease has ended, which it must see
	// before the server expires its session.
	cur = s.acquireWhileStalled(t, ctx, watcher, own, cur, a, name)
	seen := ob.reach(t, lock.Holder{Identity: idA, Token: cur.Token()}, []lock.Holder{free}, "a acquired while the watcher's session expired")
	t.Logf("observed across a stalled and expired session: %+v", seen)

	// Changes after the server ended the watcher's (new) session.
	if s.expirer != nil {
		cur = s.acquireAfterExpiry(t, ctx, watcher, cur, b, name)
		seen := ob.reach(t, lock.Holder{Identity: idB, Token: cur.Token()}, []lock.Holder{free}, "b acquired after the watcher's session was expired")
		t.Logf("observed across a session expired by the server: %+v", seen)
	}

	// Afterwards, every change made one at a time, vacancy included.
	mustRelease(t, ctx, cur)
	ob.expect(t, free, "released after the session loss")
	la = s.mustAcquire(t, ctx, a, name)
	ob.expect(t, lock.Holder{Identity: idA, Token: la.Token()}, "a acquired after the session loss")
	mustRelease(t, ctx, la)
	ob.expect(t, free, "a released after the session loss")

	cancel()
	s.checkCancelled(t, feed, "observation")
	s.noOrphans(t, name, "observation")
}

// acquireAfterExpiry has the server expire the (new) session of watcher
// and, once the watcher has seen it, releases cur and acquires name
// through b.
func (s *suite) acquireAfterExpiry(t *testing.T, ctx context.Context, watcher lock.Locker, cur lock.Lease, b lock.Locker, name string) lock.Lease {
	t.Helper()
	own := s.mustAcquire(t, ctx, watcher, name+"-own")
	s.expirer.ExpireSession(t, watcher)
	s.waitDone(t, own, "watcher's lease after ExpireSession")
	mustRelease(t, ctx, cur)
	return s.mustAcquire(t, ctx, b, name)
}

// acquireWhileStalled stalls the session of watcher until it expires and,
// once own (the watcher's lease) has ended, which the watcher must see
// before the server expires its session, releases cur and acquires name
// through a.
func (s *suite) acquireWhileStalled(t *testing.T, ctx context.Context, watcher lock.Locker, own, cur lock.Lease, a lock.Locker, name string) lock.Lease {
	t.Helper()
	during := make(chan result, 1)
	go func() {
		select {
		case <-own.Done():
		case <-ctx.Done():
			during <- result{err: ctx.Err()}
			return
		}
		if err := cur.Release(ctx); err != nil {
			during <- result{err: fmt.Errorf("Release() of the holder = %w", err)}
			return
		}
		le, err := a.Acquire(ctx, name)
		during <- result{le, err}
	}()
	s.staller.StallSession(t, watcher)
	return s.awaitLease(t, during, "a's Acquire while the watcher's session expired")
}
