package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestElectionOnNewLeaderCompaction cuts off a candidate whose OnNewLeader
// follows the election while the leader changes, and compacts the history
// past the revision its watch resumes from. When it reconnects, its watch
// is cancelled with ErrCompacted; OnNewLeader must report the leader
// elected during the outage once, then the candidate's own election, and
// Run must not report a failed watch (the observation resyncs instead of
// ending).
func TestElectionOnNewLeaderCompaction(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	g := new(testutil.Gate)
	const ttl = 10 * time.Second // every session must outlast the outage
	obs := gatedLocker(t, c.Endpoints(), g, etcdlock.WithIdentity("observer"), etcdlock.WithTTL(ttl))
	a := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("a"), etcdlock.WithTTL(ttl))
	b := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("b"), etcdlock.WithTTL(ttl))
	ctx := testutil.Context(t, 90*time.Second)
	name := testutil.UniqueName(t)
	waitQueue := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(records(t, admin, a, name)) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d records of %q; want %d", what, len(records(t, admin, a, name)), name, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	la := mustAcquire(t, ctx, a, name)
	bGot := make(chan lock.Lease, 1)
	go func() {
		le, err := b.Acquire(ctx, name)
		if err != nil {
			t.Errorf("b: Acquire(%q) = %v; want a lease", name, err)
			return
		}
		bGot <- le
	}()
	waitQueue(2, "b queued behind a")

	newLeaders := make(chan lock.Holder, 16)
	errs := make(chan error, 64)
	started := make(chan fencing.Token, 1)
	e, err := lock.NewElection(obs, name, lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			started <- term
			<-ctx.Done()
		},
		OnNewLeader: func(h lock.Holder) { newLeaders <- h },
		OnError:     func(err error) { errs <- err },
	})
	if err != nil {
		t.Fatalf("NewElection() = %v; want nil", err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(rctx) }()
	defer func() {
		rcancel()
		testutil.Recv(t, runDone, 30*time.Second, "Run's return")
	}()
	expectLeader := func(want lock.Holder, within time.Duration, what string) {
		t.Helper()
		if h := testutil.Recv(t, newLeaders, within, "OnNewLeader: "+what); h != want {
			t.Fatalf("OnNewLeader(%+v); want OnNewLeader(%+v) (%s)", h, want, what)
		}
	}
	expectLeader(holderOf("a", la), 10*time.Second, "a leads when Run starts")
	waitQueue(3, "the observer queued behind b")

	g.Cut()
	mustReleaseLease(t, ctx, la)
	lb := testutil.Recv(t, bGot, 10*time.Second, "b's grant")
	resp, err := admin.Get(ctx, "compaction-marker")
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	rev := resp.Header.Revision
	if _, err := admin.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact(%d) = %v", rev, err)
	}
	if la.Token() >= fencing.Token(rev) {
		t.Fatalf("compacted up to revision %d, not past a's grant at %d: the observer's watch would not need to resync", rev, la.Token())
	}
	g.Heal()

	expectLeader(holderOf("b", lb), 30*time.Second, "b, elected during the outage, after the compaction")
	mustReleaseLease(t, ctx, lb)
	term := testutil.Recv(t, started, 10*time.Second, "the observer's OnStarted")
	expectLeader(lock.Holder{Identity: "observer", Token: term}, 10*time.Second, "the observer itself")

	rcancel()
	if err := testutil.Recv(t, runDone, 30*time.Second, "Run's return"); err != nil && !strings.Contains(err.Error(), context.Canceled.Error()) {
		t.Errorf("Run() = %v; want nil or context.Canceled", err)
	}
	runDone <- nil // for the deferred wait
	close(newLeaders)
	for h := range newLeaders {
		t.Errorf("OnNewLeader(%+v) after the observer was elected; want no further call", h)
	}
	close(errs)
	for err := range errs {
		if strings.Contains(err.Error(), ": observe: ") {
			t.Errorf("OnError(%v): the observation ended; want it to resync after the compaction", err)
		}
	}
}
