package locktest

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// wantEntry is what the suite knows of a queue entry: who, whether held, and
// its kind; its token when known (0: any, but rising along the queue).
type wantEntry struct {
	identity string
	token    uint64
	held     bool
	shared   bool
}

// checkPositions checks what holds in every listing: positions 0, 1, ...,
// tokens rising, the held entries a prefix, and Since either unknown
// everywhere or never decreasing.
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

// queueIs lists name's queue through l, checks the listing against want,
// and returns it.
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

// testQueue checks the listing of a lock's queue in arrival order, and
// its updates as grants are released; with a Revoker, also that a
// waiter's token (which Queue reveals) cannot be revoked.
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
	when = "after the second holder released"
	queueIs(t, ctx, q, name, when, []wantEntry{{ids[2], uint64(c.Token()), true, false}})
	mustRelease(t, ctx, c)
	when = "after the last Release"
	queueIs(t, ctx, q, name, when, nil)
	s.noOrphans(t, name, "Queue and Release")
}

// testQueueShared checks the listing of a read-write lock's queue: the
// readers holding together, then a waiting writer and a reader behind it,
// and the writer's turn after the readers released.
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
	mustRelease(t, ctx, s.awaitLease(t, chR, "reader's AcquireShared after the writer released"))
	s.noOrphans(t, name, "Queue of a read-write lock and Release")
}
