package locktest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// revokeSpan is how many tokens above the holder's the Revoke check tries
// (and requires to be refused): on a quiet backend the queued waiter's
// token is among them.
const revokeSpan = 16

// checkRevoked checks a lease that Revoke ended: Done closed, Err and
// Release wrapping ErrLost.
func (s *suite) checkRevoked(t *testing.T, ctx context.Context, le lock.Lease, what string) {
	t.Helper()
	s.checkLost(t, le, what, what+": Err()")
	wantErr(t, what+": Release()", le.Release(ctx), lock.ErrLost)
}

// testRevoke checks that Revoke of any token but the holder's ends nothing
// (an ended grant's, 0, another name's, the tokens right above the
// holder's, among them the queued waiter's), and that Revoke of the
// holder's token, from a third Locker, ends that lease with ErrLost and
// admits the waiter, and a second Revoke of it is refused.
func (s *suite) testRevoke(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 3)
	a, b, c := ls[0], ls[1], ls[2]
	rv := c.(lock.Revoker)

	old := s.mustAcquire(t, ctx, a, name)
	oldTok := old.Token()
	mustRelease(t, ctx, old)
	wantErr(t, fmt.Sprintf("Revoke(%q, %d) of a free lock", name, oldTok), rv.Revoke(ctx, name, oldTok), lock.ErrNotHeld)

	held := s.mustAcquire(t, ctx, a, name)
	tok := held.Token()
	ch := s.enqueue(t, ctx, b, name, excl, 2, "waiter queued")
	wrong := []fencing.Token{0, oldTok}
	for d := fencing.Token(1); d <= revokeSpan; d++ {
		wrong = append(wrong, tok+d)
	}
	for _, w := range wrong {
		wantErr(t, fmt.Sprintf("Revoke(%q, %d) while token %d holds", name, w, tok), rv.Revoke(ctx, name, w), lock.ErrNotHeld)
	}
	other := name + "/other"
	wantErr(t, fmt.Sprintf("Revoke(%q, %d) of another name's holder", other, tok), rv.Revoke(ctx, other, tok), lock.ErrNotHeld)
	wantErr(t, "Revoke of an invalid name", rv.Revoke(ctx, "bad//name", tok), lock.ErrInvalidName)
	checkHeld(t, name, held)
	notReturned(t, ch, "Acquire behind a holder after Revoke of other tokens")
	s.checkRecords(t, name, 2, "after Revoke of tokens that are not the holder's")
	s.holderIs(t, ctx, c, name, lock.Holder{Identity: ids[0], Token: tok})

	if err := rv.Revoke(ctx, name, tok); err != nil {
		t.Fatalf("Revoke(%q, %d) of the holder = %v; want nil", name, tok, err)
	}
	next := s.awaitLease(t, ch, "waiter's Acquire after the holder was revoked")
	checkAfter(t, next, held, "grant after a revoked one")
	s.checkRevoked(t, ctx, held, "revoked lease")
	wantErr(t, fmt.Sprintf("second Revoke(%q, %d)", name, tok), rv.Revoke(ctx, name, tok), lock.ErrNotHeld)
	checkHeld(t, name, next)
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: ids[1], Token: next.Token()})
	mustRelease(t, ctx, next)
	// The revoked holder's Locker is not harmed.
	again := s.mustAcquire(t, ctx, a, name)
	mustRelease(t, ctx, again)
	s.noOrphans(t, name, "Revoke and Release")
}

// testRevokeSemaphore checks that Revoke of one permit of a full semaphore
// ends that permit only: the other holder keeps its own, and the waiter
// is admitted.
func (s *suite) testRevokeSemaphore(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	rv := ls[3].(lock.Revoker)
	p1 := mustTry(t, ctx, ls[0], name, permit(2), "of a free semaphore")
	p2 := mustTry(t, ctx, ls[1], name, permit(2), "with one permit taken")
	ch := s.enqueue(t, ctx, ls[2], name, permit(2), 3, "semaphore waiter queued")
	if err := rv.Revoke(ctx, name, p2.Token()); err != nil {
		t.Fatalf("Revoke(%q, %d) of the later permit = %v; want nil", name, p2.Token(), err)
	}
	p3 := s.awaitLease(t, ch, "AcquireSemaphore after a permit was revoked")
	s.checkRevoked(t, ctx, p2, "revoked permit")
	checkHeld(t, name, p1)
	wantErr(t, fmt.Sprintf("second Revoke(%q, %d) of a permit", name, p2.Token()), rv.Revoke(ctx, name, p2.Token()), lock.ErrNotHeld)
	mustRelease(t, ctx, p1, p3)
	s.noOrphans(t, name, "Revoke of a permit and Release")
}

// testRevokeFrozen checks that Revoke needs nothing from the holder's
// process: with the holder's Locker cut off from the server, Revoke ends
// its grant and the waiter is admitted; once the Locker reaches the server
// again, its lease has ended with ErrLost.
func (s *suite) testRevokeFrozen(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	rv := ls[2].(lock.Revoker)
	held := s.mustAcquire(t, ctx, ls[0], name)
	ch := s.enqueue(t, ctx, ls[1], name, excl, 2, "waiter queued")
	thaw := sync.OnceFunc(s.freezer.FreezeSession(t, ls[0]))
	t.Cleanup(thaw)
	if err := rv.Revoke(ctx, name, held.Token()); err != nil {
		t.Fatalf("Revoke(%q, %d) of a frozen holder = %v; want nil", name, held.Token(), err)
	}
	next := s.awaitLease(t, ch, "waiter's Acquire after a frozen holder was revoked")
	thaw()
	checkAfter(t, next, held, "grant after a revoked one")
	s.checkRevoked(t, ctx, held, "revoked lease of a thawed Locker")
	mustRelease(t, ctx, next)
	s.noOrphans(t, name, "Revoke of a frozen holder and Release")
}
