package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestLeaderKilled kills the Raft leader while one Locker holds a lock and
// two others wait for it: the holder keeps its lease, nobody is granted the
// lock twice, and both waiters are served, in order, once it is released.
func TestLeaderKilled(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	// A TTL well above an election, so that the sessions survive it.
	const ttl = 5 * time.Second
	var lockers []*etcdlock.Locker
	for i := range 3 {
		lockers = append(lockers, newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithTTL(ttl), etcdlock.WithIdentity(fmt.Sprintf("lk-%d", i))))
	}
	admin := newClient(t, c.Endpoints())

	var inside atomic.Int32
	enter := func(who string) {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%s entered with %d holders inside; want 1 (double grant)", who, n)
		}
	}
	leave := func() { inside.Add(-1) }

	first, err := lockers[0].Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	enter("lk-0")

	type grant struct {
		who   int
		token uint64
		err   error
	}
	grants := make(chan grant, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			le, err := lockers[i].Acquire(ctx, name)
			if err != nil {
				grants <- grant{who: i, err: err}
				return
			}
			enter(fmt.Sprintf("lk-%d", i))
			grants <- grant{who: i, token: uint64(le.Token())}
			leave()
			if err := le.Release(ctx); err != nil {
				t.Errorf("lk-%d Release() = %v", i, err)
			}
		}()
		testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, lockers[0], name)) == i+1 })
	}

	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	if err := c.Members[old].Kill(); err != nil {
		t.Fatalf("Kill(%s) = %v", c.Members[old].Name(), err)
	}
	if c.Members[old].Running() {
		t.Fatalf("%s still running after Kill", c.Members[old].Name())
	}
	testutil.Eventually(t, 15*time.Second, "new leader elected", func() bool {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		i, err := c.Leader(lctx)
		return err == nil && i != old
	})
	t.Logf("killed leader %s", c.Members[old].Name())

	if err := first.Err(); err != nil {
		t.Fatalf("holder's lease after the leader was killed: Err() = %v; want nil", err)
	}
	leave()
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	var order []int
	last := uint64(first.Token())
	for range 2 {
		select {
		case g := <-grants:
			if g.err != nil {
				t.Fatalf("waiter lk-%d Acquire() = %v; want a lease", g.who, g.err)
			}
			if g.token <= last {
				t.Errorf("lk-%d token %d; want above %d", g.who, g.token, last)
			}
			last = g.token
			order = append(order, g.who)
		case <-ctx.Done():
			t.Fatalf("waiters not all served: got %v", order)
		}
	}
	if !slices.Equal(order, []int{1, 2}) {
		t.Errorf("grant order %v; want [1 2]", order)
	}
	testutil.Eventually(t, 10*time.Second, "records gone", func() bool { return len(records(t, admin, lockers[0], name)) == 0 })
}

// TestPartitionLossBeforeNextGrant partitions the holder's client from the
// whole cluster (every endpoint through a blackholed proxy) while another
// Locker waits. The holder's Done must close before the other Locker's
// Acquire returns, in every run; the margin is logged. After healing, the
// holder's record is gone and its Locker acquires again with a new session.
func TestPartitionLossBeforeNextGrant(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	const runs = 5
	var margins []time.Duration
	for run := range runs {
		ctx := testutil.Context(t, 30*time.Second)
		name := testutil.UniqueName(t)
		proxies := cluster.NewProxies(t, c)
		holder := newLocker(t, newClient(t, proxies.Endpoints()))
		other := newLocker(t, newClient(t, c.Endpoints()))

		ll, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("run %d: Acquire() = %v", run, err)
		}
		le := ll.(*etcdlock.Lease)
		oldSession, _ := testutil.SessionLeaseID(holder)

		doneAt := make(chan time.Time, 1)
		go func() {
			<-le.Done()
			doneAt <- time.Now()
		}()
		type grant struct {
			at    time.Time
			lease lock.Lease
			err   error
		}
		granted := make(chan grant, 1)
		go func() {
			l, err := other.Acquire(ctx, name)
			granted <- grant{time.Now(), l, err}
		}()
		testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, other, name)) == 2 })

		proxies.Blackhole()
		cut := time.Now()
		g := <-granted
		if g.err != nil {
			t.Fatalf("run %d: other Acquire() = %v", run, g.err)
		}
		var done time.Time
		select {
		case done = <-doneAt:
		default:
			t.Fatalf("run %d: the other Locker was granted the lock %v after the cut, and the holder's Done is still open", run, g.at.Sub(cut))
		}
		if !done.Before(g.at) {
			t.Errorf("run %d: holder's Done closed at cut+%v, not before the next grant at cut+%v", run, done.Sub(cut), g.at.Sub(cut))
		}
		if !errors.Is(le.Err(), lock.ErrLost) {
			t.Errorf("run %d: Err() = %v; want %v", run, le.Err(), lock.ErrLost)
		}
		if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
			t.Errorf("run %d: proxies held no bytes while blackholed (%+v); the partition did not happen", run, st)
		}
		margin := g.at.Sub(done)
		margins = append(margins, margin)
		t.Logf("run %d: Done at cut+%v, next grant at cut+%v, margin %v", run, done.Sub(cut), g.at.Sub(cut), margin)

		proxies.Heal()
		if got := records(t, admin, other, name); len(got) != 1 || got[0] != g.lease.(*etcdlock.Lease).Key() {
			t.Errorf("run %d: records after heal = %v; want only the new holder's", run, got)
		}
		if err := g.lease.Release(ctx); err != nil {
			t.Fatalf("run %d: Release() = %v", run, err)
		}
		again, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("run %d: holder Acquire() after heal = %v", run, err)
		}
		if id, _ := testutil.SessionLeaseID(holder); id == oldSession {
			t.Errorf("run %d: session after loss = %x; want a new one", run, int64(id))
		}
		if err := again.Release(ctx); err != nil {
			t.Errorf("run %d: Release() = %v", run, err)
		}
		if err := holder.Close(); err != nil {
			t.Errorf("run %d: Close() = %v", run, err)
		}
	}
	slices.Sort(margins)
	t.Logf("Done before next grant, over %d runs: min %v, median %v, max %v", runs, margins[0], margins[len(margins)/2], margins[len(margins)-1])
}

// TestReleaseReplyLost releases through a slow link with a deadline shorter
// than the round trip, so the delete reaches the server but its reply is
// lost, while another Locker waits. The new grant that follows must survive
// the old holder's retried release; replaying the old release guard later
// must not delete it either.
func TestReleaseReplyLost(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)
	proxies := cluster.NewProxies(t, c)
	holder := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(5*time.Second))
	other := newLocker(t, newClient(t, c.Endpoints()))

	ll, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	le := ll.(*etcdlock.Lease)
	type grant struct {
		lease lock.Lease
		err   error
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := other.Acquire(ctx, name)
		granted <- grant{l, err}
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, other, name)) == 2 })

	for i := range proxies.Len() {
		proxies.Proxy(i).SetDelay(400 * time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	err = le.Release(rctx)
	cancel()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Release() with a 100ms deadline returned after %v; want it to leave the retries to the background", d)
	}
	if err == nil {
		t.Fatalf("Release() through a 400ms link with a 100ms deadline = nil; want the deadline error (the reply must be lost)")
	}
	if !errors.Is(le.Err(), lock.ErrReleased) {
		t.Errorf("Err() after the unconfirmed release = %v; want %v", le.Err(), lock.ErrReleased)
	}
	g := <-granted
	if g.err != nil {
		t.Fatalf("other Acquire() = %v", g.err)
	}
	for i := range proxies.Len() {
		proxies.Proxy(i).SetDelay(0)
	}
	// Close waits for the holder's background retries of the release.
	if err := holder.Close(); err != nil {
		t.Errorf("holder Close() = %v", err)
	}
	// A replay of the old release, exactly as Release sends it.
	resp, err := admin.Txn(ctx).If(le.IsHeld()).Then(clientv3.OpDelete(le.Key())).Commit()
	if err != nil || resp.Succeeded {
		t.Errorf("replayed release: Succeeded = %v, %v; want false", resp != nil && resp.Succeeded, err)
	}
	if err := le.Release(ctx); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("second Release() = %v; want %v", err, lock.ErrReleased)
	}
	if err := g.lease.Err(); err != nil {
		t.Errorf("new grant Err() = %v; want nil", err)
	}
	h, err := other.Holder(ctx, name)
	if err != nil || h.Token != g.lease.Token() {
		t.Errorf("Holder() = %+v, %v; want the new grant %d", h, err, g.lease.Token())
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Errorf("new grant Release() = %v", err)
	}
}

// TestCancelledWaitWhilePartitioned cancels a waiting Acquire while its
// client cannot reach the cluster: Acquire returns within its cleanup bound,
// and once the partition heals its record goes, while its session (which
// outlives the short partition) stays, so the background cleanup, not the
// lease's expiry, removed it.
func TestCancelledWaitWhilePartitioned(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)
	holder := newLocker(t, newClient(t, c.Endpoints()))
	proxies := cluster.NewProxies(t, c)
	waiter := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(10*time.Second))

	held, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(wctx, name)
		res <- err
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, holder, name)) == 2 })
	session, ok := testutil.SessionLeaseID(waiter)
	if !ok {
		t.Fatalf("waiter SessionLeaseID() = _, false")
	}

	proxies.Blackhole()
	cancel()
	start := time.Now()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire() = %v; want %v", err, context.Canceled)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("cancelled Acquire() still blocked %v after the cancel", time.Since(start))
	}
	t.Logf("cancelled Acquire returned %v after the cancel", time.Since(start))
	if got := records(t, admin, holder, name); len(got) != 2 {
		t.Fatalf("records during the partition = %v; want the holder's and the waiter's (the cleanup must not have reached the cluster)", got)
	}
	if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
		t.Errorf("proxies held no bytes while blackholed (%+v); the partition did not happen", st)
	}

	proxies.Heal()
	testutil.Eventually(t, 5*time.Second, "waiter's record deleted after heal", func() bool { return len(records(t, admin, holder, name)) == 1 })
	if id, ok := testutil.SessionLeaseID(waiter); !ok || id != session {
		t.Errorf("waiter session after heal = %x, %v; want the same live session %x", int64(id), ok, int64(session))
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestHolderMemberFrozen freezes (SIGSTOP) the only member the holder's
// client talks to, a follower: the other two keep quorum, expire the
// holder's session and grant the lock to a waiter, and the holder's Done
// must close before that grant. After the member resumes, the holder's
// Locker acquires again with a new session.
func TestHolderMemberFrozen(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	frozen := (leader + 1) % len(c.Members)
	var others []string
	for i, m := range c.Members {
		if i != frozen {
			others = append(others, m.ClientAddr())
		}
	}
	admin := newClient(t, others)
	holder := newLocker(t, newClient(t, []string{c.Members[frozen].ClientAddr()}))
	other := newLocker(t, newClient(t, others))

	ll, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	doneAt := make(chan time.Time, 1)
	go func() {
		<-ll.Done()
		doneAt <- time.Now()
	}()
	type grant struct {
		at    time.Time
		lease lock.Lease
		err   error
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := other.Acquire(ctx, name)
		granted <- grant{time.Now(), l, err}
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, other, name)) == 2 })

	if err := c.Members[frozen].Stop(); err != nil {
		t.Fatalf("Stop(%s) = %v", c.Members[frozen].Name(), err)
	}
	if c.Members[frozen].Running() {
		t.Fatalf("%s still running after Stop", c.Members[frozen].Name())
	}
	cut := time.Now()
	g := <-granted
	if g.err != nil {
		t.Fatalf("other Acquire() = %v", g.err)
	}
	var done time.Time
	select {
	case done = <-doneAt:
	default:
		t.Fatalf("the other Locker was granted the lock %v after the freeze, and the holder's Done is still open", g.at.Sub(cut))
	}
	if !done.Before(g.at) {
		t.Errorf("holder's Done closed at freeze+%v, not before the next grant at freeze+%v", done.Sub(cut), g.at.Sub(cut))
	}
	if !errors.Is(ll.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v; want %v", ll.Err(), lock.ErrLost)
	}
	t.Logf("Done at freeze+%v, next grant at freeze+%v, margin %v", done.Sub(cut), g.at.Sub(cut), g.at.Sub(done))

	if err := c.Members[frozen].Continue(); err != nil {
		t.Fatalf("Continue(%s) = %v", c.Members[frozen].Name(), err)
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	again, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("holder Acquire() after the member resumed = %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestFollowerFrozenHolderKeeps freezes a follower for several TTLs while a
// Locker whose client knows every member holds a lock: keepalives that hit
// the frozen member time out and are retried on another, so the lease is
// not lost, and the lock is never granted to the waiting Locker.
func TestFollowerFrozenHolderKeeps(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	frozen := c.Members[(leader+1)%len(c.Members)]
	holder := newLocker(t, newClient(t, c.Endpoints()))
	other := newLocker(t, newClient(t, c.Endpoints()))

	ll, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := frozen.Stop(); err != nil {
		t.Fatalf("Stop(%s) = %v", frozen.Name(), err)
	}
	t.Cleanup(func() { frozen.Continue() })
	if frozen.Running() {
		t.Fatalf("%s still running after Stop", frozen.Name())
	}
	// TryAcquire through the other Locker, in a loop, for three TTLs:
	// it must keep finding the lock held.
	until := time.Now().Add(3 * testTTL)
	tries := 0
	for time.Now().Before(until) {
		tctx, cancel := context.WithTimeout(ctx, testTTL)
		l, err := other.TryAcquire(tctx, name)
		cancel()
		switch {
		case err == nil:
			t.Fatalf("other TryAcquire() = %v after %v; want %v (the holder's lease must survive)", l.Token(), time.Until(until)+3*testTTL, lock.ErrLocked)
		case errors.Is(err, lock.ErrLocked):
			tries++
		default:
			// A request sent to the frozen member timed out; not a grant.
		}
		select {
		case <-ll.Done():
			t.Fatalf("holder's lease ended while a follower was frozen: %v", ll.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if tries == 0 {
		t.Fatalf("no TryAcquire got an answer while %s was frozen", frozen.Name())
	}
	if err := frozen.Continue(); err != nil {
		t.Fatalf("Continue(%s) = %v", frozen.Name(), err)
	}
	if err := ll.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// TestWaiterWatchOnFrozenMember freezes the member that carries a waiter's
// watch (the waiter's client knew only that member when it queued, then
// learned the others): the waiter must still be served soon after the lock
// is released, through another member, although its watch never answers.
func TestWaiterWatchOnFrozenMember(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	frozen := c.Members[(leader+1)%len(c.Members)]
	admin := newClient(t, []string{c.Members[leader].ClientAddr()})
	holder := newLocker(t, newClient(t, c.Endpoints()))
	waiterCli := newClient(t, []string{frozen.ClientAddr()})
	waiter := newLocker(t, waiterCli)

	held, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	type grant struct {
		lease lock.Lease
		err   error
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name)
		granted <- grant{l, err}
	}()
	testutil.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(records(t, admin, holder, name)) == 2 })
	waiterCli.SetEndpoints(c.Endpoints()...)
	if err := frozen.Stop(); err != nil {
		t.Fatalf("Stop(%s) = %v", frozen.Name(), err)
	}
	t.Cleanup(func() { frozen.Continue() })
	if frozen.Running() {
		t.Fatalf("%s still running after Stop", frozen.Name())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	released := time.Now()
	g := <-granted
	if g.err != nil {
		t.Fatalf("waiter Acquire() = %v; want a lease", g.err)
	}
	// Re-reading after a TTL of silence bounds the wait; the client's
	// pings alone took about 12s here.
	if d := time.Since(released); d > 5*testTTL {
		t.Errorf("waiter served %v after the release; want within %v", d, 5*testTTL)
	}
	t.Logf("waiter served %v after the release, with its watch's member frozen", time.Since(released))
	if !frozen.Running() {
		if err := frozen.Continue(); err != nil {
			t.Errorf("Continue() = %v", err)
		}
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}
