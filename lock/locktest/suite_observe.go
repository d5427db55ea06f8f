package locktest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// feed reads one observation for a check. With noRepeat, a holder
// reported twice in a row fails it.
type feed struct {
	s                 *suite
	t                 *testing.T
	ch                <-chan lock.Holder
	errf              func() error
	noRepeat, started bool
	last              lock.Holder // reported last, once started
}

// observe starts an observation of name through o; op names the call.
func (s *suite) observe(t *testing.T, ctx context.Context, o lock.Observer, name, op string) *feed {
	t.Helper()
	ch, errf, err := o.Observe(ctx, name)
	if err != nil {
		t.Fatalf("%s(%q) = %v; want nil", op, name, err)
	}
	return &feed{s: s, t: t, ch: ch, errf: errf}
}

// next returns the next holder observed; what names the step.
func (ob *feed) next(what string) lock.Holder {
	ob.t.Helper()
	h, ok := recv(ob.t, ob.s, ob.ch, what+": the next holder observed")
	if !ok {
		ob.t.Fatalf("%s: observation ended: %v; want it to go on until its context ends", what, ob.errf())
	}
	if ob.noRepeat && ob.started && h == ob.last {
		ob.t.Errorf("%s: observed %+v twice in a row; want each change reported once", what, h)
	}
	ob.started, ob.last = true, h
	return h
}

// expect fails the test unless the next holder observed is want.
func (ob *feed) expect(want lock.Holder, what string) {
	ob.t.Helper()
	if got := ob.next(what); got != want {
		ob.t.Errorf("%s: observed %+v; want %+v", what, got, want)
	}
}

// reach reads until the observation reports want, and logs what it saw.
// Before, it may skip states (a backend may lose track of events), but
// must report only some of between, in order.
func (ob *feed) reach(want lock.Holder, between []lock.Holder, what string) {
	ob.t.Helper()
	var seen []lock.Holder
	for rest := between; ; {
		got := ob.next(what)
		seen = append(seen, got)
		if got == want {
			ob.t.Logf("%s: observed %+v", what, seen)
			return
		}
		i := slices.Index(rest, got)
		if i < 0 {
			ob.t.Fatalf("%s: observed %+v; want, in order, a subsequence of %+v, then %+v (observed so far: %+v)", what, got, between, want, seen)
		}
		rest = rest[i+1:]
	}
}

// checkCancelled checks that the cancelled observation ended.
func (ob *feed) checkCancelled(what string) {
	ob.t.Helper()
	ob.s.drainClosed(ob.t, ob.ch, what+" after cancel")
	wantErr(ob.t, what+": error after cancel", ob.errf(), context.Canceled)
}

func (s *suite) drainClosed(t *testing.T, ch <-chan lock.Holder, what string) {
	t.Helper()
	for ok := true; ok; {
		_, ok = recv(t, s, ch, what+": the channel's close")
	}
}

func (s *suite) testObserve(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 3)
	o := ls[2].(lock.Observer) // run only for Observers
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ob := s.observe(t, octx, o, name, "Observe")
	ob.expect(lock.Holder{}, "initial state (free)")
	s.quickGrants(t, ctx, ob, name, ls, ids)
	s.handOver(t, ctx, ob, name, ls, ids)

	// Started while the lock is held, an observation sees the holder first.
	la := s.mustAcquire(t, ctx, ls[0], name)
	ob2 := s.observe(t, octx, o, name, "second Observe")
	ob2.expect(lock.Holder{Identity: ids[0], Token: la.Token()}, "second observation's first holder")
	mustRelease(t, ctx, la)

	cancel()
	ob.checkCancelled("observation 1")
	ob2.checkCancelled("observation 2")
	s.noOrphans(t, name, "observation")
}

// quickGrants makes a few quick grants through ls[0], not read as they
// happen, then one through ls[1]; see Options.ObserveMaySkip.
func (s *suite) quickGrants(t *testing.T, ctx context.Context, ob *feed, name string, ls []lock.Locker, ids []string) {
	const cycles = 5
	var want []lock.Holder
	for range cycles {
		le := s.mustAcquire(t, ctx, ls[0], name)
		want = append(want, lock.Holder{Identity: ids[0], Token: le.Token()}, lock.Holder{})
		mustRelease(t, ctx, le)
	}
	end := s.mustAcquire(t, ctx, ls[1], name)
	wantEnd := lock.Holder{Identity: ids[1], Token: end.Token()}
	if s.o.ObserveMaySkip {
		ob.reach(wantEnd, want, "quick grants")
	} else {
		for i, w := range want {
			ob.expect(w, fmt.Sprintf("change %d of %d quick grants", i+1, len(want)))
		}
		ob.expect(wantEnd, "grant after quick grants")
	}
	mustRelease(t, ctx, end)
	ob.expect(lock.Holder{}, "released after quick grants")
}

// handOver hands the lock from ls[0] to a queued ls[1]; the free state in
// between may be reported.
func (s *suite) handOver(t *testing.T, ctx context.Context, ob *feed, name string, ls []lock.Locker, ids []string) {
	la := s.mustAcquire(t, ctx, ls[0], name)
	ob.expect(lock.Holder{Identity: ids[0], Token: la.Token()}, "a acquired")
	waiting := s.enqueue(t, ctx, ls[1], name, excl, 2, "b queued")
	mustRelease(t, ctx, la)
	lb := s.awaitLease(t, waiting, "b's Acquire")
	wantB := lock.Holder{Identity: ids[1], Token: lb.Token()}
	if got := ob.next("hand-over to b"); got != wantB {
		if got != (lock.Holder{}) {
			t.Errorf("hand-over to b: observed %+v; want %+v or the free state", got, wantB)
		}
		ob.expect(wantB, "hand-over to b, after free")
	}
	mustRelease(t, ctx, lb)
	ob.expect(lock.Holder{}, "b released")
}

// testObserveEndsOnClose checks that Close ends the observations.
func (s *suite) testObserveEndsOnClose(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	watcher := ls[1]
	le := s.mustAcquire(t, ctx, ls[0], name)
	var all []*feed
	for i := range 3 {
		all = append(all, s.observe(t, ctx, watcher.(lock.Observer), name, fmt.Sprintf("Observe #%d", i+1)))
	}
	// The first observation is read; the others have a holder pending.
	all[0].next("first observation")
	noErr(t, "Close()", watcher.Close())
	for i, ob := range all {
		if !observationEnded(ob.ch) {
			t.Errorf("observation %d: channel open after Close returned; want it closed", i+1)
			s.drainClosed(t, ob.ch, fmt.Sprintf("observation %d after Close", i+1))
		}
		wantErr(t, fmt.Sprintf("observation %d: error after Close", i+1), ob.errf(), lock.ErrClosed)
	}
	s.releaseLast(t, ctx, name, "Release", le)
}

// testObserveSessionLoss checks that an observation outlives its Locker's
// session being frozen, stalled and expired: after each it reports the
// current state, and every change afterwards, none twice in a row.
func (s *suite) testObserveSessionLoss(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 3)
	a, b, watcher := ls[0], ls[1], ls[2]
	// The harness can only stall or expire a session that exists: the
	// watcher holds a lock of its own.
	own := s.mustAcquire(t, ctx, watcher, name+"-own")

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ob := s.observe(t, octx, watcher.(lock.Observer), name, "Observe")
	ob.noRepeat = true
	free := lock.Holder{}
	ob.expect(free, "initial state (free)")
	cur := s.mustAcquire(t, ctx, a, name)
	ob.expect(lock.Holder{Identity: ids[0], Token: cur.Token()}, "a acquired")

	if s.freezer != nil {
		thaw := s.freezer.FreezeSession(t, watcher)
		mustRelease(t, ctx, cur)
		cur = s.mustAcquire(t, ctx, b, name)
		thaw()
		ob.reach(lock.Holder{Identity: ids[1], Token: cur.Token()}, []lock.Holder{free}, "b acquired while the watcher was frozen")
	}

	cur = s.acquireWhileStalled(t, ctx, watcher, own, cur, a, name)
	ob.reach(lock.Holder{Identity: ids[0], Token: cur.Token()}, []lock.Holder{free}, "a acquired while the watcher's session expired")

	if s.expirer != nil {
		// The server expires the watcher's new session.
		own := s.mustAcquire(t, ctx, watcher, name+"-own")
		s.expirer.ExpireSession(t, watcher)
		await(t, s, own.Done(), "watcher's lease after ExpireSession: Done()")
		mustRelease(t, ctx, cur)
		cur = s.mustAcquire(t, ctx, b, name)
		ob.reach(lock.Holder{Identity: ids[1], Token: cur.Token()}, []lock.Holder{free}, "b acquired after the watcher's session was expired")
	}

	// Afterwards, every change made one at a time, vacancy included.
	mustRelease(t, ctx, cur)
	ob.expect(free, "released after the session loss")
	la := s.mustAcquire(t, ctx, a, name)
	ob.expect(lock.Holder{Identity: ids[0], Token: la.Token()}, "a acquired after the session loss")
	mustRelease(t, ctx, la)
	ob.expect(free, "a released after the session loss")

	cancel()
	ob.checkCancelled("observation")
	s.noOrphans(t, name, "observation")
}

// acquireWhileStalled stalls watcher's session until it expires and, once
// own has ended, releases cur and acquires name through a.
func (s *suite) acquireWhileStalled(t *testing.T, ctx context.Context, watcher lock.Locker, own, cur lock.Lease, a lock.Locker, name string) lock.Lease {
	t.Helper()
	during := goCall(func() (lock.Lease, error) {
		select {
		case <-own.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := cur.Release(ctx); err != nil {
			return nil, fmt.Errorf("Release() of the holder = %w", err)
		}
		return a.Acquire(ctx, name)
	})
	s.staller.StallSession(t, watcher)
	return s.awaitLease(t, during, "a's Acquire while the watcher's session expired")
}
