package zktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKMulti runs the tests of Locker.AcquireAll, TryAcquireAll and
// GuardedMultiAll on one ensemble.
func TestZKMulti(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"OneZxid", testMultiOneZxid},
		{"Overlapping", testMultiOverlapping},
		{"TryLeavesNothing", testMultiTryLeavesNothing},
		{"CancelLeavesNothing", testMultiCancelLeavesNothing},
		{"GuardedMultiAll", testMultiGuarded},
		{"Curator", testMultiCurator},
		{"LockDelay", testMultiLockDelay},
		{"DropAroundCreate", testMultiDropAroundCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// multiNames returns n lock names no other test uses.
func multiNames(t *testing.T, n int) []string {
	t.Helper()
	base := lockName(t)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/n%d", base, i)
	}
	return names
}

// noRecords fails t unless no lock record is left under any of names.
func noRecords(t *testing.T, h *harness, names []string, when string) {
	t.Helper()
	for _, name := range names {
		if got := h.Records(t, name); len(got) != 0 {
			t.Errorf("%s: records of %q = %v; want none", when, name, got)
		}
	}
}

// testMultiOneZxid checks that the records of one AcquireAll (under
// parents that do not exist yet, one nested in another) share one czxid,
// the token of every lease, and that the leases come in the order asked.
func testMultiOneZxid(t *testing.T, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	base := lockName(t)
	names := []string{base + "/a", base + "/a/b", base + "/c"}
	l := h.dial(t)
	for round := range 2 { // the second finds the parents in place
		les, err := l.AcquireAll(ctx, names)
		if err != nil {
			t.Fatalf("AcquireAll(%q) = %v; want nil", names, err)
		}
		tok := les[0].Token()
		h.admin.sync(t, h.root)
		for i, le := range les {
			zl := le.(*zklock.Lease)
			_, st, err := h.admin.conn.Exists(zl.Path())
			switch {
			case le.Name() != names[i]:
				t.Errorf("round %d: lease %d is of %q; want %q", round, i, le.Name(), names[i])
			case err != nil || st == nil:
				t.Errorf("round %d: Exists(%s) = %v, %v", round, zl.Path(), st, err)
			case le.Token() != tok || fencing.Token(st.Czxid) != tok:
				t.Errorf("round %d: %q token %d, czxid %d; want both %d, the token of %q", round, names[i], le.Token(), st.Czxid, tok, names[0])
			}
		}
		for _, le := range les {
			if err := le.Release(ctx); err != nil {
				t.Errorf("Release(%q) = %v", le.Name(), err)
			}
		}
	}
	noRecords(t, h, names, "after the releases")
}

// testMultiOverlapping runs 8 clients over random overlapping sets of 2
// to 4 of 6 names, each set asked for in a random order, 504 AcquireAlls
// in all, and checks that every one returns (no deadlock), that no name is
// held twice at once, and that each name's tokens rise.
func testMultiOverlapping(t *testing.T, h *harness) {
	const clients, rounds, nNames = 8, 63, 6
	ctx := testutil.Context(t, 120*time.Second)
	names := multiNames(t, nNames)
	var (
		inUse    [nNames]atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		last     = map[string]fencing.Token{}
		longest  time.Duration
		wg       sync.WaitGroup
	)
	for c := range clients {
		l := h.dial(t, zklock.WithIdentity(fmt.Sprintf("client-%d", c)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), 34))
			for range rounds {
				idx := rnd.Perm(nNames)[:2+rnd.IntN(3)]
				set := make([]string, len(idx))
				for i, j := range idx {
					set[i] = names[j]
				}
				start := time.Now()
				les, err := l.AcquireAll(ctx, set)
				if err != nil {
					t.Errorf("client %d: AcquireAll(%q) = %v", c, set, err)
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(start))
				for i, j := range idx {
					if inUse[j].Add(1) > 1 {
						overlaps.Add(1)
					}
					if tok := les[i].Token(); tok <= last[set[i]] || les[i].Name() != set[i] {
						t.Errorf("client %d: lease %d of %q is %q with token %d after %d", c, i, set, les[i].Name(), tok, last[set[i]])
					}
					last[set[i]] = les[i].Token()
				}
				mu.Unlock()
				time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
				for _, j := range idx {
					inUse[j].Add(-1)
				}
				for _, le := range les {
					if err := le.Release(ctx); err != nil {
						t.Errorf("client %d: Release(%q) = %v", c, le.Name(), err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d grants overlapped another of the same name; want 0", n)
	}
	t.Logf("clients %d, sets of 2-4 of %d names in random order, acquisitions %d, overlaps %d, longest wait %v",
		clients, nNames, clients*rounds, overlaps.Load(), longest)
	noRecords(t, h, names, "after every client released")
}

// testMultiTryLeavesNothing checks that TryAcquireAll refuses with
// lock.ErrLocked when one name is held, leaving no record, and that
// lock.TryAcquireAll does so too.
func testMultiTryLeavesNothing(t *testing.T, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	holder, l := h.dial(t), h.dial(t)
	for _, held := range names {
		le := mustAcquire(t, ctx, holder, held)
		if les, err := l.TryAcquireAll(ctx, names); !errors.Is(err, lock.ErrLocked) || les != nil {
			t.Errorf("TryAcquireAll(%q) with %q held = %v, %v; want an error wrapping %v", names, held, les, err, lock.ErrLocked)
		}
		if m, err := lock.TryAcquireAll(ctx, l, names...); !errors.Is(err, lock.ErrLocked) || m != nil {
			t.Errorf("lock.TryAcquireAll(%q) with %q held = %v, %v; want an error wrapping %v", names, held, m, err, lock.ErrLocked)
		}
		for _, name := range names {
			if got, want := len(h.Records(t, name)), map[bool]int{true: 1}[name == held]; got != want {
				t.Errorf("with %q held, after the refusals: %d records of %q; want %d", held, got, name, want)
			}
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	}
	m, err := lock.TryAcquireAll(ctx, l, names...)
	if err != nil {
		t.Fatalf("lock.TryAcquireAll(%q) with none held = %v; want nil", names, err)
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
	noRecords(t, h, names, "after the release")
}

// testMultiCancelLeavesNothing cancels an AcquireAll that holds one name
// and queues for another, and checks that it returns the cancellation and
// leaves no record behind, granted or queued.
func testMultiCancelLeavesNothing(t *testing.T, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	holder, l := h.dial(t), h.dial(t)
	le := mustAcquire(t, ctx, holder, names[1])
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		les, err := l.AcquireAll(wctx, names)
		if les != nil {
			err = fmt.Errorf("leases %v with %w", les, err)
		}
		done <- err
	}()
	waitRecords(t, h, names[1], 2, "the waiter queued behind the holder")
	waitRecords(t, h, names[0], 1, "the waiter's record of a free name")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled AcquireAll() = %v; want an error wrapping %v", err, context.Canceled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireAll() still waiting 10s after its context was cancelled")
	}
	noRecords(t, h, []string{names[0], names[2]}, "after the cancelled AcquireAll")
	if got := h.Records(t, names[1]); len(got) != 1 || got[0] != le.Path()[strings.LastIndexByte(le.Path(), '/')+1:] {
		t.Errorf("records of the held name = %v; want only the holder's", got)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// testMultiGuarded checks that GuardedMultiAll writes while every lease
// holds, and writes nothing once one of them is released or lost.
func testMultiGuarded(t *testing.T, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	l := h.dial(t)
	data := h.root + "-data-" + randHex(3)
	t.Cleanup(func() { _ = h.admin.conn.Delete(data, -1) })
	write := func(les []lock.Lease, v string) error {
		_, err := zklock.GuardedMultiAll(ctx, h.admin.conn, les, &zk.SetDataRequest{Path: data, Data: []byte(v), Version: -1})
		return err
	}
	les, err := l.AcquireAll(ctx, names)
	if err != nil {
		t.Fatalf("AcquireAll() = %v", err)
	}
	res, err := zklock.GuardedMultiAll(ctx, h.admin.conn, les, &zk.CreateRequest{Path: data, Data: []byte("1"), Acl: zk.WorldACL(zk.PermAll)})
	if err != nil || len(res) != 1 || res[0].String != data {
		t.Fatalf("GuardedMultiAll(create) while all held = %+v, %v; want the create's answer only", res, err)
	}
	// Lost behind the Locker's back: the check in the multi refuses even
	// before the lease learns of it.
	if err := h.admin.conn.Delete(les[1].(*zklock.Lease).Path(), -1); err != nil {
		t.Fatalf("Delete(the second lease's znode) = %v", err)
	}
	if err := write(les, "2"); !errors.Is(err, lock.ErrLost) || !strings.Contains(err.Error(), "guarded multi all") {
		t.Errorf("GuardedMultiAll() with the second lease's znode gone = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if err := les[2].Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if err := write([]lock.Lease{les[0], les[2]}, "3"); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("GuardedMultiAll() with the second lease released = %v; want an error wrapping %v", err, lock.ErrReleased)
	}
	if err := write(les[:1], "4"); err != nil {
		t.Errorf("GuardedMultiAll() with the one lease still held = %v; want nil", err)
	}
	h.admin.sync(t, data)
	if got, _, err := h.admin.conn.Get(data); err != nil || string(got) != "4" {
		t.Errorf("data = %q, %v; want %q: only the writes under held leases", got, err, "4")
	}
	_ = les[0].Release(ctx)
}

// testMultiCurator checks AcquireAll with Curator's layout: its records
// are InterProcessMutex's, and a Locker of the default layout and one of
// Curator's exclude each other on them.
func testMultiCurator(t *testing.T, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	cur, other := h.dial(t, zklock.WithLayout(zklock.LayoutCurator)), h.dial(t)
	m, err := lock.AcquireAll(ctx, cur, names[:2]...)
	if err != nil {
		t.Fatalf("lock.AcquireAll(curator layout) = %v", err)
	}
	for _, name := range names[:2] {
		got := h.Records(t, name)
		if len(got) != 1 || !strings.HasPrefix(got[0], "_c_") || !strings.Contains(got[0], "-lock-") {
			t.Errorf("records of %q = %v; want one Curator lock record", name, got)
		}
	}
	if _, err := lock.TryAcquireAll(ctx, other, names[1:]...); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquireAll(%q) of another layout = %v; want an error wrapping %v", names[1:], err, lock.ErrLocked)
	}
	noRecords(t, h, names[2:], "after the refusal")
	if tok := m.Token(names[0]); tok == 0 || tok != m.Token(names[1]) {
		t.Errorf("tokens %d, %d; want one, not zero", tok, m.Token(names[1]))
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	rev := slices.Clone(names)
	slices.Reverse(rev)
	m, err = lock.AcquireAll(ctx, other, rev...)
	if err != nil {
		t.Fatalf("lock.AcquireAll(%q) of another layout after the release = %v", rev, err)
	}
	if _, err := cur.TryAcquireAll(ctx, names[2:]); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquireAll(%q) of the curator layout = %v; want an error wrapping %v", names[2:], err, lock.ErrLocked)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	noRecords(t, h, names, "after the releases")
}

// markers returns the lock-delay markers under the parent of name.
func markers(t *testing.T, h *harness, name string) []string {
	t.Helper()
	h.admin.sync(t, h.root)
	kids, _, err := h.admin.conn.Children(h.root + "/" + name)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("Children(%s) = %v", name, err)
	}
	return slices.DeleteFunc(kids, func(k string) bool { return !strings.HasPrefix(k, "~delay~") })
}

// testMultiLockDelay checks that AcquireAll keeps the lock-delay of each
// name: after a holder of all names lost its session, the next AcquireAll
// waits the delay; after a clean release it does not.
func testMultiLockDelay(t *testing.T, h *harness) {
	const d = time.Second
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 2)
	l1, l2 := h.dial(t, zklock.WithLockDelay(d)), h.dial(t, zklock.WithLockDelay(d))
	if _, err := l1.AcquireAll(ctx, names); err != nil {
		t.Fatalf("AcquireAll() = %v", err)
	}
	for _, name := range names {
		if got := markers(t, h, name); len(got) != 1 {
			t.Errorf("markers of %q while held = %v; want one", name, got)
		}
	}
	expireSession(t, h.sess, h.servers, l1)
	for _, name := range names {
		waitRecords(t, h, name, 0, "the expired holder's records removed")
	}
	for _, want := range []time.Duration{d, 0} {
		start := time.Now()
		les, err := l2.AcquireAll(ctx, names)
		if err != nil {
			t.Fatalf("AcquireAll() = %v", err)
		}
		switch took := time.Since(start); {
		case want > 0 && took < want:
			t.Errorf("AcquireAll() after the holder's expiry took %v; want at least the lock-delay %v", took, d)
		case want == 0 && took >= d/2:
			t.Errorf("AcquireAll() after a clean release took %v; want no lock-delay", took)
		}
		for _, le := range les {
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
		}
	}
	for _, name := range names {
		if got := markers(t, h, name); len(got) != 0 {
			t.Errorf("markers of %q after the releases = %v; want none", name, got)
		}
	}
}

// testMultiDropAroundCreate drops the connection just after the multi of
// an AcquireAll left (the reply is lost) or instead of sending it, and
// checks that the call ends holding exactly one record per name, in the
// same session, and that the records exclude another Locker.
func testMultiDropAroundCreate(t *testing.T, h *harness) {
	for _, tt := range []struct {
		name string
		mode int32
	}{{"reply lost", dropAfter}, {"request lost", dropBefore}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testutil.Context(t, 30*time.Second)
			names := multiNames(t, 3)
			d := &dropper{}
			l, other := h.dial(t, zklock.WithDialer(d.dial)), h.dial(t)
			m, err := lock.AcquireAll(ctx, l, names...) // makes the parents: the next multi is the records'
			if err != nil || m.Release(ctx) != nil {
				t.Fatalf("lock.AcquireAll() = %v, or its Release failed", err)
			}
			sid := sessionID(l)
			d.mode.Store(tt.mode)
			les, err := l.AcquireAll(ctx, names)
			if err != nil {
				t.Fatalf("AcquireAll() across the drop = %v", err)
			}
			if n := d.drops.Load(); n != 1 || sessionID(l) != sid {
				t.Fatalf("connections dropped at a create: %d, session 0x%x; want 1 and the same session 0x%x", n, sessionID(l), sid)
			}
			for i, le := range les {
				recs, path := h.Records(t, names[i]), le.(*zklock.Lease).Path()
				if len(recs) != 1 || h.root+"/"+names[i]+"/"+recs[0] != path || le.Token() != les[0].Token() {
					t.Errorf("records of %q = %v, token %d; want exactly the lease's %s, token %d", names[i], recs, le.Token(), path, les[0].Token())
				}
			}
			if _, err := other.TryAcquireAll(ctx, names[2:]); !errors.Is(err, lock.ErrLocked) {
				t.Errorf("another Locker's TryAcquireAll() = %v; want an error wrapping %v", err, lock.ErrLocked)
			}
			for _, le := range les {
				if err := le.Release(ctx); err != nil {
					t.Errorf("Release() = %v", err)
				}
			}
			noRecords(t, h, names, "after the releases")
		})
	}
}
