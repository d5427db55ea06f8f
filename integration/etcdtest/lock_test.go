package etcdtest

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestKeyLayout checks the records of "a" and "a/b" never share a prefix
// range: holding "a/b" does not make "a" held, and each name's records are
// only its own.
func TestKeyLayout(t *testing.T) {
	c := startCluster(t)
	cli := newClient(t, c.Endpoints())
	l := newLocker(t, cli, etcdlock.WithPrefix("layout"))
	ctx := testutil.Context(t, 30*time.Second)
	base := testutil.UniqueName(t)

	ab, err := l.Acquire(ctx, base+"/a/b")
	if err != nil {
		t.Fatalf("Acquire(a/b) = %v", err)
	}
	if _, err := l.Holder(ctx, base+"/a"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Holder(a) while only a/b is held = %v; want %v", err, lock.ErrNotHeld)
	}
	a, err := l.TryAcquire(ctx, base+"/a")
	if err != nil {
		t.Fatalf("TryAcquire(a) while a/b is held = %v; want nil", err)
	}
	if got := records(t, cli, l, base+"/a"); len(got) != 1 || got[0] != a.(*etcdlock.Lease).Key() {
		t.Errorf("records(a) = %v; want only %q", got, a.(*etcdlock.Lease).Key())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release(a) = %v", err)
	}
	if h, err := l.Holder(ctx, base+"/a/b"); err != nil || h.Token != ab.Token() {
		t.Errorf("Holder(a/b) = %+v, %v; want token %d", h, err, ab.Token())
	}
	if err := ab.Release(ctx); err != nil {
		t.Fatalf("Release(a/b) = %v", err)
	}
}

// TestLeaseExtras checks Key, Revision and Token agree with the record in
// etcd, and Holder reports the identity.
func TestLeaseExtras(t *testing.T) {
	c := startCluster(t)
	cli := newClient(t, c.Endpoints())
	l := newLocker(t, cli, etcdlock.WithIdentity("extras-1"))
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)

	ll, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	le := ll.(*etcdlock.Lease)
	resp, err := cli.Get(ctx, le.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get(%q) = %v, %v; want one key", le.Key(), resp, err)
	}
	kv := resp.Kvs[0]
	if kv.CreateRevision != int64(le.Token()) || fencing.Token(kv.CreateRevision) != le.Token() {
		t.Errorf("record create revision %d; Revision() = %d, Token() = %d; want all equal", kv.CreateRevision, int64(le.Token()), le.Token())
	}
	id, ok := testutil.SessionLeaseID(l)
	if !ok || kv.Lease != int64(id) {
		t.Errorf("record lease %x; SessionLeaseID() = %x, %v; want equal", kv.Lease, int64(id), ok)
	}
	if string(kv.Value) != "extras-1" {
		t.Errorf("record value %q; want the identity %q", kv.Value, "extras-1")
	}
	h, err := l.Holder(ctx, name)
	if err != nil || h != (lock.Holder{Identity: "extras-1", Token: le.Token()}) {
		t.Errorf("Holder() = %+v, %v; want {extras-1 %d}", h, err, le.Token())
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

// TestGuardedWrite checks a Txn guarded by IsHeld lands while the lease
// holds the lock, and fails once the lease is lost, even after another
// Locker is granted the lock.
func TestGuardedWrite(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	l1 := newLocker(t, newClient(t, c.Endpoints()))
	l2 := newLocker(t, newClient(t, c.Endpoints()))
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)
	data := "data/" + name

	ll, err := l1.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	le := ll.(*etcdlock.Lease)
	put := func(v string) bool {
		t.Helper()
		resp, err := admin.Txn(ctx).If(le.IsHeld()).Then(clientv3.OpPut(data, v)).Commit()
		if err != nil {
			t.Fatalf("guarded Txn = %v", err)
		}
		return resp.Succeeded
	}
	if !put("v1") {
		t.Fatalf("guarded write while held: Succeeded = false; want true")
	}

	id, ok := testutil.SessionLeaseID(l1)
	if !ok {
		t.Fatalf("SessionLeaseID() = _, false; want a live session")
	}
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke() = %v", err)
	}
	select {
	case <-le.Done():
	case <-ctx.Done():
		t.Fatalf("Done not closed after the session lease was revoked")
	}
	if !errors.Is(le.Err(), lock.ErrLost) {
		t.Fatalf("Err() = %v; want %v", le.Err(), lock.ErrLost)
	}
	if put("v2") {
		t.Errorf("guarded write after loss: Succeeded = true; want false")
	}
	l2lease, err := l2.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("second Locker Acquire() = %v", err)
	}
	if put("v3") {
		t.Errorf("guarded write after another grant: Succeeded = true; want false")
	}
	resp, err := admin.Get(ctx, data)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Errorf("Get(data) = %v, %v; want v1 only", resp.Kvs, err)
	}
	if err := le.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release() of a lost lease = %v; want %v", err, lock.ErrLost)
	}
	if h, err := l2.Holder(ctx, name); err != nil || h.Token != l2lease.Token() {
		t.Errorf("Holder() = %+v, %v; want the second grant %d", h, err, l2lease.Token())
	}
}

// TestRecordDeletedBySomeoneElse checks that deleting a lease's record ends
// the lease with ErrLost (the watch on the record).
func TestRecordDeletedBySomeoneElse(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	l := newLocker(t, newClient(t, c.Endpoints()))
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)

	ll, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	le := ll.(*etcdlock.Lease)
	if _, err := admin.Delete(ctx, le.Key()); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	select {
	case <-le.Done():
	case <-ctx.Done():
		t.Fatalf("Done not closed after the record was deleted")
	}
	if !errors.Is(le.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v; want %v", le.Err(), lock.ErrLost)
	}
	// The session itself is still alive: the next grant reuses it.
	id, ok := testutil.SessionLeaseID(l)
	ll2, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() after loss = %v", err)
	}
	if id2, ok2 := testutil.SessionLeaseID(l); !ok || !ok2 || id2 != id {
		t.Errorf("SessionLeaseID() = %x, %v; want the same session %x", int64(id2), ok2, int64(id))
	}
	if err := ll2.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestWaiterSessionExpired is etcd issue 11456: a waiter whose session
// expires while it waits must not be told it holds the lock when its
// predecessor goes.
func TestWaiterSessionExpired(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	l1 := newLocker(t, newClient(t, c.Endpoints()))
	l2cli := newClient(t, c.Endpoints())
	l2 := newLocker(t, l2cli)
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)

	held, err := l1.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	type result struct {
		l   lock.Lease
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := l2.Acquire(ctx, name)
		res <- result{l, err}
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, l1, name)) == 2 })
	id, ok := testutil.SessionLeaseID(l2)
	if !ok {
		t.Fatalf("waiter SessionLeaseID() = _, false")
	}
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke() = %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	r := <-res
	if !errors.Is(r.err, lock.ErrLost) {
		t.Fatalf("waiter Acquire() = %v, %v; want an error wrapping %v", r.l, r.err, lock.ErrLost)
	}
	if got := records(t, admin, l1, name); len(got) != 0 {
		t.Errorf("records after the waiter's loss = %v; want none", got)
	}
	// A retry starts a new session and works.
	again, err := l2.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() after the lost wait = %v", err)
	}
	if id2, _ := testutil.SessionLeaseID(l2); id2 == id {
		t.Errorf("SessionLeaseID() = %x after loss; want a new session", int64(id2))
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestCloseLeavesNoKeys checks Close ends held leases with ErrReleased,
// interrupts waiters with ErrClosed, and leaves none of its records.
func TestCloseLeavesNoKeys(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	prefix := "close-" + testutil.UniqueName(t)[len(t.Name())+1:]
	l1 := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithPrefix(prefix))
	l2 := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithPrefix(prefix))
	ctx := testutil.Context(t, 30*time.Second)

	a, err := l1.Acquire(ctx, "a")
	if err != nil {
		t.Fatalf("Acquire(a) = %v", err)
	}
	b, err := l1.Acquire(ctx, "b/c")
	if err != nil {
		t.Fatalf("Acquire(b/c) = %v", err)
	}
	other, err := l2.Acquire(ctx, "d")
	if err != nil {
		t.Fatalf("Acquire(d) = %v", err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := l1.Acquire(ctx, "d")
		waitErr <- err
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, l2, "d")) == 2 })

	if err := l1.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := <-waitErr; !errors.Is(err, lock.ErrClosed) {
		t.Errorf("waiting Acquire() after Close = %v; want %v", err, lock.ErrClosed)
	}
	for _, le := range []lock.Lease{a, b} {
		select {
		case <-le.Done():
		default:
			t.Errorf("lease %q: Done not closed after Close", le.Name())
		}
		if !errors.Is(le.Err(), lock.ErrReleased) {
			t.Errorf("lease %q: Err() = %v; want %v", le.Name(), le.Err(), lock.ErrReleased)
		}
	}
	resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(prefix) = %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != other.(*etcdlock.Lease).Key() {
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		t.Errorf("keys after Close = %v; want only the other Locker's %q", keys, other.(*etcdlock.Lease).Key())
	}
	if err := l1.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestObserve follows a lock through holders: free, first, second, free.
func TestObserve(t *testing.T) {
	c := startCluster(t)
	l1 := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("obs-1"))
	l2 := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("obs-2"))
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := l1.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	next := func() lock.Holder {
		t.Helper()
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("Observe channel closed early: %v", errf())
			}
			return h
		case <-ctx.Done():
			t.Fatalf("no holder change observed")
		}
		return lock.Holder{}
	}
	if h := next(); h != (lock.Holder{}) {
		t.Fatalf("first observed holder = %+v; want free", h)
	}
	a, err := l1.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if h := next(); h != (lock.Holder{Identity: "obs-1", Token: a.Token()}) {
		t.Fatalf("observed %+v; want {obs-1 %d}", h, a.Token())
	}
	got := make(chan lock.Lease, 1)
	go func() {
		b, err := l2.Acquire(ctx, name)
		if err != nil {
			t.Errorf("second Acquire() = %v", err)
		}
		got <- b
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, c2(t, c), l1, name)) == 2 })
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	b := <-got
	if b == nil {
		return
	}
	if h := next(); h != (lock.Holder{Identity: "obs-2", Token: b.Token()}) {
		t.Fatalf("observed %+v; want {obs-2 %d}", h, b.Token())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if h := next(); h != (lock.Holder{}) {
		t.Fatalf("observed %+v; want free", h)
	}
	cancel()
	for range ch {
	}
	if err := errf(); !errors.Is(err, context.Canceled) {
		t.Errorf("Observe end error = %v; want %v", err, context.Canceled)
	}
}

// c2 returns an extra client of c, for reads that must not share the
// Lockers' connections.
func c2(t *testing.T, c interface{ Endpoints() []string }) *clientv3.Client {
	t.Helper()
	return newClient(t, c.Endpoints())
}

// TestOpen checks a Locker opened by URL works on the cluster and closes the
// client it owns.
func TestOpen(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 30*time.Second)
	eps := c.Endpoints()
	url := "etcd://" + eps[0] + "," + eps[1] + "," + eps[2] + "/opened?ttl=2s&identity=url-1"
	l, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open(%q) = %v", url, err)
	}
	t.Cleanup(func() { l.Close() })
	name := testutil.UniqueName(t)
	ll, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if h, err := l.Holder(ctx, name); err != nil || h.Identity != "url-1" || h.Token != ll.Token() {
		t.Errorf("Holder() = %+v, %v; want {url-1 %d}", h, err, ll.Token())
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if !errors.Is(ll.Err(), lock.ErrReleased) {
		t.Errorf("Err() after Close = %v; want %v", ll.Err(), lock.ErrReleased)
	}
	admin := newClient(t, eps)
	resp, err := admin.Get(ctx, "opened/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("keys under opened/ after Close = %v, %v; want 0", resp, err)
	}
}
