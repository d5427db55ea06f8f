package locktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// The Multi subtests call lock.AcquireAll and lock.TryAcquireAll, which
// use the Locker's lock.MultiLocker if it has one, else take the names one
// by one. While a set waits for one of its names, whether its other names
// can be taken is left open: the fallback holds those sorted before the
// name, a native backend has a waiting record in every queue.

// multiSetup returns a context, two Lockers, and n sorted names that no
// other test or run uses.
func (s *suite) multiSetup(t *testing.T, n int) (context.Context, []lock.Locker, []string) {
	ctx, base, ls, _ := s.setup(t, 2)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return ctx, ls, names
}

type allResult struct {
	m   *lock.MultiLease
	err error
}

// goAll runs AcquireAll (TryAcquireAll if try) in a goroutine.
func goAll(ctx context.Context, l lock.Locker, try bool, names []string) <-chan allResult {
	call := lock.AcquireAll
	if try {
		call = lock.TryAcquireAll
	}
	ch := make(chan allResult, 1)
	go func() {
		m, err := call(ctx, l, names...)
		ch <- allResult{m, err}
	}()
	return ch
}

// awaitAll waits for a background AcquireAll, which must return a
// MultiLease if want is nil, else an error wrapping want and none.
func (s *suite) awaitAll(t *testing.T, ch <-chan allResult, what string, want error) *lock.MultiLease {
	t.Helper()
	r := await(t, s, ch, what)
	switch {
	case want == nil && (r.err != nil || r.m == nil):
		t.Fatalf("%s = %v; want a MultiLease", what, r.err)
	case want != nil && r.m != nil:
		t.Errorf("%s = a MultiLease of %q; want an error wrapping %v", what, r.m.Names(), want)
		_ = r.m.Release(context.Background())
	case want != nil:
		wantErr(t, what, r.err, want)
	}
	return r.m
}

// free checks that l takes each of names at once, and leaves no record.
func (s *suite) free(t *testing.T, ctx context.Context, l lock.Locker, names []string, when string) {
	t.Helper()
	for _, n := range names {
		s.releaseLast(t, ctx, n, when, mustTry(t, ctx, l, n, excl, when))
	}
}

func (s *suite) testMultiAcquireRelease(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 3)
	prev := mustTry(t, ctx, ls[1], names[1], excl, "of a free name")
	mustRelease(t, ctx, prev)
	m := s.awaitAll(t, goAll(ctx, ls[0], false, []string{names[2], names[0], names[1]}), "AcquireAll of free names", nil)
	if got := m.Names(); !slices.Equal(got, names) {
		t.Fatalf("Names() = %q; want %q (sorted)", got, names)
	}
	les := m.Leases()
	for i, n := range names {
		checkHeld(t, n, les[i])
		checkAfter(t, les[i], prev, "AcquireAll's lease of "+n)
		if tok := m.Token(n); tok != les[i].Token() {
			t.Errorf("Token(%q) = %d; want %d, the token of Leases()[%d]", n, tok, les[i].Token(), i)
		}
		refuses(t, ctx, ls[1], n, excl, true, fmt.Sprintf("(%q) on another Locker while a MultiLease holds it", n), lock.ErrLocked)
		s.checkRecords(t, n, 1, "held by a MultiLease")
	}
	if tok := m.Token(names[0] + "x"); tok != 0 {
		t.Errorf("Token() of a name not held = %d; want 0", tok)
	}
	if err := m.Err(); err != nil || isClosed(m.Done()) {
		t.Errorf("while held: Err() = %v, Done() closed %v; want nil, open", err, isClosed(m.Done()))
	}
	noErr(t, "MultiLease Release()", m.Release(ctx))
	if !isClosed(m.Done()) {
		t.Errorf("MultiLease Done() open after Release returned; want closed")
	}
	wantErr(t, "MultiLease Err() after Release", m.Err(), lock.ErrReleased)
	wantErr(t, "second MultiLease Release()", m.Release(ctx), lock.ErrReleased)
	s.free(t, ctx, ls[1], names, "after MultiLease Release")
}

func (s *suite) testMultiTryAcquire(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 3)
	held := mustTry(t, ctx, ls[1], names[1], excl, "of a free name")
	s.awaitAll(t, goAll(ctx, ls[0], true, names), "TryAcquireAll while one name is held", lock.ErrLocked)
	s.checkRecords(t, names[1], 1, "after TryAcquireAll returned ErrLocked")
	s.free(t, ctx, ls[1], []string{names[0], names[2]}, "after TryAcquireAll returned ErrLocked")
	mustRelease(t, ctx, held)
	m := s.awaitAll(t, goAll(ctx, ls[0], true, names), "TryAcquireAll after the holder released", nil)
	noErr(t, "MultiLease Release()", m.Release(ctx))
	s.free(t, ctx, ls[1], names, "after MultiLease Release")
}

// queueAll has ls[1] hold names[1] and ls[0] wait for all of names.
func (s *suite) queueAll(t *testing.T, ctx, wctx context.Context, ls []lock.Locker, names []string) (lock.Lease, <-chan allResult) {
	t.Helper()
	held := s.mustAcquire(t, ctx, ls[1], names[1])
	ch := goAll(wctx, ls[0], false, names)
	s.waitRecords(t, names[1], 2, "AcquireAll queued behind a plain lease")
	return held, ch
}

func (s *suite) testMultiWaitsForEach(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 3)
	held, ch := s.queueAll(t, ctx, ctx, ls, names)
	notReturned(t, ch, "AcquireAll while one of its names is held")
	mustRelease(t, ctx, held)
	m := s.awaitAll(t, ch, "AcquireAll after the plain lease was released", nil)
	checkAfter(t, m.Leases()[1], held, "AcquireAll's lease of the name it waited for")
	noErr(t, "MultiLease Release()", m.Release(ctx))
	s.free(t, ctx, ls[1], names, "after MultiLease Release")
}

func (s *suite) testMultiCancel(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 3)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held, ch := s.queueAll(t, ctx, wctx, ls, names)
	cancel()
	s.awaitAll(t, ch, "AcquireAll after its context was cancelled", context.Canceled)
	s.waitRecords(t, names[1], 1, "cancelled AcquireAll's record deleted")
	checkHeld(t, names[1], held)
	s.free(t, ctx, ls[1], []string{names[0], names[2]}, "after a cancelled AcquireAll")
	s.releaseLast(t, ctx, names[1], "Release", held)
}

func (s *suite) testMultiLoss(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 3)
	m := s.awaitAll(t, goAll(ctx, ls[0], false, names), "AcquireAll of free names", nil)
	s.expirer.ExpireSession(t, ls[0])
	await(t, s, m.Done(), "MultiLease of an expired session: Done()")
	wantErr(t, "MultiLease Err() after session expiry", m.Err(), lock.ErrLost)
	s.free(t, ctx, ls[1], names, "after the MultiLease's session expired")
	wantErr(t, "Release() of a lost MultiLease", m.Release(ctx), lock.ErrLost)
}

func (s *suite) testMultiBadInput(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 2)
	var nilCtx context.Context
	for _, tt := range []struct {
		what  string
		ctx   context.Context
		l     lock.Locker
		names []string
		want  error
	}{
		{"a nil context", nilCtx, ls[0], names, lock.ErrInvalidConfig},
		{"a nil Locker", ctx, nil, names, lock.ErrInvalidConfig},
		{"a typed nil Locker", ctx, (*MemLocker)(nil), names, lock.ErrInvalidConfig},
		{"no names", ctx, ls[0], nil, lock.ErrInvalidConfig},
		{"a name twice", ctx, ls[0], []string{names[1], names[0], names[1]}, lock.ErrInvalidConfig},
		{"an invalid name", ctx, ls[0], []string{names[0], "a//b"}, lock.ErrInvalidName},
	} {
		for _, op := range []string{"AcquireAll", "TryAcquireAll"} {
			s.awaitAll(t, goAll(tt.ctx, tt.l, op == "TryAcquireAll", tt.names), op+" with "+tt.what, tt.want)
		}
	}
	s.free(t, ctx, ls[1], names, "after AcquireAll refused bad input")
	wantErr(t, "Release() of a nil MultiLease", (*lock.MultiLease)(nil).Release(ctx), lock.ErrInvalidConfig)
}

// testMultiNoDeadlock has goroutines on several Lockers take random
// overlapping sets of names, each given in random order: every call must
// return within Options.Timeout, and no name may have two holders.
func (s *suite) testMultiNoDeadlock(t *testing.T) {
	ctx, ls, names := s.multiSetup(t, 6)
	holders := make([]atomic.Int32, 6)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for r := 0; r < 12 && s.multiRound(t, ctx, ls[g%len(ls)], names, holders, fmt.Sprintf("goroutine %d (Locker %d) round %d", g, g%len(ls), r)); r++ {
			}
		})
	}
	wg.Wait()
	for _, n := range names {
		s.noOrphans(t, n, "the last Release")
	}
}

// multiRound takes a random set of names through l, stays inside, and
// releases; false if no MultiLease. holders counts each name's holders.
func (s *suite) multiRound(t *testing.T, ctx context.Context, l lock.Locker, names []string, holders []atomic.Int32, who string) bool {
	idx := rand.Perm(len(names))[:2+rand.IntN(3)]
	set := make([]string, len(idx))
	for i, j := range idx {
		set[i] = names[j]
	}
	actx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	m, err := lock.AcquireAll(actx, l, set...)
	if err != nil {
		var held []int
		for j := range holders {
			if holders[j].Load() > 0 {
				held = append(held, j)
			}
		}
		t.Errorf("%s: AcquireAll of names %v = %v; want a MultiLease within %v (names held meanwhile: %v)", who, idx, err, s.o.Timeout, held)
		return false
	}
	for _, j := range idx {
		if n := holders[j].Add(1); n > 1 {
			t.Errorf("%s: AcquireAll of names %v: name %d has %d holders; want 1", who, idx, j, n)
		}
	}
	for range 100 {
		runtime.Gosched()
	}
	if h, err := l.Holder(ctx, set[0]); err != nil || h.Token != m.Token(set[0]) {
		t.Errorf("%s: Holder(%q) inside = %+v, %v; want token %d", who, set[0], h, err, m.Token(set[0]))
	}
	for _, j := range idx {
		holders[j].Add(-1)
	}
	noErr(t, who+": MultiLease Release()", m.Release(ctx))
	return true
}
