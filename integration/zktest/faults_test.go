package zktest

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZK runs the zklock-specific tests that share one ensemble: none of
// them harms the servers themselves.
func TestZK(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	tests := []struct {
		name string
		fn   func(t *testing.T, c *cluster.Cluster, h *harness)
	}{
		{"PartitionLossBeforeGrant", testPartitionLossBeforeGrant},
		{"SessionExpiredByServer", testSessionExpiredByServer},
		{"DropAfterCreate", testDropAfterCreate},
		{"ParentRecreated", testParentRecreated},
		{"CheckOpAfterLoss", testCheckOpAfterLoss},
		{"CloseLeavesNoZnodes", testCloseLeavesNoZnodes},
		{"HostProvider", testHostProvider},
		{"ObserveThroughExpiry", testObserveThroughExpiry},
		{"OpenURL", testOpenURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, c, h) })
	}
}

// lockName returns a lock name, under "zktest/", no other test uses.
func lockName(t *testing.T) string {
	t.Helper()
	return "zktest/" + testutil.UniqueName(t)
}

func mustAcquire(t *testing.T, ctx context.Context, l lock.Locker, name string) *zklock.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want nil", name, err)
	}
	return le.(*zklock.Lease)
}

type acquired struct {
	lease *zklock.Lease
	err   error
	at    time.Time
}

func goAcquire(ctx context.Context, l lock.Locker, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		r := acquired{err: err, at: time.Now()}
		if err == nil {
			r.lease = le.(*zklock.Lease)
		}
		ch <- r
	}()
	return ch
}

func waitRecords(t *testing.T, h *harness, name string, n int, what string) []string {
	t.Helper()
	var got []string
	testutil.Eventually(t, 10*time.Second, what, func() bool {
		got = h.Records(t, name)
		return len(got) == n
	})
	return got
}

// testPartitionLossBeforeGrant cuts a holder off from every server for
// longer than its session timeout, in several trials, and checks each time
// that the holder's Done closes before a waiting Locker's Acquire returns.
func testPartitionLossBeforeGrant(t *testing.T, c *cluster.Cluster, h *harness) {
	const trials = 3
	proxies := cluster.NewProxies(t, c)
	holderHarness := &harness{servers: proxies.Endpoints(), root: h.root, admin: h.admin, sess: h.sess}
	holder := holderHarness.dial(t, zklock.WithIdentity("partitioned"))
	waiter := h.dial(t, zklock.WithIdentity("waiter"))
	var margins []time.Duration
	for trial := range trials {
		ctx := testutil.Context(t, 30*time.Second)
		name := lockName(t)
		le := mustAcquire(t, ctx, holder, name)
		got := goAcquire(ctx, waiter, name)
		waitRecords(t, h, name, 2, "waiter queued")

		before := proxies.Stats()
		cut := time.Now()
		proxies.Blackhole()
		var doneAt time.Time
		select {
		case <-le.Done():
			doneAt = time.Now()
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: Done() not closed within 10s of the partition", trial)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("trial %d: waiter's Acquire() = %v; want a lease", trial, r.err)
		}
		if !errors.Is(le.Err(), lock.ErrLost) {
			t.Errorf("trial %d: Err() after the partition = %v; want an error wrapping %v", trial, le.Err(), lock.ErrLost)
		}
		if !doneAt.Before(r.at) {
			t.Errorf("trial %d: holder's Done at %v, waiter's grant at %v: the lock was granted before the holder knew it had lost it",
				trial, doneAt.Sub(cut), r.at.Sub(cut))
		}
		if r.lease.Token() <= le.Token() {
			t.Errorf("trial %d: waiter's Token() = %d; want > %d", trial, r.lease.Token(), le.Token())
		}
		if s := proxies.Stats(); s.HeldWhileBlackholed == before.HeldWhileBlackholed {
			t.Errorf("trial %d: the proxies held no bytes while blackholed: the partition did not happen", trial)
		}
		margin := r.at.Sub(doneAt)
		margins = append(margins, margin)
		t.Logf("trial %d: partition at 0; holder's Done at %v; waiter granted at %v; margin %v",
			trial, doneAt.Sub(cut).Round(time.Millisecond), r.at.Sub(cut).Round(time.Millisecond), margin.Round(time.Millisecond))

		proxies.Heal()
		if err := le.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("trial %d: Release() of the lost lease = %v; want an error wrapping %v", trial, err, lock.ErrLost)
		}
		// The holder's Locker comes back on a new session and queues again.
		again := goAcquire(ctx, holder, name)
		waitRecords(t, h, name, 2, "holder queued again after healing")
		if err := r.lease.Release(ctx); err != nil {
			t.Fatalf("trial %d: waiter's Release() = %v", trial, err)
		}
		a := <-again
		if a.err != nil {
			t.Fatalf("trial %d: holder's Acquire() after healing = %v; want a lease", trial, a.err)
		}
		if sessionID(a.lease) == sessionID(le) {
			t.Errorf("trial %d: lease after healing on session 0x%x; want a new session", trial, sessionID(a.lease))
		}
		if err := a.lease.Release(ctx); err != nil {
			t.Fatalf("trial %d: Release() = %v", trial, err)
		}
		waitRecords(t, h, name, 0, "no records left")
	}
	t.Logf("Done-to-next-grant margins over %d trials: %v (session timeout %v)", trials, margins, holder.SessionTimeout())
}

// testSessionExpiredByServer ends a holder's session on the server and
// checks that the lease ends at once, the server removed its znode, and the
// Locker continues on a new session.
func testSessionExpiredByServer(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	l := h.dial(t)
	le := mustAcquire(t, ctx, l, name)
	old := sessionID(l)
	start := time.Now()
	expireSession(t, h.sess, h.servers, l)
	select {
	case <-le.Done():
	case <-time.After(sessionTimeout):
		t.Fatalf("Done() not closed within %v of the session's expiry", sessionTimeout)
	}
	t.Logf("Done closed %v after the session was closed on the server", time.Since(start).Round(time.Millisecond))
	// The cause is the expiry, or the deletion of the znode that the
	// expiry caused, whichever the Locker learnt first.
	if err := le.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err() = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	waitRecords(t, h, name, 0, "the server removed the expired session's znode")
	le2 := mustAcquire(t, ctx, l, name)
	if sessionID(le2) == old || sessionID(le2) == 0 {
		t.Errorf("session id after expiry = 0x%x; want a new session (old 0x%x)", sessionID(le2), old)
	}
	if le2.Token() <= le.Token() {
		t.Errorf("Token() on the new session = %d; want > %d", le2.Token(), le.Token())
	}
	if err := le2.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// dropper is a dialer that closes its connection when the Locker sends a
// create of a lock znode: just after the request left (the server applies
// it, the reply is lost) or instead of sending it.
type dropper struct {
	mode  atomic.Int32 // 0 off, 1 drop after the write, 2 drop instead of the write
	drops atomic.Int32
}

const (
	dropAfter  = 1
	dropBefore = 2
)

func (d *dropper) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

type dropConn struct {
	net.Conn
	d *dropper
}

// isLockCreate reports whether p is one whole create request for a lock
// znode: length, xid, then opcode 1 (create) and the path, or opcode 14
// (multi) whose first operation is a create (zklock sends its creates as
// a multi with the stamp of the parent and, with a lock-delay, the
// marker): its header (type, done flag, error) and then the path. The
// path contains "/~".
func isLockCreate(p []byte) bool {
	if len(p) < 16 {
		return false
	}
	off := 12
	switch int32(binary.BigEndian.Uint32(p[8:12])) {
	case 1:
	case 14:
		if len(p) < 12+9+4 || int32(binary.BigEndian.Uint32(p[12:16])) != 1 {
			return false
		}
		off = 12 + 9
	default:
		return false
	}
	n := int(binary.BigEndian.Uint32(p[off : off+4]))
	return n >= 0 && off+4+n <= len(p) && strings.Contains(string(p[off+4:off+4+n]), "/~")
}

func (c *dropConn) Write(p []byte) (int, error) {
	mode := c.d.mode.Load()
	if mode == 0 || !isLockCreate(p) || !c.d.mode.CompareAndSwap(mode, 0) {
		return c.Conn.Write(p)
	}
	c.d.drops.Add(1)
	if mode == dropBefore {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Write(p)
	c.Conn.Close()
	return n, err
}

// testDropAfterCreate drops the connection around a lock create and checks
// that the Acquire ends with exactly one znode, held by it, and that
// another Locker is excluded.
func testDropAfterCreate(t *testing.T, c *cluster.Cluster, h *harness) {
	for _, tt := range []struct {
		name string
		mode int32
	}{
		{"reply lost", dropAfter},
		{"request lost", dropBefore},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testutil.Context(t, 30*time.Second)
			name := lockName(t)
			d := &dropper{}
			l := h.dial(t, zklock.WithDialer(d.dial))
			other := h.dial(t)
			mustAcquire(t, ctx, l, name).Release(ctx) // creates the parents: the next create is the lock znode's
			sid := sessionID(l)

			d.mode.Store(tt.mode)
			le := mustAcquire(t, ctx, l, name)
			if n := d.drops.Load(); n != 1 {
				t.Fatalf("connections dropped at a create: %d; want 1 (the fault did not happen)", n)
			}
			if sessionID(l) != sid {
				t.Errorf("session id 0x%x after the drop; want the same session 0x%x", sessionID(l), sid)
			}
			recs := h.Records(t, name)
			if len(recs) != 1 || h.root+"/"+name+"/"+recs[0] != le.Path() {
				t.Errorf("records after the drop = %v; want exactly the lease's %s", recs, le.Path())
			}
			if _, err := other.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
				t.Errorf("another Locker's TryAcquire() = %v; want an error wrapping %v", err, lock.ErrLocked)
			}
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			waitRecords(t, h, name, 0, "no records after release")
		})
	}
}

// testParentRecreated deletes a lock's parent between grants: the sequence
// numbers start over, the tokens keep rising.
func testParentRecreated(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	l := h.dial(t)
	parent := h.root + "/" + name
	var last *zklock.Lease
	for round := range 3 {
		for range 3 { // raise the sequence counter
			le := mustAcquire(t, ctx, l, name)
			if last != nil && le.Token() <= last.Token() {
				t.Errorf("round %d: Token() = %d; want > %d", round, le.Token(), last.Token())
			}
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			last = le
		}
		if err := h.admin.conn.Delete(parent, -1); err != nil {
			t.Fatalf("Delete(%s) = %v", parent, err)
		}
		le := mustAcquire(t, ctx, l, name)
		seqNew, seqOld := le.Path()[len(le.Path())-10:], last.Path()[len(last.Path())-10:]
		if seqNew >= seqOld {
			t.Errorf("round %d: sequence after re-creation %s; want it to start over below %s", round, seqNew, seqOld)
		}
		if le.Token() <= last.Token() {
			t.Errorf("round %d: Token() after the parent was re-created = %d; want > %d", round, le.Token(), last.Token())
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		last = le
	}
}

// testCheckOpAfterLoss shows the guarded write: a multi that starts with
// the lease's CheckOp applies while the lease holds and fails after it is
// lost.
func testCheckOpAfterLoss(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	l := h.dial(t)
	target := h.root + "-data-" + randHex(3)
	if _, err := h.admin.conn.Create(target, []byte("0"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", target, err)
	}
	t.Cleanup(func() { _ = h.admin.conn.Delete(target, -1) })
	le := mustAcquire(t, ctx, l, name)
	write := func(v string) error {
		_, err := h.admin.conn.Multi(le.CheckOp(), &zk.SetDataRequest{Path: target, Data: []byte(v), Version: -1})
		return err
	}
	if err := write("1"); err != nil {
		t.Fatalf("guarded write while held = %v; want nil", err)
	}
	expireSession(t, h.sess, h.servers, l)
	<-le.Done()
	waitRecords(t, h, name, 0, "lost lease's znode removed")
	if err := write("2"); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("guarded write after loss = %v; want %v", err, zk.ErrNoNode)
	}
	h.admin.sync(t, target)
	data, _, err := h.admin.conn.Get(target)
	if err != nil || string(data) != "1" {
		t.Errorf("target after the refused write = %q, %v; want %q", data, err, "1")
	}
}

// testCloseLeavesNoZnodes closes a Locker holding one lock and waiting for
// another: its znodes go, and the lock parents (and the intermediate znode
// of a two-segment name) are containers, which the server removes once
// empty.
func testCloseLeavesNoZnodes(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	held, wanted := lockName(t)+"/a", lockName(t)
	l := h.dial(t)
	other := h.dial(t)
	le := mustAcquire(t, ctx, l, held)
	ole := mustAcquire(t, ctx, other, wanted)
	waiting := goAcquire(ctx, l, wanted)
	waitRecords(t, h, wanted, 2, "waiter queued")
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if r := <-waiting; !errors.Is(r.err, lock.ErrClosed) {
		t.Errorf("waiting Acquire() after Close = %v; want an error wrapping %v", r.err, lock.ErrClosed)
	}
	if !errors.Is(le.Err(), lock.ErrReleased) {
		t.Errorf("Err() after Close = %v; want an error wrapping %v", le.Err(), lock.ErrReleased)
	}
	waitRecords(t, h, held, 0, "held lock's znode gone after Close")
	waitRecords(t, h, wanted, 1, "waiter's znode gone after Close")
	// The lock parents, and the intermediate znode of the two-segment
	// name, stay until the server's container check removes them (every
	// 60s unless znode.container.checkIntervalMs says otherwise). Clients
	// cannot tell a container from a persistent znode (ZooKeeper reports
	// ephemeralOwner 0 for both), so the test checks that they exist and
	// have no children left.
	for _, p := range []string{h.root + "/" + held, h.root + "/" + wanted} {
		ok, st, err := h.admin.conn.Exists(p)
		if err != nil || !ok {
			t.Errorf("Exists(%s) = %v, %v; want the lock's parent", p, ok, err)
			continue
		}
		if want := int32(0); p == h.root+"/"+held && st.NumChildren != want {
			t.Errorf("%s has %d children after Close; want %d", p, st.NumChildren, want)
		}
	}
	ok, st, err := h.admin.conn.Exists(h.root)
	if err != nil || !ok || st.EphemeralOwner != 0 {
		t.Errorf("root %s: exists=%v owner=0x%x err=%v; want a persistent znode", h.root, ok, st.EphemeralOwner, err)
	}
	if err := ole.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// testHostProvider dials through a host provider of the caller's
// (WithHostProvider): the connection asks it for every server it tries,
// and the Locker works as any other.
func testHostProvider(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	hp := &countingHosts{HostProvider: zk.NewDNSHostProvider()}
	l := h.dial(t, zklock.WithHostProvider(hp), zklock.WithIdentity("provided"))
	le := mustAcquire(t, ctx, l, name)
	if got, err := l.Holder(ctx, name); err != nil || got.Identity != "provided" || got.Token != le.Token() {
		t.Errorf("Holder() = %+v, %v; want provided with token %d", got, err, le.Token())
	}
	if n := hp.nexts.Load(); n == 0 {
		t.Errorf("the host provider was asked for %d servers; want at least one", n)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if got := h.Records(t, name); len(got) != 0 {
		t.Errorf("records after Close = %v; want none", got)
	}
	if _, err := l.Acquire(ctx, name); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Acquire() after Close = %v; want an error wrapping %v", err, lock.ErrClosed)
	}
}

// countingHosts is a zk.HostProvider that counts the servers asked of it.
type countingHosts struct {
	zk.HostProvider
	nexts atomic.Int64
}

func (c *countingHosts) Next() (string, bool) {
	c.nexts.Add(1)
	return c.HostProvider.Next()
}

// testObserveThroughExpiry observes a lock whose holder's session expires
// while another Locker waits.
func testObserveThroughExpiry(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	w := h.dial(t)
	a := h.dial(t, zklock.WithIdentity("a"))
	b := h.dial(t, zklock.WithIdentity("b"))
	ch, errf, err := w.Observe(ctx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	next := func(what string) lock.Holder {
		t.Helper()
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("%s: observation ended: %v", what, errf())
			}
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing observed within 10s", what)
		}
		return lock.Holder{}
	}
	if got := next("initial"); got != (lock.Holder{}) {
		t.Errorf("initial = %+v; want free", got)
	}
	la := mustAcquire(t, ctx, a, name)
	if got := next("a holds"); got != (lock.Holder{Identity: "a", Token: la.Token()}) {
		t.Errorf("observed %+v; want a with token %d", got, la.Token())
	}
	waiting := goAcquire(ctx, b, name)
	waitRecords(t, h, name, 2, "b queued")
	expireSession(t, h.sess, h.servers, a)
	r := <-waiting
	if r.err != nil {
		t.Fatalf("b's Acquire() = %v", r.err)
	}
	if got := next("b holds"); got != (lock.Holder{Identity: "b", Token: r.lease.Token()}) {
		t.Errorf("observed %+v; want b with token %d", got, r.lease.Token())
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if got := next("free"); got != (lock.Holder{}) {
		t.Errorf("observed %+v; want free", got)
	}
}

// testOpenURL opens a Locker through lock.Open and the "zk" scheme.
func testOpenURL(t *testing.T, c *cluster.Cluster, h *harness) {
	ctx := testutil.Context(t, 30*time.Second)
	name := lockName(t)
	l, err := lock.Open(ctx, "zk://"+strings.Join(h.servers, ",")+h.root+"/?session_timeout=2s&identity=from-url")
	if err != nil {
		t.Fatalf("lock.Open() = %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	h.admin.sync(t, h.root+"/"+name)
	if got, _, err := h.admin.conn.Children(h.root + "/" + name); err != nil || len(got) != 1 {
		t.Errorf("children of %s/%s = %v, %v; want the lease's znode", h.root, name, got, err)
	}
	if got, err := l.Holder(ctx, name); err != nil || got.Identity != "from-url" {
		t.Errorf("Holder() = %+v, %v; want identity from-url", got, err)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}
