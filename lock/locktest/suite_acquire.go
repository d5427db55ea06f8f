package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

func (s *suite) testAcquireRelease(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	le := s.mustAcquire(t, ctx, ls[0], name)
	checkHeld(t, name, le)
	s.checkRecords(t, name, 1, "while held")
	mustRelease(t, ctx, le)
	checkReleased(t, le)
	s.noOrphans(t, name, "Release")

	// The lock is free again, with a higher token.
	le2 := s.mustAcquire(t, ctx, ls[0], name)
	checkHeld(t, name, le2)
	checkAfter(t, le2, le, "second grant")
	s.releaseLast(t, ctx, name, "second Release", le2)
}

func (s *suite) testTryAcquire(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	le := mustTry(t, ctx, ls[0], name, excl, "of a free lock")
	refuses(t, ctx, ls[1], name, excl, true, " on another Locker while held", lock.ErrLocked)
	refuses(t, ctx, ls[0], name, excl, true, " on the holding Locker while held", lock.ErrLocked)
	s.checkRecords(t, name, 1, "after TryAcquire returned ErrLocked")
	checkHeld(t, name, le)
	mustRelease(t, ctx, le)

	le2 := mustTry(t, ctx, ls[1], name, excl, "after Release")
	checkAfter(t, le2, le, "TryAcquire after Release")
	s.releaseLast(t, ctx, name, "Release", le2)
}

// testTokensIncrease checks that tokens rise with every grant of a name.
func (s *suite) testTokensIncrease(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	s.checkRising(t, ctx, ls, []string{name}, s.o.Rounds, true)
}

// testTokensAcrossNames checks that tokens of all names come from one
// counter, as package lock promises and fencing.Guard relies on.
func (s *suite) testTokensAcrossNames(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 2)
	names := []string{name + "-a", name + "-b", name + "-c"}
	s.checkRising(t, ctx, ls, names, max(s.o.Rounds, 2*len(names)), false)
}

// checkRising acquires names in turn through lockers in turn (with try,
// every second time by TryAcquire), and checks that every token rises.
func (s *suite) checkRising(t *testing.T, ctx context.Context, lockers []lock.Locker, names []string, rounds int, try bool) {
	var prev fencing.Token
	var prevName string
	for i := range rounds {
		name := names[i%len(names)]
		le, err := excl.call(ctx, lockers[i%len(lockers)], name, try && i%2 == 1)
		if err != nil {
			t.Fatalf("round %d: acquire %q = %v; want a lease", i, name, err)
		}
		if tok := le.Token(); tok <= prev {
			t.Errorf("round %d: acquire %q: Token() = %d; want > %d (the grant of %q before it)", i, name, tok, prev, prevName)
		}
		prev, prevName = le.Token(), name
		mustRelease(t, ctx, le)
	}
	for _, name := range names {
		s.noOrphans(t, name, "the last Release")
	}
}

func (s *suite) testSameLockerExcludes(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	l := ls[0]
	first := s.mustAcquire(t, ctx, l, name)
	ch := s.enqueue(t, ctx, l, name, excl, 2, "second Acquire on the same Locker")
	notReturned(t, ch, "second Acquire on the same Locker")
	refuses(t, ctx, l, name, excl, true, " on the holding Locker", lock.ErrLocked)
	mustRelease(t, ctx, first)
	second := s.awaitLease(t, ch, "second Acquire on the same Locker")
	checkAfter(t, second, first, "second lease")
	wantErr(t, "first lease Err() after its Release", first.Err(), lock.ErrReleased)
	checkHeld(t, name, second)
	s.releaseLast(t, ctx, name, "Release", second)
}

// grant is one critical section of a crowd, timed by a logical clock.
type grant struct {
	start, end int64
	token      fencing.Token
	who        string
}

// crowd is what the goroutines of a contention subtest share: how many are
// inside (and the most at once), trying to get in, or not done.
type crowd struct {
	s                                *suite
	name                             string
	k                                kind
	inside, most, attempting, active atomic.Int32
	clock                            atomic.Int64
	mu                               sync.Mutex
	grants                           []grant
}

// runCrowd has n goroutines on lockers take k on name rounds times each.
func (s *suite) runCrowd(t *testing.T, lockers []lock.Locker, name string, k kind, n, rounds int) *crowd {
	c := &crowd{s: s, name: name, k: k}
	c.active.Store(int32(n))
	var wg sync.WaitGroup
	for g := range n {
		l, who := lockers[g%len(lockers)], fmt.Sprintf("goroutine %d (Locker %d)", g, g%len(lockers))
		wg.Go(func() {
			defer c.active.Add(-1)
			for r := range rounds {
				if !c.round(t, l, fmt.Sprintf("%s round %d", who, r), r%2 == 1) {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(c.grants) != n*rounds && !t.Failed() {
		t.Errorf("%d grants; want %d", len(c.grants), n*rounds)
	}
	return c
}

// round takes k through l, stays inside, and releases; false if no lease.
func (c *crowd) round(t *testing.T, l lock.Locker, who string, try bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.o.Timeout)
	defer cancel()
	c.attempting.Add(1)
	le, err := acquireRetry(ctx, l, c.name, c.k, try && c.k.sem)
	c.attempting.Add(-1)
	if err != nil {
		t.Errorf("%s: %s = %v; want a lease", who, c.k.op(false), err)
		return false
	}
	start, limit := c.clock.Add(1), int32(max(1, c.k.limit))
	n := c.inside.Add(1)
	if n > limit {
		t.Errorf("%s: %d holders at once; want at most %d", who, n, limit)
	}
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	c.hold()
	// The round trip also widens the window that catches a second holder.
	if h, err := l.Holder(ctx, c.name); c.k == excl && (err != nil || h.Token != le.Token()) {
		t.Errorf("%s: Holder() inside the critical section = %+v, %v; want token %d", who, h, err, le.Token())
	}
	c.inside.Add(-1)
	c.mu.Lock()
	c.grants = append(c.grants, grant{start, c.clock.Add(1), le.Token(), who})
	c.mu.Unlock()
	noErr(t, fmt.Sprintf("%s: Release", who), le.Release(ctx))
	return true
}

// hold keeps a holder inside until every other goroutine at work is inside
// or trying to get in, so that one holder too many would get in now.
func (c *crowd) hold() {
	deadline := time.Now().Add(50 * time.Millisecond)
	for c.inside.Load()+c.attempting.Load() < c.active.Load() && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	for range 100 {
		runtime.Gosched()
	}
}

// acquireRetry makes the request for k, or its Try form until it grants.
func acquireRetry(ctx context.Context, l lock.Locker, name string, k kind, try bool) (lock.Lease, error) {
	for {
		le, err := k.call(ctx, l, name, try)
		if !try || !errors.Is(err, lock.ErrLocked) {
			return le, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (s *suite) testMutualExclusion(t *testing.T) {
	_, name, ls, _ := s.setup(t, s.o.Lockers)
	c := s.runCrowd(t, ls, name, excl, s.o.Lockers*s.o.Goroutines, max(1, s.o.Rounds/s.o.Goroutines))
	c.check(t)
	s.noOrphans(t, name, "the last Release")
}

// check fails t if critical sections overlapped or tokens did not rise.
func (c *crowd) check(t *testing.T) {
	t.Helper()
	slices.SortFunc(c.grants, func(a, b grant) int { return int(a.start - b.start) })
	for i := 1; i < len(c.grants); i++ {
		p, g := c.grants[i-1], c.grants[i]
		if g.start < p.end {
			t.Errorf("critical sections overlap: %s (token %d) [%d,%d] and %s (token %d) [%d,%d]",
				p.who, p.token, p.start, p.end, g.who, g.token, g.start, g.end)
		}
		if g.token <= p.token {
			t.Errorf("tokens not increasing in grant order: %s got %d after %s got %d", g.who, g.token, p.who, p.token)
		}
	}
}

// testFIFO checks that each release admits the next waiter only.
func (s *suite) testFIFO(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 3)
	prev := s.mustAcquire(t, ctx, ls[0], name)
	var chs []<-chan result
	for i := range 4 {
		l := ls[(i+1)%len(ls)]
		chs = append(chs, s.enqueue(t, ctx, l, name, excl, i+2, fmt.Sprintf("waiter %d queued", i)))
	}
	for i, ch := range chs {
		mustRelease(t, ctx, prev)
		le := s.awaitLease(t, ch, fmt.Sprintf("waiter %d, next in arrival order", i))
		checkAfter(t, le, prev, fmt.Sprintf("waiter %d", i))
		for j, later := range chs[i+1:] {
			notReturned(t, later, fmt.Sprintf("waiter %d while waiter %d holds", i+1+j, i))
		}
		prev = le
	}
	s.releaseLast(t, ctx, name, "every waiter released", prev)
}

func (s *suite) testHolder(t *testing.T) {
	ctx, name, ls, ids := s.setup(t, 2)
	a, b := ls[0], ls[1]
	s.notHeld(t, ctx, a, name)
	le := s.mustAcquire(t, ctx, a, name)
	want := lock.Holder{Identity: ids[0], Token: le.Token()}
	s.holderIs(t, ctx, a, name, want)
	s.holderIs(t, ctx, b, name, want)

	// A waiter does not change the holder.
	ch := s.enqueue(t, ctx, b, name, excl, 2, "waiter queued")
	s.holderIs(t, ctx, b, name, want)

	mustRelease(t, ctx, le)
	le2 := s.awaitLease(t, ch, "waiter's Acquire")
	s.holderIs(t, ctx, a, name, lock.Holder{Identity: ids[1], Token: le2.Token()})
	mustRelease(t, ctx, le2)
	s.notHeld(t, ctx, a, name)
	s.notHeld(t, ctx, b, name)
	s.noOrphans(t, name, "Release")
}

// invalidNames are names every backend must refuse.
var invalidNames = []string{
	"", "/", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b",
	"a b", "a\x00b", "a\nb", "a*", "a%2Fb", "ä",
	strings.Repeat("a", lock.MaxNameLen+1),
}

func (s *suite) testInvalidName(t *testing.T) {
	ctx, l := s.ctx(t), s.newLocker(t, identity("a"))
	for _, name := range invalidNames {
		refusesAll(t, ctx, l, name, "", lock.ErrInvalidName)
	}
}

func (s *suite) testLongName(t *testing.T) {
	ctx, base, ls, _ := s.setup(t, 1)
	base += "/"
	name := base + strings.Repeat("x", lock.MaxNameLen-len(base))
	le := s.mustAcquire(t, ctx, ls[0], name)
	checkHeld(t, name, le)
	s.releaseLast(t, ctx, name, "Release", le)
}

// testIndependentNames checks that names sharing a prefix are distinct
// locks: a backend that lists records by key prefix must not mix them up.
func (s *suite) testIndependentNames(t *testing.T) {
	ctx, base, ls, ids := s.setup(t, 1)
	a := ls[0]
	names := []string{base, base + "/child", base + "x", base + "/child/grandchild"}
	if s.o.SessionKeyed {
		child := mustTry(t, ctx, a, base+"/child", excl, "of a free name")
		refuses(t, ctx, a, base, excl, true, " while a name below it is held", lock.ErrLocked)
		mustRelease(t, ctx, child)
		names = []string{base, base + "-child", base + "x", base + ":grandchild"}
	}
	var leases []lock.Lease
	for _, n := range names {
		leases = append(leases, mustTry(t, ctx, a, n, excl, "while only other names are held"))
	}
	for i, n := range names {
		s.holderIs(t, ctx, a, n, lock.Holder{Identity: ids[0], Token: leases[i].Token()})
		s.checkRecords(t, n, 1, "each name held once")
	}
	// Releasing the parent frees only the parent.
	mustRelease(t, ctx, leases[0])
	s.notHeld(t, ctx, a, names[0])
	for i, n := range names[1:] {
		s.holderIs(t, ctx, a, n, lock.Holder{Identity: ids[0], Token: leases[i+1].Token()})
		mustRelease(t, ctx, leases[i+1])
	}
	for _, n := range names {
		s.noOrphans(t, n, "Release")
	}
}
