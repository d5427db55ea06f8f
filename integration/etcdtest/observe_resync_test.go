package etcdtest

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

func holderOf(who string, le lock.Lease) lock.Holder {
	return lock.Holder{Identity: who, Token: le.Token()}
}

// gatedLocker returns a Locker whose client reaches endpoints only
// through g.
func gatedLocker(t *testing.T, endpoints []string, g *testutil.Gate, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	client := testutil.EtcdClient(t, clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return g.Dial(ctx, "tcp", addr)
		})},
	})
	return newLocker(t, client, opts...)
}

// TestObserveCompaction cuts an observer off, changes the holder several
// times, compacts the cluster's history past the revision the observer's
// watch resumes from, and lets it reconnect. The watch is cancelled with
// ErrCompacted; the observation must read the current holder, report it
// (the grants in between are gone with the history), watch again from
// that read and report the next changes, and not end.
func TestObserveCompaction(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	g := new(testutil.Gate)
	obs := gatedLocker(t, c.Endpoints(), g, etcdlock.WithIdentity("observer"))
	const ttl = 10 * time.Second // the holders must outlast the observer's outage
	a := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("a"), etcdlock.WithTTL(ttl))
	b := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("b"), etcdlock.WithTTL(ttl))
	ctx := testutil.Context(t, 90*time.Second)
	name := testutil.UniqueName(t)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := obs.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	r := testutil.Record(t, ch, errf)
	r.WaitLast(lock.Holder{}, 10*time.Second, "initial state")
	la := mustAcquire(t, ctx, a, name)
	r.WaitLast(holderOf("a", la), 10*time.Second, "a acquired")

	g.Cut()
	mustReleaseLease(t, ctx, la)
	lb := mustAcquire(t, ctx, b, name)
	mustReleaseLease(t, ctx, lb)
	la2 := mustAcquire(t, ctx, a, name)
	resp, err := admin.Get(ctx, "compaction-marker")
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	rev := resp.Header.Revision
	if _, err := admin.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact(%d) = %v", rev, err)
	}
	t.Logf("compacted up to revision %d; a's first grant was at %d", rev, la.Token())
	g.Heal()

	// The watch resumes from the revision after a's first grant, which is
	// compacted: the observation reads the current holder instead.
	r.WaitLast(holderOf("a", la2), 30*time.Second, "a's second grant, after the compaction")
	mustReleaseLease(t, ctx, la2)
	r.WaitLast(lock.Holder{}, 10*time.Second, "released after the compaction")
	lb2 := mustAcquire(t, ctx, b, name)
	r.WaitLast(holderOf("b", lb2), 10*time.Second, "b acquired after the compaction")
	mustReleaseLease(t, ctx, lb2)
	r.WaitLast(lock.Holder{}, 10*time.Second, "b released after the compaction")
	r.Check([]lock.Holder{{}, holderOf("a", la), holderOf("a", la2), {}, holderOf("b", lb2), {}}, "across a compaction")
	r.EndsWithCancel(t, cancel)
}

// TestObserveMemberRestart kills the only member the observer's client
// knows while the holder changes, and restarts it; then it kills the
// leader (another member) while the holder changes again, so that the
// observer's member loses its leader and cancels the watch. No history is
// compacted, so the observation must report every change, vacancy
// included, in order, once each, and not end.
func TestObserveMemberRestart(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 120*time.Second)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	mine := (leader + 1) % len(c.Members) // a follower
	m := c.Members[mine]
	obs := newLocker(t, newClient(t, []string{m.ClientAddr()}), etcdlock.WithIdentity("observer"))
	const ttl = 15 * time.Second // the holders must outlast an election
	a := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("a"), etcdlock.WithTTL(ttl))
	b := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("b"), etcdlock.WithTTL(ttl))
	name := testutil.UniqueName(t)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := obs.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	r := testutil.Record(t, ch, errf)
	r.WaitLast(lock.Holder{}, 10*time.Second, "initial state")
	la := mustAcquire(t, ctx, a, name)
	r.WaitLast(holderOf("a", la), 10*time.Second, "a acquired")

	// The observer's member goes down and comes back.
	if err := m.Kill(); err != nil {
		t.Fatalf("Kill(%s) = %v", m.Name(), err)
	}
	mustReleaseLease(t, ctx, la)
	lb := mustAcquire(t, ctx, b, name)
	if err := m.Restart(ctx); err != nil {
		t.Fatalf("Restart(%s) = %v", m.Name(), err)
	}
	r.WaitLast(holderOf("b", lb), 30*time.Second, "b acquired while the observer's member was down")

	// The leader goes down: the observer's member loses its leader.
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() = %v", err)
	}
	if leader, err = c.Leader(ctx); err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	if leader == mine {
		t.Logf("the restarted member %s became the leader; killing it again", m.Name())
	}
	lm := c.Members[leader]
	if err := lm.Kill(); err != nil {
		t.Fatalf("Kill(%s) = %v", lm.Name(), err)
	}
	mustReleaseLease(t, ctx, lb)
	la2 := mustAcquire(t, ctx, a, name)
	if err := lm.Restart(ctx); err != nil {
		t.Fatalf("Restart(%s) = %v", lm.Name(), err)
	}
	r.WaitLast(holderOf("a", la2), 30*time.Second, "a acquired while the leader was down")
	mustReleaseLease(t, ctx, la2)
	r.WaitLast(lock.Holder{}, 10*time.Second, "released after the restarts")
	r.Check([]lock.Holder{{}, holderOf("a", la), {}, holderOf("b", lb), {}, holderOf("a", la2), {}}, "across member restarts")
	r.EndsWithCancel(t, cancel)
}

func mustAcquire(t *testing.T, ctx context.Context, l lock.Locker, name string) lock.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
	}
	return le
}

func mustReleaseLease(t *testing.T, ctx context.Context, le lock.Lease) {
	t.Helper()
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release() of token %d = %v; want nil", le.Token(), err)
	}
}
