package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestAcquireAll runs the etcd-specific checks of the native multi-name
// acquisition (Locker.AcquireAll) and of GuardedTxnAll on one cluster.
func TestAcquireAll(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	newL := func(t *testing.T, opts ...etcdlock.Option) *etcdlock.Locker {
		return newLocker(t, newClient(t, c.Endpoints()), opts...)
	}
	t.Run("OneRevision", func(t *testing.T) { testMultiOneRevision(t, admin, newL(t)) })
	t.Run("OneRevisionConcurrencyLayout", func(t *testing.T) {
		testMultiOneRevision(t, admin, newL(t, etcdlock.WithPrefix("multi-conc"), etcdlock.WithLayout(etcdlock.LayoutConcurrency)))
	})
	// 504 acquisitions: the deadlock-freedom run of issue 34.
	t.Run("OppositeOrders", func(t *testing.T) { testMultiOpposite(t, []*etcdlock.Locker{newL(t), newL(t), newL(t), newL(t)}, 63) })
	t.Run("OppositeOrdersConcurrencyLayout", func(t *testing.T) {
		conc := []etcdlock.Option{etcdlock.WithPrefix("multi-conc"), etcdlock.WithLayout(etcdlock.LayoutConcurrency)}
		testMultiOpposite(t, []*etcdlock.Locker{newL(t, conc...), newL(t, conc...)}, 20)
	})
	t.Run("TryLocked", func(t *testing.T) { testMultiTryLocked(t, admin, newL(t), newL(t)) })
	t.Run("CancelWaiting", func(t *testing.T) { testMultiCancel(t, admin, newL(t), newL(t)) })
	t.Run("GuardedTxnAll", func(t *testing.T) { testMultiGuarded(t, admin, newL(t)) })
	t.Run("Metrics", func(t *testing.T) { testMultiMetrics(t, c) })
	t.Run("LockDelay", func(t *testing.T) {
		const d = 1500 * time.Millisecond
		prefix := etcdlock.WithPrefix("multi-delay")
		testMultiLockDelay(t, admin, newL(t, prefix, etcdlock.WithLockDelay(d)), newL(t, prefix, etcdlock.WithLockDelay(d)), d)
	})
}

// multiNames returns n unique names for t, sorted.
func multiNames(t *testing.T, n int) []string {
	base := testutil.UniqueName(t)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%c", base, 'a'+i)
	}
	return names
}

// recordsOf reads the records of name with a raw client: under the
// Locker's record prefix of name, or in the "<name>/" range of
// LayoutConcurrency (conc).
func recordsOf(t *testing.T, admin *clientv3.Client, l *etcdlock.Locker, name string, conc bool) []*mvccpb.KeyValue {
	t.Helper()
	pfx, err := testutil.RecordPrefix(l, name)
	if err != nil {
		t.Fatalf("RecordPrefix(%q) = %v", name, err)
	}
	if conc {
		pfx = pfx[:len(pfx)-1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	return resp.Kvs
}

// testMultiOneRevision: every record of one AcquireAll has one create
// revision, which is every lease's token; Release leaves no record. With
// LayoutConcurrency a name under another in one set is refused.
func testMultiOneRevision(t *testing.T, admin *clientv3.Client, l *etcdlock.Locker) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	conc := l.Prefix() == "multi-conc/"
	ml, err := lock.AcquireAll(ctx, l, names[2], names[0], names[1])
	if err != nil {
		t.Fatalf("AcquireAll(%q) = %v", names, err)
	}
	var rev int64
	for i, name := range names {
		kvs := recordsOf(t, admin, l, name, conc)
		if len(kvs) != 1 {
			t.Fatalf("records of %q = %d; want 1", name, len(kvs))
		}
		if i == 0 {
			rev = kvs[0].CreateRevision
		}
		le := ml.Leases()[i]
		if kvs[0].CreateRevision != rev || int64(le.Token()) != rev || int64(ml.Token(name)) != rev || le.Name() != name {
			t.Errorf("name %q: record %s created at %d, lease %q token %d; want every record and token at %d",
				name, kvs[0].Key, kvs[0].CreateRevision, le.Name(), le.Token(), rev)
		}
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	for _, name := range names {
		if kvs := recordsOf(t, admin, l, name, conc); len(kvs) != 0 {
			t.Errorf("records of %q after Release = %d; want 0", name, len(kvs))
		}
	}
	if conc {
		_, err = l.AcquireAll(ctx, []string{names[0], names[0] + "/x"})
		if !errors.Is(err, lock.ErrIncompatible) {
			t.Errorf("AcquireAll(a, a/x) with LayoutConcurrency = %v; want %v", err, lock.ErrIncompatible)
		}
	}
}

// testMultiOpposite: two clients per Locker (so, with LayoutConcurrency,
// taking turns for its keys) take random sets of 2 to 4 of 6 names, each
// given in random order, for rounds; no name is ever held twice, and
// every client finishes every round.
func testMultiOpposite(t *testing.T, lockers []*etcdlock.Locker, rounds int) {
	ctx := testutil.Context(t, 120*time.Second)
	names := multiNames(t, 6)
	holders := make(map[string]*atomic.Int32)
	for _, n := range names {
		holders[n] = new(atomic.Int32)
	}
	var overlaps, done atomic.Int32
	var longest atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 * len(lockers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				set := slices.Clone(names)
				rand.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:2+rand.IntN(3)]
				start := time.Now()
				ml, err := lock.AcquireAll(ctx, lockers[i/2], set...)
				if err != nil {
					t.Errorf("client %d round %d: AcquireAll(%q) = %v", i, r, set, err)
					return
				}
				if w := int64(time.Since(start)); w > longest.Load() {
					longest.Store(w) // racy max: a report, not a check
				}
				for _, n := range set {
					if holders[n].Add(1) != 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // hold a while, so that overlaps would show
				for _, n := range set {
					holders[n].Add(-1)
				}
				if err := ml.Release(ctx); err != nil {
					t.Errorf("client %d round %d: Release() = %v", i, r, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	want := int32(2 * len(lockers) * rounds)
	t.Logf("%d clients, %d acquisitions of 2-4 of %d names, %d overlaps, longest wait %v",
		2*len(lockers), done.Load(), len(names), overlaps.Load(), time.Duration(longest.Load()))
	if overlaps.Load() != 0 || done.Load() != want {
		t.Errorf("overlaps %d, acquisitions %d; want 0 and %d", overlaps.Load(), done.Load(), want)
	}
}

// testMultiTryLocked: TryAcquireAll with one name held returns ErrLocked
// and leaves no record of any other name; once it is free, it succeeds.
func testMultiTryLocked(t *testing.T, admin *clientv3.Client, l1, l2 *etcdlock.Locker) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	held, err := l2.Acquire(ctx, names[1])
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", names[1], err)
	}
	if _, err := lock.TryAcquireAll(ctx, l1, names...); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquireAll(%q) with %q held = %v; want %v", names, names[1], err, lock.ErrLocked)
	}
	for i, name := range names {
		if kvs := recordsOf(t, admin, l1, name, false); len(kvs) != i%2 {
			t.Errorf("records of %q after the refused TryAcquireAll = %d; want %d", name, len(kvs), i%2)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	ml, err := lock.TryAcquireAll(ctx, l1, names...)
	if err != nil {
		t.Fatalf("TryAcquireAll(%q) with every name free = %v", names, err)
	}
	if tok := ml.Token(names[0]); tok != ml.Token(names[1]) || tok != ml.Token(names[2]) || tok <= held.Token() {
		t.Errorf("tokens %d %d %d; want one token above %d", tok, ml.Token(names[1]), ml.Token(names[2]), held.Token())
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

// testMultiCancel: an AcquireAll waiting for one name has a record in
// every queue (the free names show it as their holder, and a TryAcquire
// of one is refused); cancelling it leaves no record of any name.
func testMultiCancel(t *testing.T, admin *clientv3.Client, l1, l2 *etcdlock.Locker) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 3)
	held, err := l2.Acquire(ctx, names[1])
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", names[1], err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := l1.AcquireAll(wctx, names)
		errc <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the waiter's records", func() bool {
		return len(recordsOf(t, admin, l1, names[2], false)) == 1
	})
	waiter := recordsOf(t, admin, l1, names[0], false)
	if len(waiter) != 1 || len(recordsOf(t, admin, l1, names[1], false)) != 2 {
		t.Fatalf("records of %q = %d, of %q = %d; want 1 and 2", names[0], len(waiter), names[1], len(recordsOf(t, admin, l1, names[1], false)))
	}
	if h, err := l2.Holder(ctx, names[0]); err != nil || int64(h.Token) != waiter[0].CreateRevision {
		t.Errorf("Holder(%q) while the waiter queues = %+v, %v; want its record, token %d", names[0], h, err, waiter[0].CreateRevision)
	}
	if _, err := l2.TryAcquire(ctx, names[2]); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire(%q) while the waiter queues = %v; want %v", names[2], err, lock.ErrLocked)
	}
	cancel()
	if err := testutil.Recv(t, errc, 10*time.Second, "AcquireAll after cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireAll() after cancel = %v; want %v", err, context.Canceled)
	}
	for i, name := range names {
		if kvs := recordsOf(t, admin, l1, name, false); len(kvs) != i%2 {
			t.Errorf("records of %q after the cancel = %d; want %d", name, len(kvs), i%2)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

// testMultiGuarded: GuardedTxnAll writes while every lease is held, and
// refuses, writing nothing, once one was released or lost.
func testMultiGuarded(t *testing.T, admin *clientv3.Client, l *etcdlock.Locker) {
	ctx := testutil.Context(t, 30*time.Second)
	names := multiNames(t, 2)
	data := "data/" + names[0]
	put := func(leases []lock.Lease, v string) error {
		_, err := etcdlock.GuardedTxnAll(ctx, admin, leases, clientv3.OpPut(data, v))
		return err
	}
	stored := func() string {
		resp, err := admin.Get(ctx, data)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("Get(%q) = %v, %v; want one key", data, resp, err)
		}
		return string(resp.Kvs[0].Value)
	}
	ml, err := lock.AcquireAll(ctx, l, names...)
	if err != nil {
		t.Fatalf("AcquireAll() = %v", err)
	}
	if err := put(ml.Leases(), "v1"); err != nil || stored() != "v1" {
		t.Fatalf("GuardedTxnAll() while held = %v; want nil and v1 stored", err)
	}
	if err := ml.Leases()[1].Release(ctx); err != nil {
		t.Fatalf("Release(%q) = %v", names[1], err)
	}
	if err := put(ml.Leases(), "v2"); !errors.Is(err, lock.ErrReleased) || stored() != "v1" {
		t.Errorf("GuardedTxnAll() with %q released = %v; want %v and v1 kept", names[1], err, lock.ErrReleased)
	}
	ml2, err := lock.AcquireAll(ctx, l, names...)
	if err != nil {
		t.Fatalf("AcquireAll() = %v", err)
	}
	leases := ml2.Leases()
	if _, err := admin.Delete(ctx, leases[0].(*etcdlock.Lease).Key()); err != nil {
		t.Fatalf("Delete(record) = %v", err)
	}
	// Refused by the server, or by the lease if its watch saw the delete
	// already; then by the lease.
	if err := put(leases, "v3"); !errors.Is(err, lock.ErrLost) || stored() != "v1" {
		t.Errorf("GuardedTxnAll() with %q's record deleted = %v; want %v and v1 kept", names[0], err, lock.ErrLost)
	}
	testutil.Recv(t, leases[0].Done(), 10*time.Second, "Done of the lease whose record was deleted")
	if err := put(leases, "v4"); !errors.Is(err, lock.ErrLost) || stored() != "v1" {
		t.Errorf("GuardedTxnAll() with %q lost = %v; want %v and v1 kept", names[0], err, lock.ErrLost)
	}
	_ = ml2.Release(ctx)
}

// testMultiLockDelay: a name whose last lease ended without a clean
// Release delays the AcquireAll that includes it by the lock-delay; after
// clean releases, the next one is not delayed.
func testMultiLockDelay(t *testing.T, admin *clientv3.Client, l1, l2 *etcdlock.Locker, d time.Duration) {
	ctx := testutil.Context(t, 60*time.Second)
	names := multiNames(t, 2)
	held, err := l2.Acquire(ctx, names[1])
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", names[1], err)
	}
	id, ok := testutil.SessionLeaseID(l2)
	if !ok {
		t.Fatalf("SessionLeaseID() = _, false; want a live session")
	}
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke() = %v", err)
	}
	testutil.Recv(t, held.Done(), 10*time.Second, "Done of the revoked lease")
	start := time.Now()
	ml, err := lock.AcquireAll(ctx, l1, names...)
	if took := time.Since(start); err != nil || took < d {
		t.Fatalf("AcquireAll() after a revoked holder = %v after %v; want a grant after at least %v", err, took, d)
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	start = time.Now()
	ml, err = lock.AcquireAll(ctx, l1, names...)
	if took := time.Since(start); err != nil || took >= d {
		t.Fatalf("AcquireAll() after clean releases = %v after %v; want a grant within %v", err, took, d)
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

// testMultiMetrics: every name of an AcquireAll counts as one grant and
// one hold, as if taken alone.
func testMultiMetrics(t *testing.T, c *cluster.Cluster) {
	ctx := testutil.Context(t, 30*time.Second)
	m := testutil.NewMetrics(t)
	l := openLocker(t, c, m.Provider, nil, nil)
	names := multiNames(t, 3)
	backend := map[string]string{"fencelock.backend": "etcd"}
	ml, err := lock.AcquireAll(ctx, l, names...)
	if err != nil {
		t.Fatalf("AcquireAll() = %v", err)
	}
	granted := map[string]string{"fencelock.backend": "etcd", "fencelock.outcome": "granted"}
	if held, n := m.Sum(t, "fencelock.leases.held", backend), m.HistogramCount(t, "fencelock.acquire.duration", granted); held != 3 || n != 3 {
		t.Errorf("leases held %d, grants %d while holding 3 names; want 3 and 3\n%s", held, n, m.Dump(t))
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if held, n := m.Sum(t, "fencelock.leases.held", backend), m.HistogramCount(t, "fencelock.hold.duration", backend); held != 0 || n != 3 {
		t.Errorf("leases held %d, holds ended %d after Release; want 0 and 3\n%s", held, n, m.Dump(t))
	}
}
