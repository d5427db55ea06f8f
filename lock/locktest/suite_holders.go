package locktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// testHolders checks that Holders lists the holders in grant order.
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
		s.releaseLast(t, ctx, sem, "every permit released", s.awaitLease(t, waiting, "semaphore waiter"))
	}
	s.holdersAre(t, ctx, hl, name, nil, "every grant released")
	s.noOrphans(t, name, "every grant released")
}

func (s *suite) holdersAre(t *testing.T, ctx context.Context, hl lock.HolderLister, name string, want []lock.Holder, when string) {
	t.Helper()
	got, err := hl.Holders(ctx, name)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Holders(%q) with %s = %+v, %v; want %+v (grant order), nil", name, when, got, err, want)
	}
}

// wantEntry is what the suite knows of a queue entry; token 0 means any.
type wantEntry struct {
	identity string
	token    uint64
	held     bool
	shared   bool
}

// checkPositions checks what holds in every listing: positions 0, 1, …,
// rising tokens, the holders first, and Since unknown or not decreasing.
func checkPositions(t *testing.T, es []lock.QueueEntry, name, when string) {
	t.Helper()
	zero := 0
	for i, e := range es {
		if e.Position != i {
			t.Errorf("Queue(%q) %s: entry %d has Position %d; want %d", name, when, i, e.Position, i)
		}
		if i > 0 && e.Token <= es[i-1].Token {
			t.Errorf("Queue(%q) %s: entry %d has token %d after token %d; want rising tokens (queue order)", name, when, i, e.Token, es[i-1].Token)
		}
		if i > 0 && e.Held && !es[i-1].Held {
			t.Errorf("Queue(%q) %s: entry %d held behind a waiter; want the holders first", name, when, i)
		}
		if e.Since.IsZero() {
			zero++
		} else if i > 0 && e.Since.Before(es[i-1].Since) {
			t.Errorf("Queue(%q) %s: entry %d has Since %v before the entry ahead of it (%v)", name, when, i, e.Since, es[i-1].Since)
		}
	}
	if zero != 0 && zero != len(es) {
		t.Errorf("Queue(%q) %s: %d of %d entries have no Since; want all or none", name, when, zero, len(es))
	}
}

// queueIs lists name's queue through l and checks it against want.
func queueIs(t *testing.T, ctx context.Context, l lock.Locker, name, when string, want []wantEntry) []lock.QueueEntry {
	t.Helper()
	es, err := l.(lock.QueueLister).Queue(ctx, name)
	if err != nil {
		t.Fatalf("Queue(%q) %s = %v; want nil error", name, when, err)
	}
	checkPositions(t, es, name, when)
	if len(es) != len(want) {
		t.Fatalf("Queue(%q) %s = %+v; want %d entries", name, when, es, len(want))
	}
	for i, w := range want {
		e := es[i]
		if e.Identity != w.identity || e.Held != w.held || e.Shared != w.shared || e.Limit != 0 || (w.token != 0 && uint64(e.Token) != w.token) {
			t.Errorf("Queue(%q) %s: entry %d = %+v; want identity %q, held %v, shared %v, token %d (0: any)", name, when, i, e, w.identity, w.held, w.shared, w.token)
		}
	}
	return es
}

// testQueue checks the listing of a lock's queue as grants are released;
// with a Revoker, also that a waiter's token cannot be revoked.
func (s *suite) testQueue(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 4)
	q := ls[3]
	queueIs(t, ctx, q, name, "of a free name", nil)

	held := s.mustAcquire(t, ctx, ls[0], name)
	chB := s.enqueue(t, ctx, ls[1], name, excl, 2, "first waiter queued")
	chC := s.enqueue(t, ctx, ls[2], name, excl, 3, "second waiter queued")
	when := "with a holder and two waiters"
	es := queueIs(t, ctx, q, name, when, []wantEntry{
		{ids[0], uint64(held.Token()), true, false}, {ids[1], 0, false, false}, {ids[2], 0, false, false}})
	if s.has[needsRevoker] {
		wantErr(t, fmt.Sprintf("Revoke(%q, %d) of a waiter", name, es[1].Token), q.(lock.Revoker).Revoke(ctx, name, es[1].Token), lock.ErrNotHeld)
		notReturned(t, chB, "Acquire of a waiter after Revoke of its token")
	}

	mustRelease(t, ctx, held)
	b := s.awaitLease(t, chB, "first waiter's Acquire after Release")
	if b.Token() != es[1].Token {
		t.Errorf("first waiter granted token %d; Queue listed it with token %d", b.Token(), es[1].Token)
	}
	when = "after the holder released"
	es2 := queueIs(t, ctx, q, name, when, []wantEntry{{ids[1], uint64(b.Token()), true, false}, {ids[2], uint64(es[2].Token), false, false}})
	if len(es2) == 2 && (!es2[0].Since.Equal(es[1].Since) || !es2[1].Since.Equal(es[2].Since)) {
		t.Errorf("Queue(%q) %s: Since %v, %v; listed before as %v, %v (the same requests)", name, when, es2[0].Since, es2[1].Since, es[1].Since, es[2].Since)
	}

	mustRelease(t, ctx, b)
	c := s.awaitLease(t, chC, "second waiter's Acquire after Release")
	queueIs(t, ctx, q, name, "after the second holder released", []wantEntry{{ids[2], uint64(c.Token()), true, false}})
	mustRelease(t, ctx, c)
	queueIs(t, ctx, q, name, "after the last Release", nil)
	s.noOrphans(t, name, "Queue and Release")
}

// testQueueShared checks the listing of a read-write lock's queue.
func (s *suite) testQueueShared(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 5)
	q := ls[4]
	r1 := s.mustShared(t, ctx, ls[0], name, "first reader")
	r2 := s.mustShared(t, ctx, ls[1], name, "second reader")
	chW := s.enqueue(t, ctx, ls[2], name, excl, 3, "writer queued")
	chR := s.enqueue(t, ctx, ls[3], name, shared, 4, "reader queued behind the writer")
	when := "with two readers holding, a writer and a reader waiting"
	queueIs(t, ctx, q, name, when, []wantEntry{
		{ids[0], uint64(r1.Token()), true, true}, {ids[1], uint64(r2.Token()), true, true},
		{ids[2], 0, false, false}, {ids[3], 0, false, true}})

	mustRelease(t, ctx, r1, r2)
	w := s.awaitLease(t, chW, "writer's Acquire after the readers released")
	when = "with the writer holding and a reader waiting"
	queueIs(t, ctx, q, name, when, []wantEntry{
		{ids[2], uint64(w.Token()), true, false}, {ids[3], 0, false, true}})
	mustRelease(t, ctx, w)
	s.releaseLast(t, ctx, name, "Queue of a read-write lock and Release", s.awaitLease(t, chR, "reader's AcquireShared after the writer released"))
}

// revokeSpan is how many tokens above the holder's Revoke must refuse; the
// queued waiter's is among them on a quiet backend.
const revokeSpan = 16

func (s *suite) checkRevoked(t *testing.T, ctx context.Context, le lock.Lease, what string) {
	t.Helper()
	s.checkLost(t, le, what, what+": Err()")
	wantErr(t, what+": Release()", le.Release(ctx), lock.ErrLost)
}

// testRevoke checks that Revoke of any token but the holder's ends
// nothing, and that Revoke of the holder's, from a third Locker, ends that
// lease with ErrLost, admits the waiter, and cannot be repeated.
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

	noErr(t, fmt.Sprintf("Revoke(%q, %d) of the holder", name, tok), rv.Revoke(ctx, name, tok))
	next := s.awaitLease(t, ch, "waiter's Acquire after the holder was revoked")
	checkAfter(t, next, held, "grant after a revoked one")
	s.checkRevoked(t, ctx, held, "revoked lease")
	wantErr(t, fmt.Sprintf("second Revoke(%q, %d)", name, tok), rv.Revoke(ctx, name, tok), lock.ErrNotHeld)
	checkHeld(t, name, next)
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: ids[1], Token: next.Token()})
	mustRelease(t, ctx, next)
	// The revoked holder's Locker is not harmed.
	again := s.mustAcquire(t, ctx, a, name)
	s.releaseLast(t, ctx, name, "Revoke and Release", again)
}

// testRevokeSemaphore checks that Revoke of a permit ends it only.
func (s *suite) testRevokeSemaphore(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 4)
	rv := ls[3].(lock.Revoker)
	p1 := mustTry(t, ctx, ls[0], name, permit(2), "of a free semaphore")
	p2 := mustTry(t, ctx, ls[1], name, permit(2), "with one permit taken")
	ch := s.enqueue(t, ctx, ls[2], name, permit(2), 3, "semaphore waiter queued")
	noErr(t, fmt.Sprintf("Revoke(%q, %d) of the later permit", name, p2.Token()), rv.Revoke(ctx, name, p2.Token()))
	p3 := s.awaitLease(t, ch, "AcquireSemaphore after a permit was revoked")
	s.checkRevoked(t, ctx, p2, "revoked permit")
	checkHeld(t, name, p1)
	wantErr(t, fmt.Sprintf("second Revoke(%q, %d) of a permit", name, p2.Token()), rv.Revoke(ctx, name, p2.Token()), lock.ErrNotHeld)
	s.releaseLast(t, ctx, name, "Revoke of a permit and Release", p1, p3)
}

// testRevokeFrozen checks that Revoke needs nothing from the holder's
// process: it works while the holder is cut off from the server.
func (s *suite) testRevokeFrozen(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	rv := ls[2].(lock.Revoker)
	held := s.mustAcquire(t, ctx, ls[0], name)
	ch := s.enqueue(t, ctx, ls[1], name, excl, 2, "waiter queued")
	thaw := sync.OnceFunc(s.freezer.FreezeSession(t, ls[0]))
	t.Cleanup(thaw)
	noErr(t, fmt.Sprintf("Revoke(%q, %d) of a frozen holder", name, held.Token()), rv.Revoke(ctx, name, held.Token()))
	next := s.awaitLease(t, ch, "waiter's Acquire after a frozen holder was revoked")
	thaw()
	checkAfter(t, next, held, "grant after a revoked one")
	s.checkRevoked(t, ctx, held, "revoked lease of a thawed Locker")
	s.releaseLast(t, ctx, name, "Revoke of a frozen holder and Release", next)
}
