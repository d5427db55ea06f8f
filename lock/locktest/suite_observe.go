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
	idA, idB := identity("a"), identity("b")
	watcher := s.newLocker(t, identity("w"))
	o := watcher.(lock.Observer) // run only for Observers
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
