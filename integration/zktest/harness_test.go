package zktest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// sessionTimeout is what test Lockers ask for: short, so that expiry and
// partition tests take seconds. The test ensembles run with tickTime 200ms,
// so the server accepts it as is. zklock stops trusting a session when no
// reply has come for half of it, so 4s lets a loaded machine take 2s to
// answer.
const sessionTimeout = 4 * time.Second

// startEnsemble starts a 3-server ZooKeeper ensemble for t.
func startEnsemble(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// uniqueRoot returns a root znode no other test uses.
func uniqueRoot(t *testing.T) string {
	t.Helper()
	return "/zktest-" + randHex(4)
}

// sessions remembers the session id and password of every handshake seen
// by the connections it dialled, so that a test can end a session from
// another connection the way the server does when it expires it.
type sessions struct {
	mu    sync.Mutex
	creds map[int64][]byte
}

func newSessions() *sessions { return &sessions{creds: map[int64][]byte{}} }

// dialer returns a zk.Dialer whose connections report handshakes to s.
func (s *sessions) dialer() zk.Dialer { return s.dialerVia(net.DialTimeout) }

// dialerVia is dialer with connections made by dial.
func (s *sessions) dialerVia(dial zk.Dialer) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, s: s}, nil
	}
}

func (s *sessions) password(id int64) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.creds[id]
	return p, ok
}

// sniffConn reads the connect response, the first packet the server sends:
// int32 length, int32 protocolVersion, int32 timeOut, int64 sessionId,
// int32 password length, password.
type sniffConn struct {
	net.Conn
	s    *sessions
	buf  []byte
	done bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			total := 4 + int(binary.BigEndian.Uint32(c.buf[:4]))
			if len(c.buf) >= total {
				c.done = true
				body := c.buf[4:total]
				if len(body) >= 20 {
					id := int64(binary.BigEndian.Uint64(body[8:16]))
					pl := int(binary.BigEndian.Uint32(body[16:20]))
					if id != 0 && len(body) >= 20+pl {
						c.s.mu.Lock()
						c.s.creds[id] = slices.Clone(body[20 : 20+pl])
						c.s.mu.Unlock()
					}
				}
				c.buf = nil
			}
		}
	}
	return n, err
}

// closeSession ends session id from a new connection to server: it
// attaches to the session with its password and sends closeSession, which
// is what the server does itself when the session times out (the session's
// ephemeral znodes are deleted and its connections are closed).
func closeSession(ctx context.Context, server string, id int64, passwd []byte) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	// connect request: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd; then the readOnly flag.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(sessionTimeout/time.Millisecond))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	req = append(req, 0)
	if err := writePacket(c, req); err != nil {
		return err
	}
	resp, err := readPacket(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 {
		return fmt.Errorf("short connect response (%d bytes)", len(resp))
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != id {
		return fmt.Errorf("session 0x%x: server answered with session 0x%x: %w", id, got, errSessionUnknown)
	}
	// closeSession: xid 1, type -11.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xfffffff5)) // -11
	if err := writePacket(c, closeReq); err != nil {
		return err
	}
	resp, err = readPacket(c)
	if err != nil {
		return fmt.Errorf("close response: %w", err)
	}
	if len(resp) < 16 {
		return fmt.Errorf("short close response (%d bytes)", len(resp))
	}
	if code := int32(binary.BigEndian.Uint32(resp[12:16])); code != 0 {
		return fmt.Errorf("closeSession: error code %d", code)
	}
	return nil
}

// errSessionUnknown is closeSession's error when the server refuses to
// reattach the session: the ensemble no longer knows it.
var errSessionUnknown = errors.New("the server no longer knows the session")

func writePacket(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readPacket(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

// admin is a plain go-zookeeper connection for a test to inspect and
// change the tree behind the Lockers' backs.
type admin struct {
	conn    *zk.Conn
	barrier func(t testing.TB)
}

// newAdmin returns an admin connection to servers with a live session.
func newAdmin(t *testing.T, servers []string) *admin {
	t.Helper()
	return adminOn(t, testutil.ZKConn(t, servers, 10*time.Second, nil))
}

// adminOn returns an admin on conn, which has a session.
func adminOn(t *testing.T, conn *zk.Conn) *admin {
	t.Helper()
	return &admin{conn: conn, barrier: testutil.ZKReadBarrier(t, conn)}
}

// sync makes a read after it see every write the servers had answered
// before it (a grant's create, answered once its own server applied it),
// through testutil.ZKReadBarrier: a sync request is no such barrier on the
// leader. Seen in TestCancelledCalls under load: a marker whose delete had
// been answered 0.7ms earlier was still listed after a sync, in 3 of 8
// runs. path only names what is about to be read.
func (a *admin) sync(t *testing.T, path string) {
	t.Helper()
	a.barrier(t)
}

// records returns the lock znodes of name under root.
func (a *admin) records(t *testing.T, root, name string) []string {
	t.Helper()
	// The admin's server may not have applied what another client's
	// server just did (a Close's deletes): catch up with the leader first.
	a.sync(t, root)
	kids, _, err := a.conn.Children(root + "/" + name)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatalf("Children(%s/%s) = %v", root, name, err)
	}
	var out []string
	for _, k := range kids {
		// Lock-delay markers ("~delay~<prefix>", see zklock's package
		// documentation) are not records: zklock's listings ignore them.
		// Records of a Curator layout begin with Curator's "_c_".
		if strings.HasPrefix(k, "~") && !strings.HasPrefix(k, "~delay~") || strings.HasPrefix(k, "_c_") {
			out = append(out, k)
		}
	}
	return out
}

// ephemerals counts the znodes under root owned by session id.
func (a *admin) ephemerals(t *testing.T, root string, id int64) int {
	t.Helper()
	kids, _, err := a.conn.Children(root)
	if errors.Is(err, zk.ErrNoNode) {
		return 0
	}
	if err != nil {
		t.Fatalf("Children(%s) = %v", root, err)
	}
	n := 0
	for _, k := range kids {
		p := root + "/" + k
		ok, st, err := a.conn.Exists(p)
		if err != nil {
			t.Fatalf("Exists(%s) = %v", p, err)
		}
		if !ok {
			continue
		}
		if st.EphemeralOwner == id {
			n++
		}
		if st.NumChildren > 0 {
			n += a.ephemerals(t, p, id)
		}
	}
	return n
}

// harness implements locktest.Harness, SessionExpirer, SessionStaller and
// RecordLister on one ensemble.
type harness struct {
	servers []string
	root    string
	admin   *admin
	sess    *sessions
	opts    []zklock.Option // given to every Locker of dial, after the harness's own

	mu    sync.Mutex
	gates map[*zklock.Locker]*testutil.Gate // the Lockers from NewLocker
}

func newHarness(t *testing.T, servers []string) *harness {
	t.Helper()
	return &harness{servers: servers, root: uniqueRoot(t), admin: newAdmin(t, servers), sess: newSessions(), gates: map[*zklock.Locker]*testutil.Gate{}}
}

func (h *harness) dial(t *testing.T, opts ...zklock.Option) *zklock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []zklock.Option{zklock.WithRoot(h.root), zklock.WithSessionTimeout(sessionTimeout), zklock.WithDialer(h.sess.dialer())}
	l, err := zklock.Dial(ctx, h.servers, append(append(base, h.opts...), opts...)...)
	if err != nil {
		t.Fatalf("zklock.Dial(%v) = %v", h.servers, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (h *harness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	g := new(testutil.Gate)
	l := h.dial(t, zklock.WithIdentity(identity), zklock.WithDialer(h.sess.dialerVia(g.ZKDialer())))
	h.mu.Lock()
	h.gates[l] = g
	h.mu.Unlock()
	return l
}

// StallSession cuts the Locker off from every server until the server
// has expired its session, as it does when a client goes silent: the
// session's ephemeral znodes are gone.
func (h *harness) StallSession(t *testing.T, l lock.Locker) {
	t.Helper()
	zl := l.(*zklock.Locker)
	h.mu.Lock()
	g := h.gates[zl]
	h.mu.Unlock()
	if g == nil {
		t.Fatalf("StallSession: the Locker was not made by NewLocker")
	}
	id := sessionID(zl)
	if id == 0 {
		t.Fatalf("StallSession: the Locker has no session")
	}
	g.Cut()
	defer g.Heal()
	deadline := time.Now().Add(10 * sessionTimeout)
	for h.admin.ephemerals(t, h.root, id) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("StallSession: session 0x%x still owns znodes %v after it was cut off", id, 10*sessionTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	expireSession(t, h.sess, h.servers, l.(*zklock.Locker))
}

func (h *harness) Records(t *testing.T, name string) []string {
	t.Helper()
	return h.admin.records(t, h.root, name)
}

// expireSession ends zl's session from the server side and checks that
// the server no longer knows it.
func expireSession(t *testing.T, s *sessions, servers []string, zl *zklock.Locker) {
	t.Helper()
	id := sessionID(zl)
	if id == 0 {
		return
	}
	passwd, ok := s.password(id)
	if !ok {
		t.Fatalf("ExpireSession: no password recorded for session 0x%x", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The server may close the connection before its answer to the close
	// request is read (EOF), so a failed attempt is followed by the next
	// server: one that refuses to reattach the session proves it is gone.
	var errs []error
	for _, srv := range servers {
		err := closeSession(ctx, srv, id, passwd)
		if err == nil || (len(errs) > 0 && errors.Is(err, errSessionUnknown)) {
			return
		}
		errs = append(errs, fmt.Errorf("%s: %w", srv, err))
	}
	t.Fatalf("ExpireSession(0x%x): %v", id, errors.Join(errs...))
}

// cluster0 starts an ensemble for a benchmark.
func cluster0(b *testing.B) *cluster.Cluster {
	b.Helper()
	return cluster.FromEnv(b).Start(b, cluster.ZooKeeper)
}

// sessionID returns the session id of a *zklock.Locker (the session it
// trusts now, 0 while none) or of a *zklock.Lease (the session owning its
// znode).
func sessionID(v any) int64 {
	switch x := v.(type) {
	case *zklock.Locker:
		return x.SessionID()
	case *zklock.Lease:
		return x.SessionID()
	}
	panic(fmt.Sprintf("sessionID(%T): want a *zklock.Locker or *zklock.Lease", v))
}
