package locktest

import (
	"errors"
	"testing"

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
