package zktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// The tests in this file mix fencelock Lockers with go-zookeeper's own
// lock recipe, zk.Lock, the real code in this binary, on one lock: the
// parent znode root/name, which zk.Lock is given as its path.

// TestInteropZKLock runs Lockers with layout curator (and, for the
// control, the default layout) against zk.Lock clients on one ensemble.
func TestInteropZKLock(t *testing.T) {
	c := startEnsemble(t)
	t.Run("fleet", func(t *testing.T) { testInteropFleet(t, c) })
	t.Run("zk.Lock-holder-cut", func(t *testing.T) { testInteropZKLockHolderCut(t, c) })
	t.Run("locker-holder-cut", func(t *testing.T) { testInteropLockerHolderCut(t, c) })
	t.Run("foreign-holder", func(t *testing.T) { testInteropForeignHolder(t, c) })
	t.Run("control", func(t *testing.T) { testInteropControl(t, c) })
}

// zkLockClient is a zk.Lock client with its own connection and session.
// Its belief runs from Lock returning to Unlock being called.
type zkLockClient struct {
	name   string
	conn   *zk.Conn
	lk     *zk.Lock
	parent string
}

// newZKLockClient connects a zk.Lock client to servers through dial (nil:
// directly) for the lock whose parent znode is parent.
func newZKLockClient(t *testing.T, servers []string, dial zk.Dialer, parent, name string) *zkLockClient {
	t.Helper()
	conn := testutil.ZKConn(t, servers, sessionTimeout, dial)
	return &zkLockClient{name: name, conn: conn, lk: zk.NewLock(conn, parent, zk.WorldACL(zk.PermAll)), parent: parent}
}

func (c *zkLockClient) Name() string { return c.name }

// Lock takes the lock with the client's name as the znode's data, and
// returns the czxid of its znode. zk.Lock takes no context: when ctx ends
// first, the connection is closed, which ends the wait.
func (c *zkLockClient) Lock(ctx context.Context) (int64, error) {
	done := make(chan error, 1)
	go func() { done <- c.lk.LockWithData([]byte(c.name)) }()
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
	case <-ctx.Done():
		c.conn.Close()
		<-done
		return 0, context.Cause(ctx)
	}
	_, st, err := c.own()
	if err != nil {
		return 0, err
	}
	return st.Czxid, nil
}

func (c *zkLockClient) Unlock(context.Context) error { return c.lk.Unlock() }

// own returns the path and stat of the znode through which the client
// holds the lock: the lowest record, which its session must own.
func (c *zkLockClient) own() (string, *zk.Stat, error) {
	kids, _, err := c.conn.Children(c.parent)
	if err != nil {
		return "", nil, err
	}
	kids = slices.DeleteFunc(kids, func(k string) bool { return len(k) < 10 })
	if len(kids) == 0 {
		return "", nil, fmt.Errorf("%s: no record under %s while holding", c.name, c.parent)
	}
	slices.SortFunc(kids, func(a, b string) int { return compareSeq(a, b) })
	path := c.parent + "/" + kids[0]
	ok, st, err := c.conn.Exists(path)
	switch {
	case err != nil:
		return "", nil, err
	case !ok || st.EphemeralOwner != c.conn.SessionID():
		return "", nil, fmt.Errorf("%s: the lowest record %s is not its own", c.name, path)
	}
	return path, st, nil
}

// compareSeq orders records by their 10-digit sequence numbers.
func compareSeq(a, b string) int {
	x, _ := strconv.Atoi(a[len(a)-10:])
	y, _ := strconv.Atoi(b[len(b)-10:])
	return x - y
}

// fenceClient is a fencelock Locker as a client of the fleet.
type fenceClient struct {
	name, lock string
	l          *zklock.Locker
	le         lock.Lease
}

func (c *fenceClient) Name() string { return c.name }

func (c *fenceClient) Lock(ctx context.Context) (int64, error) {
	le, err := c.l.Acquire(ctx, c.lock)
	if err != nil {
		return 0, err
	}
	c.le = le
	return int64(le.Token()), nil
}

func (c *fenceClient) Unlock(ctx context.Context) error { return c.le.Release(ctx) }

// testInteropFleet runs 4 Lockers with layout curator and 4 zk.Lock
// clients on one lock for 500 grants: no two beliefs at once, tokens
// (czxids) rising in grant order, every client served; once all have
// closed, no record is left.
func testInteropFleet(t *testing.T, c *cluster.Cluster) {
	h := newHarness(t, c.Endpoints())
	name := "fleet-" + randHex(3)
	parent := h.root + "/" + name
	var cs []fleet.Contender
	var zcs []*zkLockClient
	for i := range 4 {
		l := h.dial(t, zklock.WithLayout(zklock.LayoutCurator), zklock.WithIdentity(fmt.Sprintf("fencelock-%d", i)))
		cs = append(cs, &fenceClient{name: fmt.Sprintf("fencelock-%d", i), lock: name, l: l})
		zc := newZKLockClient(t, c.Endpoints(), nil, parent, fmt.Sprintf("zk.Lock-%d", i))
		zcs = append(zcs, zc)
		cs = append(cs, zc)
	}
	// The first grant creates the parent as fencelock does, a container;
	// zk.Lock would create a persistent one, which outlives the records.
	warm(t, cs[0].(*fenceClient))
	r := fleet.Run(t, cs, fleet.Config{Grants: 500, Hold: time.Millisecond, Timeout: 2 * time.Minute})
	fleet.Check(t, r, 500)
	for _, c := range cs {
		if fc, ok := c.(*fenceClient); ok {
			_ = fc.l.Close()
		}
	}
	for _, zc := range zcs {
		zc.conn.Close()
	}
	testutil.Eventually(t, 10*time.Second, "no record left under "+parent, func() bool {
		h.admin.sync(t, parent)
		kids, _, err := h.admin.conn.Children(parent)
		return errors.Is(err, zk.ErrNoNode) || err == nil && len(kids) == 0
	})
}

// warm takes and releases the lock once through c.
func warm(t *testing.T, c *fenceClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx); err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := c.Unlock(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

// deletionSeen watches path from the admin's session and returns a
// channel that gets the time its deletion was reported.
func deletionSeen(t *testing.T, conn *zk.Conn, path string) <-chan time.Time {
	t.Helper()
	// conn may be on a follower that has not applied the create yet: a
	// sync brings it up to the leader before the read.
	_, err := conn.Sync(path)
	ok, _, ch, eerr := conn.ExistsW(path)
	if err = errors.Join(err, eerr); err != nil || !ok {
		t.Fatalf("ExistsW(%s) = %v, %v; want the znode there", path, ok, err)
	}
	seen := make(chan time.Time, 1)
	go func() {
		ev := <-ch
		if ev.Type == zk.EventNodeDeleted {
			seen <- time.Now()
		}
		close(seen)
	}()
	return seen
}

// eventSkew bounds how much sooner one client can act on a watch event
// than another client of the same server receives the same event: the
// server sends both for one transaction, and each client then has its
// own goroutines to run (measured: under 1ms).
const eventSkew = 50 * time.Millisecond

// at waits up to d for a time on ch.
func at(t *testing.T, ch <-chan time.Time, d time.Duration, what string) time.Time {
	t.Helper()
	select {
	case when, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch ended without it", what)
		}
		return when
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
	return time.Time{}
}

// testInteropZKLockHolderCut cuts a zk.Lock holder off from every server:
// a Locker with layout curator waiting behind it is granted only after
// the server expired the holder's session and deleted its znode: the
// znode is still there, and the Locker waiting, half a session timeout
// after the cut, and a watch from another session on the waiter's server
// reports the deletion no later than the grant (within eventSkew: both
// get the same event from that server).
func testInteropZKLockHolderCut(t *testing.T, c *cluster.Cluster) {
	h := newHarness(t, c.Endpoints())
	one := c.Endpoints()[:1]
	name := "cut-" + randHex(3)
	parent := h.root + "/" + name
	watcher := testutil.ZKConn(t, one, 10*time.Second, nil)
	waiter := dialOne(t, h, one)
	warm(t, &fenceClient{lock: name, l: waiter})
	g := new(testutil.Gate)
	holder := newZKLockClient(t, c.Endpoints(), g.ZKDialer(), parent, "zk.Lock-holder")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := holder.Lock(ctx)
	if err != nil {
		t.Fatalf("zk.Lock.Lock() = %v", err)
	}
	path, _, err := holder.own()
	if err != nil {
		t.Fatal(err)
	}
	deleted := deletionSeen(t, watcher, path)
	granted := make(chan time.Time, 1)
	var le lock.Lease
	go func() {
		le, err = waiter.Acquire(ctx, name)
		granted <- time.Now()
	}()
	testutil.Eventually(t, 10*time.Second, "the Locker queued", func() bool { return len(h.Records(t, name)) == 2 })
	tCut := time.Now()
	g.Cut()
	defer g.Heal()
	select {
	case <-granted:
		t.Fatalf("Acquire() returned %v while the cut holder's session lived", err)
	case <-time.After(sessionTimeout / 2):
	}
	if ok, _, err := h.admin.conn.Exists(path); err != nil || !ok {
		t.Fatalf("half a session timeout after the cut, Exists(%s) = %v, %v; want the holder's znode still there", path, ok, err)
	}
	tDel := at(t, deleted, 4*sessionTimeout, "the holder's znode deleted")
	tGrant := at(t, granted, 4*sessionTimeout, "Acquire() behind the cut holder")
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	defer le.Release(ctx)
	t.Logf("deletion seen %v after the cut, the grant %v after it", tDel.Sub(tCut), tGrant.Sub(tDel))
	if tGrant.Before(tDel.Add(-eventSkew)) {
		t.Errorf("the Locker was granted %v before a watch saw the holder's znode deleted", tDel.Sub(tGrant))
	}
	if int64(le.Token()) <= tok {
		t.Errorf("token %d after the zk.Lock grant's %d; want it higher", le.Token(), tok)
	}
}

// dialOne dials a Locker with layout curator to servers only.
func dialOne(t *testing.T, h *harness, servers []string) *zklock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := zklock.Dial(ctx, servers, zklock.WithRoot(h.root), zklock.WithSessionTimeout(sessionTimeout), zklock.WithLayout(zklock.LayoutCurator))
	if err != nil {
		t.Fatalf("zklock.Dial(%v) = %v", servers, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// testInteropLockerHolderCut cuts a Locker with layout curator off while
// it holds, with a zk.Lock client waiting: the lease ends with
// lock.ErrLost before the server deletes its znode, and zk.Lock is
// granted only after that deletion, as a watch from another session on
// the waiter's server reports it (within eventSkew).
func testInteropLockerHolderCut(t *testing.T, c *cluster.Cluster) {
	h := newHarness(t, c.Endpoints())
	one := c.Endpoints()[:1]
	name := "cut-" + randHex(3)
	g := new(testutil.Gate)
	holder := h.dial(t, zklock.WithLayout(zklock.LayoutCurator), zklock.WithDialer(h.sess.dialerVia(g.ZKDialer())))
	watcher := testutil.ZKConn(t, one, 10*time.Second, nil)
	waiter := newZKLockClient(t, one, nil, h.root+"/"+name, "zk.Lock-waiter")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	le, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	deleted := deletionSeen(t, watcher, le.(*zklock.Lease).Path())
	granted := make(chan time.Time, 1)
	var tok int64
	go func() {
		tok, err = waiter.Lock(ctx)
		granted <- time.Now()
	}()
	testutil.Eventually(t, 10*time.Second, "zk.Lock queued", func() bool { return len(h.Records(t, name)) == 2 })
	g.Cut()
	defer g.Heal()
	var tDone time.Time
	select {
	case <-le.Done():
		tDone = time.Now()
	case <-granted:
		t.Fatalf("zk.Lock was granted (%v) before the cut lease ended", err)
	case <-time.After(2 * sessionTimeout):
		t.Fatalf("the cut lease did not end within %v", 2*sessionTimeout)
	}
	if !errors.Is(le.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v; want an error wrapping %v", le.Err(), lock.ErrLost)
	}
	tDel := at(t, deleted, 4*sessionTimeout, "the holder's znode deleted")
	tGrant := at(t, granted, 4*sessionTimeout, "zk.Lock behind the cut Locker")
	if err != nil {
		t.Fatalf("zk.Lock.Lock() = %v", err)
	}
	defer waiter.Unlock(ctx)
	t.Logf("lease ended %v before the deletion was seen, zk.Lock granted %v after it", tDel.Sub(tDone), tGrant.Sub(tDel))
	if !tDone.Before(tDel) {
		t.Errorf("the lease ended %v after a watch saw its znode deleted", tDone.Sub(tDel))
	}
	if tGrant.Before(tDel.Add(-eventSkew)) {
		t.Errorf("zk.Lock was granted %v before a watch saw the holder's znode deleted", tDel.Sub(tGrant))
	}
	if tok <= int64(le.Token()) {
		t.Errorf("zk.Lock's token %d after the lease's %d; want it higher", tok, le.Token())
	}
}

// testInteropForeignHolder checks that Holder, Holders, Queue and Revoke
// see and act on a zk.Lock holder, and that a Locker of the default
// layout waits for it too.
func testInteropForeignHolder(t *testing.T, c *cluster.Cluster) {
	h := newHarness(t, c.Endpoints())
	name := "foreign-" + randHex(3)
	l := h.dial(t, zklock.WithLayout(zklock.LayoutCurator))
	plain := h.dial(t)
	warm(t, &fenceClient{lock: name, l: l})
	zc := newZKLockClient(t, c.Endpoints(), nil, h.root+"/"+name, "zk-client-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := zc.Lock(ctx)
	if err != nil {
		t.Fatalf("zk.Lock.Lock() = %v", err)
	}
	if le, err := plain.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire() of the default layout = %v, %v; want an error wrapping %v", le, err, lock.ErrLocked)
	}
	want := lock.Holder{Identity: "zk-client-1", Token: fencing.Token(tok)}
	if got, err := l.Holder(ctx, name); err != nil || got != want {
		t.Errorf("Holder() = %+v, %v; want %+v", got, err, want)
	}
	octx, ostop := context.WithCancel(ctx)
	defer ostop()
	seen, _, err := l.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	if got := <-seen; got != want {
		t.Errorf("Observe() sent %+v first; want the zk.Lock holder %+v", got, want)
	}
	granted := make(chan error, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		if err == nil && int64(le.Token()) <= tok {
			err = fmt.Errorf("token %d after the zk.Lock grant's %d", le.Token(), tok)
		}
		granted <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the Locker queued", func() bool { return len(h.Records(t, name)) == 2 })
	q, err := l.Queue(ctx, name)
	if err != nil || len(q) != 2 || q[0].Holder != want || !q[0].Held || q[1].Held {
		t.Errorf("Queue() = %+v, %v; want the zk.Lock holder, then a waiter", q, err)
	}
	if hs, err := l.Holders(ctx, name); err != nil || !slices.Equal(hs, []lock.Holder{want}) {
		t.Errorf("Holders() = %+v, %v; want %+v", hs, err, want)
	}
	if err := l.Revoke(ctx, name, want.Token); err != nil {
		t.Fatalf("Revoke() = %v", err)
	}
	if err := <-granted; err != nil {
		t.Errorf("Acquire() after the revocation = %v", err)
	}
	// What Observe reports next ends with the Locker's grant, never the
	// zk.Lock holder again.
	var mine lock.Holder
	for got := range seen {
		if got == want {
			t.Errorf("Observe() sent the revoked zk.Lock holder again")
		}
		if got.Identity == l.Identity() {
			mine = got
			break
		}
	}
	if mine.Token <= want.Token {
		t.Errorf("Observe() sent the Locker's grant as %+v; want it, with a token above the zk.Lock grant's %d", mine, want.Token)
	}
	// zk.Lock never learns of it: only the token keeps its writes out.
	if err := zc.Unlock(ctx); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("zk.Lock.Unlock() after the revocation = %v; want %v", err, zk.ErrNoNode)
	}
}

// testInteropControl is the control: without the layout, zk.Lock cannot
// take part. A Locker of the default layout holds; zk.Lock, which cannot
// parse the sequence number of fencelock's own record, fails, and leaves
// its znode, which then blocks the name for fencelock until the client
// closes its session. (Locker and zk.Lock do not both hold: the Locker
// reads zk.Lock's records in every layout.)
func testInteropControl(t *testing.T, c *cluster.Cluster) {
	h := newHarness(t, c.Endpoints())
	name := "control-" + randHex(3)
	l := h.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	zc := newZKLockClient(t, c.Endpoints(), nil, h.root+"/"+name, "zk.Lock")
	if _, err := zc.Lock(ctx); !errors.Is(err, strconv.ErrSyntax) {
		t.Fatalf("zk.Lock.Lock() next to fencelock's record = %v; want a parse error (%v)", err, strconv.ErrSyntax)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if le, err := l.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire() with zk.Lock's znode left = %v, %v; want an error wrapping %v", le, err, lock.ErrLocked)
	}
	zc.conn.Close()
	testutil.Eventually(t, 10*time.Second, "TryAcquire() once zk.Lock's session closed", func() bool {
		le, err := l.TryAcquire(ctx, name)
		if err == nil {
			_ = le.Release(ctx)
		}
		return err == nil
	})
}
