package guardtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// zkSessionTimeout is the session timeout of the test Lockers: short, so
// that a partitioned holder's session expires within seconds (the test
// ensembles run with tickTime 200ms, so the server accepts it), yet long
// enough that zklock's default margin (half of it) leaves a loaded 2-core
// machine 1.5s without a reply before a healthy lease is given up.
const zkSessionTimeout = 3 * time.Second

func newZKLocker(t *testing.T, servers []string, root, identity string) *zklock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := zklock.Dial(ctx, servers, zklock.WithRoot(root), zklock.WithIdentity(identity), zklock.WithSessionTimeout(zkSessionTimeout))
	if err != nil {
		t.Fatalf("zklock.Dial(%v) = %v", servers, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// zkRoot creates a fresh persistent znode for the test's data and locks.
func zkRoot(t *testing.T, conn *zk.Conn) string {
	t.Helper()
	root := "/guardtest-" + testutil.UniqueName(t)
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", root, err)
	}
	return root
}

// gate holds the first write request (setData or multi) sent on the
// connections it dialled once it is armed, until it is opened: a write
// that has left the holder's code and is delayed on its way, as by a
// pause between a check and the send.
type gate struct {
	armed   atomic.Bool
	held    chan struct{} // closed when a request is held
	release chan struct{} // closed by open
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) dialer() zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: c, g: g}, nil
	}
}

// Request opcodes of the ZooKeeper protocol that write.
const (
	opSetData = 5
	opMulti   = 14
)

// gatedConn is written by one goroutine at a time: go-zookeeper sends the
// handshake, then every request from its send loop, one packet per Write
// (int32 length, int32 xid, int32 opcode, body).
type gatedConn struct {
	net.Conn
	g          *gate
	handshaken bool
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if c.handshaken && len(p) >= 12 {
		if op := int32(binary.BigEndian.Uint32(p[8:12])); (op == opSetData || op == opMulti) && c.g.armed.CompareAndSwap(true, false) {
			close(c.g.held)
			<-c.g.release
		}
	}
	c.handshaken = true
	return c.Conn.Write(p)
}

func TestGuardZooKeeper(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
	t.Run("GuardedWhileHeld", func(t *testing.T) { testZKGuardedHeld(t, c) })
	t.Run("GuardedAfterEnd", func(t *testing.T) { testZKGuardedAfterEnd(t, c) })
	for _, k := range grantKinds {
		t.Run("PausedHolder/"+k.name, func(t *testing.T) { testZKPausedHolder(t, c, k) })
	}
	t.Run("FencedTokenOrder", func(t *testing.T) { testZKFencedOrder(t, c) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testZKConcurrent(t, c) })
}

func testZKGuardedHeld(t *testing.T, c *cluster.Cluster) {
	conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
	root := zkRoot(t, conn)
	l := newZKLocker(t, c.Endpoints(), root+"/locks", "holder")
	ctx := testutil.Context(t, 30*time.Second)
	data := root + "/data"
	if _, err := conn.Create(data, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", data, err)
	}

	lease, err := l.Acquire(ctx, "config")
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	child := data + "/child"
	res, err := zklock.GuardedMulti(ctx, conn, lease,
		&zk.CreateRequest{Path: child, Data: []byte("c"), Acl: zk.WorldACL(zk.PermAll)},
		&zk.SetDataRequest{Path: data, Data: []byte("v1"), Version: -1})
	if err != nil {
		t.Fatalf("GuardedMulti(create, set) while held = %v; want nil", err)
	}
	if len(res) != 2 || res[0].String != child || res[1].Stat == nil {
		t.Errorf("GuardedMulti() responses = %+v; want the create's path %q and the set's stat", res, child)
	}
	if b, _, err := conn.Get(data); err != nil || string(b) != "v1" {
		t.Errorf("Get(%s) = %q, %v; want %q", data, b, err, "v1")
	}

	// One of the caller's own operations fails: nothing is applied, and
	// the error is that operation's, not a lost lease.
	other := data + "/other"
	_, err = zklock.GuardedMulti(ctx, conn, lease,
		&zk.CreateRequest{Path: other, Acl: zk.WorldACL(zk.PermAll)},
		&zk.SetDataRequest{Path: data, Data: []byte("v2"), Version: 999})
	if !errors.Is(err, zk.ErrBadVersion) || errors.Is(err, lock.ErrLost) {
		t.Errorf("GuardedMulti(create, set with a wrong version) = %v; want an error wrapping %v and not %v", err, zk.ErrBadVersion, lock.ErrLost)
	}
	if ok, _, err := conn.Exists(other); ok || err != nil {
		t.Errorf("Exists(%s) after the failed multi = %v, %v; want false: a multi is all or nothing", other, ok, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

func testZKGuardedAfterEnd(t *testing.T, c *cluster.Cluster) {
	tests := []struct {
		name string
		end  func(ctx context.Context, t *testing.T, conn *zk.Conn, lease lock.Lease)
		want error
	}{
		{"znode deleted", func(_ context.Context, t *testing.T, conn *zk.Conn, lease lock.Lease) {
			p := lease.(*zklock.Lease).Path()
			if err := conn.Delete(p, -1); err != nil {
				t.Fatalf("Delete(%s) = %v", p, err)
			}
		}, lock.ErrLost},
		{"released", func(ctx context.Context, t *testing.T, _ *zk.Conn, lease lock.Lease) {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
		}, lock.ErrReleased},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
			root := zkRoot(t, conn)
			l := newZKLocker(t, c.Endpoints(), root+"/locks", "holder")
			ctx := testutil.Context(t, 30*time.Second)
			data := root + "/data"
			lease, err := l.Acquire(ctx, "config")
			if err != nil {
				t.Fatalf("Acquire() = %v", err)
			}
			tt.end(ctx, t, conn, lease)

			create := &zk.CreateRequest{Path: data, Data: []byte("late"), Acl: zk.WorldACL(zk.PermAll)}
			if _, err := zklock.GuardedMulti(ctx, conn, lease, create); !errors.Is(err, tt.want) {
				t.Errorf("GuardedMulti() after the lease ended = %v; want an error wrapping %v", err, tt.want)
			}
			testutil.Recv(t, lease.Done(), 10*time.Second, "lease.Done()")
			if _, err := zklock.GuardedMulti(ctx, conn, lease, create); !errors.Is(err, tt.want) {
				t.Errorf("GuardedMulti() after Done = %v; want an error wrapping %v", err, tt.want)
			}
			if ok, _, err := conn.Exists(data); ok || err != nil {
				t.Errorf("Exists(%s) = %v, %v; want false: no refused write may land", data, ok, err)
			}
		})
	}
}

// zkWriter is one way of writing data on behalf of a lease, for the
// paused-holder scenario.
type zkWriter struct {
	name  string
	write func(ctx context.Context, conn *zk.Conn, lease lock.Lease, path, value string) error
	read  func(ctx context.Context, conn *zk.Conn, path string) (string, error)
	// checkLate checks the outcome of A's late write.
	checkLate func(t *testing.T, err error, a, b lock.Lease, path string)
	lateLands bool
}

func zkPlainRead(_ context.Context, conn *zk.Conn, path string) (string, error) {
	if _, err := conn.Sync(path); err != nil {
		return "", err
	}
	b, _, err := conn.Get(path)
	return string(b), err
}

var zkWriters = []zkWriter{
	{
		name: "fenced",
		write: func(ctx context.Context, conn *zk.Conn, lease lock.Lease, path, value string) error {
			_, err := zklock.SetFenced(ctx, conn, path, []byte(value), lease.Token())
			return err
		},
		read: func(ctx context.Context, conn *zk.Conn, path string) (string, error) {
			if _, err := conn.Sync(path); err != nil {
				return "", err
			}
			b, _, err := zklock.GetFenced(ctx, conn, path)
			return string(b), err
		},
		checkLate: func(t *testing.T, err error, a, b lock.Lease, path string) {
			var stale *fencing.StaleTokenError
			if !errors.As(err, &stale) || stale.Resource != path || stale.Token != a.Token() || stale.Highest != b.Token() {
				t.Errorf("A's late SetFenced() = %v; want a *fencing.StaleTokenError{%q, %d, %d}", err, path, a.Token(), b.Token())
			}
		},
	},
	{
		name: "guarded",
		write: func(ctx context.Context, conn *zk.Conn, lease lock.Lease, path, value string) error {
			_, err := zklock.GuardedMulti(ctx, conn, lease, &zk.SetDataRequest{Path: path, Data: []byte(value), Version: -1})
			return err
		},
		read: zkPlainRead,
		checkLate: func(t *testing.T, err error, _, _ lock.Lease, _ string) {
			if !errors.Is(err, lock.ErrLost) {
				t.Errorf("A's late GuardedMulti() = %v; want an error wrapping %v", err, lock.ErrLost)
			}
		},
	},
	{
		name: "unguarded control",
		write: func(_ context.Context, conn *zk.Conn, _ lock.Lease, path, value string) error {
			_, err := conn.Set(path, []byte(value), -1)
			return err
		},
		read: zkPlainRead,
		checkLate: func(t *testing.T, err error, _, _ lock.Lease, _ string) {
			if err != nil {
				t.Errorf("A's late plain Set() = %v; want nil", err)
			}
		},
		lateLands: true,
	},
}

// testZKPausedHolder: A's write leaves A's code while A holds the lock and
// is held in a gated connection (for SetFenced, after its read: the check
// has passed, the conditional set is on its way). A is partitioned from
// the ensemble until the server expires its session, B is granted the lock
// and writes, and only then is A's write sent.
func testZKPausedHolder(t *testing.T, c *cluster.Cluster, k grantKind) {
	for _, w := range zkWriters {
		if !k.protects(w.name) {
			continue
		}
		t.Run(w.name, func(t *testing.T) {
			conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
			root := zkRoot(t, conn)
			data := root + "/data"
			if _, err := conn.Create(data, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatalf("Create(%s) = %v", data, err)
			}
			proxies := cluster.NewProxies(t, c)
			la := newZKLocker(t, proxies.Endpoints(), root+"/locks", "A") // A's session goes through the proxies
			lb := newZKLocker(t, c.Endpoints(), root+"/locks", "B")
			g := newGate(t)
			// A long session, so that the held request does not time the
			// connection out.
			connA := testutil.ZKConn(t, c.Endpoints(), 30*time.Second, g.dialer())
			ctx := testutil.Context(t, 60*time.Second)

			var other lock.Lease
			if k.other != nil {
				var err error
				if other, err = k.other(ctx, newZKLocker(t, c.Endpoints(), root+"/locks", "C"), "config"); err != nil {
					t.Fatalf("C's grant = %v", err)
				}
			}
			a, err := k.a(ctx, la, "config")
			if err != nil {
				t.Fatalf("Acquire(A) = %v", err)
			}
			if err := w.write(ctx, connA, a, data, "A1"); err != nil {
				t.Fatalf("A's write while holding = %v; want nil", err)
			}

			g.armed.Store(true)
			late := make(chan error, 1)
			go func() { late <- w.write(ctx, connA, a, data, "late by A") }()
			testutil.Recv(t, g.held, 10*time.Second, "A's write held")

			// A is partitioned; the server expires its session.
			proxies.Blackhole()
			t.Cleanup(proxies.Heal)
			aPath := a.(*zklock.Lease).Path()
			testutil.Eventually(t, 15*time.Second, "A's session expired (its znode gone)", func() bool {
				// conn's server may not have applied A's create yet:
				// catch up with the leader before reading, or the
				// znode may look gone before it was ever seen.
				if _, err := conn.Sync(root); err != nil {
					return false
				}
				ok, _, err := conn.Exists(aPath)
				return err == nil && !ok
			})
			if st := proxies.Stats(); st.HeldWhileBlackholed == 0 {
				t.Errorf("proxy stats %+v: nothing held while blackholed; the partition did not happen", st)
			}

			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			b, err := k.b(bctx, lb, "config")
			if err != nil {
				t.Fatalf("Acquire(B) after A's session expired = %v", err)
			}
			if b.Token() <= a.Token() {
				t.Fatalf("B's token %d; want above A's %d", b.Token(), a.Token())
			}
			if err := w.write(ctx, conn, b, data, "B"); err != nil {
				t.Fatalf("B's write = %v; want nil", err)
			}
			select {
			case err := <-late:
				t.Fatalf("A's write returned %v before the gate let it through", err)
			default:
			}

			g.open()
			w.checkLate(t, testutil.Recv(t, late, 20*time.Second, "A's late write"), a, b, data)
			want := "B"
			if w.lateLands {
				want = "late by A"
			}
			if got, err := w.read(ctx, conn, data); err != nil || got != want {
				t.Errorf("data after A's late write = %q, %v; want %q", got, err, want)
			}
			if other != nil {
				// The concurrent holder still writes: only A's grant ended.
				if err := w.write(ctx, conn, other, data, "C"); err != nil {
					t.Errorf("C's write after B's = %v; want nil", err)
				}
			}
			if err := b.Release(ctx); err != nil {
				t.Errorf("Release(B) = %v", err)
			}
			proxies.Heal()
		})
	}
}

// testZKFencedOrder drives one znode through tokens of different decimal
// lengths, up to the largest token.
func testZKFencedOrder(t *testing.T, c *cluster.Cluster) {
	conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
	root := zkRoot(t, conn)
	ctx := testutil.Context(t, 30*time.Second)
	path := root + "/data"

	if b, tok, err := zklock.GetFenced(ctx, conn, path); b != nil || tok != 0 || err != nil {
		t.Errorf("GetFenced(missing znode) = %q, %d, %v; want nil, 0, nil", b, tok, err)
	}
	steps := []struct {
		token   fencing.Token
		highest fencing.Token // the highest token afterwards
	}{
		{9, 9}, {10, 10}, {9, 10}, {10, 10}, {99, 99}, {100, 100}, {99, 100},
		{1 << 40, 1 << 40}, {math.MaxUint64, math.MaxUint64}, {math.MaxUint64, math.MaxUint64}, {1, math.MaxUint64},
	}
	var version int32 = -1
	for i, s := range steps {
		value := fmt.Sprintf("step %d", i)
		stat, err := zklock.SetFenced(ctx, conn, path, []byte(value), s.token)
		if s.token == s.highest {
			if err != nil || stat == nil || stat.Version <= version {
				t.Fatalf("step %d: SetFenced(token %d) = %+v, %v; want accepted with a version above %d", i, s.token, stat, err, version)
			}
			version = stat.Version
		} else {
			var stale *fencing.StaleTokenError
			if !errors.As(err, &stale) || *stale != (fencing.StaleTokenError{Resource: path, Token: s.token, Highest: s.highest}) || stat != nil {
				t.Fatalf("step %d: SetFenced(token %d) = %+v, %v; want nil and a *fencing.StaleTokenError with highest %d", i, s.token, stat, err, s.highest)
			}
		}
		if _, tok, err := zklock.GetFenced(ctx, conn, path); tok != s.highest || err != nil {
			t.Fatalf("step %d: GetFenced() token = %d, %v; want %d", i, tok, err, s.highest)
		}
	}

	if _, err := zklock.SetFenced(ctx, conn, path, []byte("x"), 0); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("SetFenced(token 0) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}
	if _, err := zklock.SetFenced(ctx, conn, root+"/missing/child", []byte("x"), 1); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("SetFenced(missing parent) = %v; want an error wrapping %v", err, zk.ErrNoNode)
	}

	empty := root + "/empty"
	if _, err := conn.Create(empty, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", empty, err)
	}
	if _, err := zklock.SetFenced(ctx, conn, empty, []byte("first"), 1); err != nil {
		t.Errorf("SetFenced(znode with no data, token 1) = %v; want nil (no data counts as token 0)", err)
	}

	plain := root + "/plain"
	if _, err := conn.Create(plain, []byte("hello"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", plain, err)
	}
	if _, err := zklock.SetFenced(ctx, conn, plain, []byte("x"), 5); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("SetFenced(znode written without a token) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}
	if _, _, err := zklock.GetFenced(ctx, conn, plain); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("GetFenced(znode written without a token) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}
	if b, _, err := conn.Get(plain); string(b) != "hello" || err != nil {
		t.Errorf("plain data after the refused SetFenced = %q, %v; want it untouched", b, err)
	}
}

// testZKConcurrent has writers with the tokens of several real grants
// write one znode at once, over three connections, starting from a
// missing znode so that the creation races too.
func testZKConcurrent(t *testing.T, c *cluster.Cluster) {
	conns := []*zk.Conn{
		testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil),
		testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil),
		testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil),
	}
	root := zkRoot(t, conns[0])
	l := newZKLocker(t, c.Endpoints(), root+"/locks", "writers")
	ctx := testutil.Context(t, 60*time.Second)
	path := root + "/data"

	const writers, writes = 6, 15
	tokens := make([]fencing.Token, writers)
	for i := range tokens {
		lease, err := l.Acquire(ctx, "config")
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		tokens[i] = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	}
	acc, _ := mixedWriters(t, tokens, writes, func(writer int, token fencing.Token) (int64, error) {
		stat, err := zklock.SetFenced(ctx, conns[writer%len(conns)], path, []byte(fmt.Sprintf("writer %d", writer)), token)
		if err != nil {
			return 0, err
		}
		return stat.Mzxid, nil
	})

	if _, err := conns[0].Sync(path); err != nil {
		t.Fatalf("Sync(%s) = %v", path, err)
	}
	maxToken := tokens[writers-1]
	if b, tok, err := zklock.GetFenced(ctx, conns[0], path); tok != maxToken || err != nil {
		t.Errorf("GetFenced() = %q, %d, %v; want the highest token %d", b, tok, err, maxToken)
	}
	// Every accepted write, and nothing else, changed the znode: its
	// version counts them (the creation sets version 1 in the same multi).
	if _, stat, err := conns[0].Get(path); err != nil || int(stat.Version) != len(acc) {
		t.Errorf("znode version = %v, %v; want %d, one per accepted write", stat, err, len(acc))
	}
}
