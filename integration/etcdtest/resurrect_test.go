package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// The tests in this file replay, by hand, a create attempt that a Locker
// sent and gave up on (no answer within its attempt timeout) after the
// acquisition it belongs to has ended: what etcd does when such an attempt
// reaches the leader late, for instance from a member that was frozen
// while it held it. The replay must not bring the record back.

// resurrectTTL leaves room for a create attempt to time out (a third of
// the TTL) while the Locker's link is blackholed, well before the session
// would be declared lost.
const resurrectTTL = 10 * time.Second

// createFailures is a slog handler that reports every create attempt the
// Locker logs as failed without an answer.
type createFailures struct{ keys chan string }

func newCreateFailures() *createFailures { return &createFailures{keys: make(chan string, 16)} }

func (h *createFailures) Enabled(context.Context, slog.Level) bool { return true }

func (h *createFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "etcdlock: create attempt failed" {
		return nil
	}
	key := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" {
			key = a.Value.String()
			return false
		}
		return true
	})
	select {
	case h.keys <- key:
	default:
	}
	return nil
}

func (h *createFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *createFailures) WithGroup(string) slog.Handler      { return h }

// guardKey is the key of the session guard of l's session lease id, as
// documented in package etcdlock.
func guardKey(l *etcdlock.Locker, id clientv3.LeaseID) string {
	return fmt.Sprintf("%s#guard/%016x", l.Prefix(), int64(id))
}

// modRevision returns key's mod revision, 0 when key does not exist.
func modRevision(t *testing.T, client *clientv3.Client, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q) = %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// lateCreate sends the create transaction of an Acquire of name by l for
// the record key under session lease id, as the Locker builds it, and
// reports whether it created the record. guardRev is the guard's mod
// revision the Locker compared with when it sent the attempt; a negative
// guardRev leaves the guard comparison out, which is the create as sent
// before the guard existed.
func lateCreate(t *testing.T, client *clientv3.Client, l *etcdlock.Locker, name, key string, id clientv3.LeaseID, guardRev int64) bool {
	t.Helper()
	pfx, err := testutil.RecordPrefix(l, name)
	if err != nil {
		t.Fatalf("RecordPrefix(%q) = %v", name, err)
	}
	guard := guardKey(l, id)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	if guardRev >= 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(guard), "=", guardRev))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Txn(ctx).
		If(cmps...).
		Then(clientv3.OpPut(key, l.Identity(), clientv3.WithLease(id)),
			clientv3.OpGet(pfx, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))).
		Else(clientv3.OpGet(key), clientv3.OpGet(guard)).
		Commit()
	if err != nil {
		t.Fatalf("late create of %q = %v", key, err)
	}
	return resp.Succeeded
}

// checkLateCreate replays the stale create of key and checks that it
// creates nothing, that another Locker is granted name at once, and, as a
// control, that the same create without the guard comparison would have
// brought the record back (which the test then deletes).
func checkLateCreate(t *testing.T, admin *clientv3.Client, l, other *etcdlock.Locker, name, key string, id clientv3.LeaseID, guardRev int64) {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	if lateCreate(t, admin, l, name, key, id, guardRev) {
		t.Errorf("late create of %q after the acquisition ended: Succeeded = true; want false (records now %v)", key, records(t, admin, l, name))
	}
	if got := records(t, admin, l, name); len(got) != 0 {
		t.Errorf("records after the late create = %v; want none", got)
	}
	if _, ok := testutil.SessionLeaseID(l); !ok {
		t.Fatalf("SessionLeaseID() = _, false; want the session that sent the create still alive")
	}

	// Nothing blocks the lock: another Locker is granted it at once.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	start := time.Now()
	got, err := other.Acquire(actx, name)
	cancel()
	if err != nil {
		t.Fatalf("other Locker Acquire() after the late create = %v (records %v); want a grant", err, records(t, admin, l, name))
	}
	t.Logf("other Locker granted %v after the late create", time.Since(start))
	if err := got.Release(ctx); err != nil {
		t.Errorf("other Locker Release() = %v", err)
	}

	// Control: without the guard comparison the same late create brings the
	// record back under the live session, where nothing would delete it.
	if !lateCreate(t, admin, l, name, key, id, -1) {
		t.Fatalf("late create without the guard comparison: Succeeded = false; want true (the replay is not the create the Locker sent)")
	}
	if got := records(t, admin, l, name); len(got) != 1 || got[0] != key {
		t.Errorf("records after the unguarded late create = %v; want [%s]", got, key)
	}
	if _, err := admin.Delete(ctx, key); err != nil {
		t.Fatalf("Delete(%q) = %v", key, err)
	}
}

// TestResurrectAfterRelease is the fault suite's stuck lock: a create
// attempt of a granted acquisition fails without an answer (the link is
// blackholed for longer than the attempt timeout), its retry is granted and
// released, and then the first attempt is applied. The record must not come
// back, and the lock must stay free.
func TestResurrectAfterRelease(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	proxies := cluster.NewProxies(t, c)
	failures := newCreateFailures()
	l := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(resurrectTTL),
		etcdlock.WithIdentity("resurrect-release"), etcdlock.WithLogger(slog.New(failures)))
	other := newLocker(t, newClient(t, c.Endpoints()))
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)

	// A session first, so that the create below is the only request the
	// blackhole holds up.
	warm, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	id, ok := testutil.SessionLeaseID(l)
	if !ok {
		t.Fatalf("SessionLeaseID() = _, false; want a live session")
	}
	guardRev := modRevision(t, admin, guardKey(l, id))

	type grant struct {
		lease lock.Lease
		err   error
	}
	granted := make(chan grant, 1)
	proxies.Blackhole()
	go func() {
		le, err := l.Acquire(ctx, name)
		granted <- grant{le, err}
	}()
	failed := testutil.Recv(t, failures.keys, 20*time.Second, "a create attempt failing without an answer")
	proxies.Heal()
	g := testutil.Recv(t, granted, 20*time.Second, "the grant after the heal")
	if g.err != nil {
		t.Fatalf("Acquire() after the heal = %v", g.err)
	}
	if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
		t.Fatalf("proxies held no bytes while blackholed (%+v); the create was not held up", st)
	}
	le := g.lease.(*etcdlock.Lease)
	if failed != le.Key() {
		t.Fatalf("failed create attempt for %q; want one for the granted record %q", failed, le.Key())
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if got := records(t, admin, l, name); len(got) != 0 {
		t.Fatalf("records after Release() = %v; want none", got)
	}

	checkLateCreate(t, admin, l, other, name, le.Key(), id, guardRev)
}

// TestResurrectAfterAbandon is the same for an Acquire that gives up with
// its create unanswered: its cleanup runs while the cluster is out of
// reach, in the background once the link heals, and the create attempt is
// applied after that.
func TestResurrectAfterAbandon(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	proxies := cluster.NewProxies(t, c)
	failures := newCreateFailures()
	l := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(resurrectTTL),
		etcdlock.WithIdentity("resurrect-abandon"), etcdlock.WithLogger(slog.New(failures)))
	other := newLocker(t, newClient(t, c.Endpoints()))
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)

	warm, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	id, ok := testutil.SessionLeaseID(l)
	if !ok {
		t.Fatalf("SessionLeaseID() = _, false; want a live session")
	}
	guard := guardKey(l, id)
	guardRev := modRevision(t, admin, guard)

	proxies.Blackhole()
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = l.Acquire(actx, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire() through a blackholed link = %v; want %v", err, context.DeadlineExceeded)
	}
	key := testutil.Recv(t, failures.keys, time.Second, "the create attempt failing without an answer")
	if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
		t.Fatalf("proxies held no bytes while blackholed (%+v); the create was not held up", st)
	}
	proxies.Heal()
	// The cleanup, retried in the background, ends the acquisition by
	// writing the session guard. Without it the replay below shows what a
	// late create does.
	ended := false
	for deadline := time.Now().Add(20 * time.Second); !ended && time.Now().Before(deadline); {
		ended = modRevision(t, admin, guard) > guardRev && len(records(t, admin, l, name)) == 0
		if !ended {
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	if !ended {
		t.Errorf("guard %q not written within 20s of the heal (records %v); want the abandoned acquisition ended", guard, records(t, admin, l, name))
	}

	checkLateCreate(t, admin, l, other, name, key, id, guardRev)
}

// TestResurrectReleaseCtx checks Release returns when its ctx ends even
// though the delete cannot reach the cluster: the lease ends as released,
// and the delete is retried in the background once the link heals, within
// the same session.
func TestResurrectReleaseCtx(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	proxies := cluster.NewProxies(t, c)
	l := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(resurrectTTL))
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)

	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	id, _ := testutil.SessionLeaseID(l)
	proxies.Blackhole()
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	err = le.Release(rctx)
	took := time.Since(start)
	cancel()
	t.Logf("Release() with a 200ms ctx through a blackholed link returned after %v", took)
	if took > 400*time.Millisecond {
		t.Errorf("Release() with a 200ms ctx returned after %v; want about 200ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release() = %v; want %v", err, context.DeadlineExceeded)
	}
	select {
	case <-le.Done():
	default:
		t.Errorf("Done not closed after Release()")
	}
	if !errors.Is(le.Err(), lock.ErrReleased) {
		t.Errorf("Err() = %v; want %v", le.Err(), lock.ErrReleased)
	}
	if got := records(t, admin, l, name); len(got) != 1 {
		t.Fatalf("records while blackholed = %v; want the record still there", got)
	}
	if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
		t.Fatalf("proxies held no bytes while blackholed (%+v); the delete was not held up", st)
	}
	proxies.Heal()
	testutil.Eventually(t, 10*time.Second, "record deleted after the heal", func() bool { return len(records(t, admin, l, name)) == 0 })
	if got, ok := testutil.SessionLeaseID(l); !ok || got != id {
		t.Errorf("SessionLeaseID() after the heal = %x, %v; want the same session %x", int64(got), ok, int64(id))
	}
}
