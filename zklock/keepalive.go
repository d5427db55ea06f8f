package zklock

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
)

// keepalive tracks, across the connections of one zk.Conn, the send time
// of the latest sync (or handshake) the server answered and the negotiated
// session timeout (docs/design/zookeeper-loss.md).
type keepalive struct {
	clk     clock.Clock
	heard   atomic.Int64 // unix nanoseconds; 0 until a handshake
	timeout atomic.Int64 // negotiated session timeout, nanoseconds

	// The hooks, if set, are called from go-zookeeper's reading goroutine
	// and must not block: when heard advances, when the negotiated timeout
	// changes, after a handshake that brings a session, and for
	// trackedConn.watchFlag.
	onHeard                    func()
	onTimeout                  func(time.Duration)
	onConnect                  func()
	wantsChange, wantsChildren func(path []byte) bool
}

// deadline returns the moment the leader may expire the session, of
// timeout, less margin(timeout), and whether the leader was heard from yet.
func (ka *keepalive) deadline(timeout time.Duration, margin func(time.Duration) time.Duration) (time.Time, bool) {
	h := ka.heard.Load()
	if h == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, h).Add(timeout - margin(timeout)), true
}

// negotiated returns the session timeout of the latest handshake, or 0.
func (ka *keepalive) negotiated() time.Duration { return time.Duration(ka.timeout.Load()) }

// markHeard records that the leader answered a request sent at sent.
func (ka *keepalive) markHeard(sent time.Time) {
	ns := sent.UnixNano()
	for {
		old := ka.heard.Load()
		if ns <= old {
			return
		}
		if ka.heard.CompareAndSwap(old, ns) {
			break
		}
	}
	if ka.onHeard != nil {
		ka.onHeard()
	}
}

// wrap returns a dialer whose connections report to ka.
func (ka *keepalive) wrap(next zk.Dialer) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := next(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &trackedConn{Conn: c, ka: ka}, nil
	}
}

// trackedConn frames both directions of one connection. go-zookeeper has
// one writer and one reader at a time, concurrent with each other.
type trackedConn struct {
	net.Conn
	ka *keepalive

	mu   sync.Mutex
	sent []request // requests not answered yet, oldest first

	w frames // guarded by go-zookeeper's single writer
	r frames // guarded by go-zookeeper's single reader

	requestSent bool   // writer side: the connect request went out
	wbuf        []byte // writer side: a request changed by Write

	handshakeDone bool // reader side

	rb readBuf // reader side
}

// readBuf is what the last read brought that go-zookeeper has not taken
// yet (buf[pos:end]), and the error that read returned.
type readBuf struct {
	buf      []byte
	pos, end int
	err      error
}

// readBufSize is how much one read asks for: go-zookeeper reads every
// packet in two, which the buffer serves from one system call.
const readBufSize = 4096

// request is what trackedConn remembers of a request until its reply.
type request struct {
	sent     time.Time
	confirms bool // its reply shows that the leader heard of the session
}

func (c *trackedConn) Write(p []byte) (int, error) {
	now := c.ka.clk.Now() // before the write: the server cannot have the packet earlier
	first := !c.requestSent
	out := p
	if c.requestSent && c.w.nhdr == 0 && c.watchFlag(p) {
		// p is not ours to change (io.Writer): send a copy.
		c.wbuf = append(c.wbuf[:0], p...)
		c.wbuf[len(c.wbuf)-1] = 1
		out = c.wbuf
	}
	c.requestSent = true // the first packet is the connect request
	n, err := c.Conn.Write(out)
	c.w.feed(p[:n], func(body []byte) {
		// A request's body begins with its xid and type.
		confirms := first || len(body) >= 8 && int32(binary.BigEndian.Uint32(body[4:8])) == opSync
		first = false
		c.mu.Lock()
		c.sent = append(c.sent, request{now, confirms})
		c.mu.Unlock()
	})
	if err != nil {
		// go-zookeeper v1.0.4 must never see a write fail: it could hang
		// (go-zookeeper/zk#163). Closed, the connection fails on reading.
		_ = c.Conn.Close()
		return len(p), nil
	}
	return n, nil
}

func (c *trackedConn) Read(p []byte) (int, error) {
	if c.rb.pos == c.rb.end {
		if err := c.rb.err; err != nil {
			c.rb.err = nil
			return 0, err
		}
		if len(p) >= readBufSize {
			n, err := c.Conn.Read(p)
			c.r.feed(p[:n], c.received)
			return n, err
		}
		if c.rb.buf == nil {
			c.rb.buf = make([]byte, readBufSize)
		}
		n, err := c.Conn.Read(c.rb.buf)
		c.rb.pos, c.rb.end = 0, n
		if n == 0 {
			return 0, err
		}
		c.rb.err = err
	}
	n := copy(p, c.rb.buf[c.rb.pos:c.rb.end])
	c.rb.pos += n
	c.r.feed(p[:n], c.received)
	return n, nil
}

// watchFlag reports whether the request p, one whole packet, goes with
// the watch flag set: isDeletionWatch, or a waiter waits on its path.
func (c *trackedConn) watchFlag(p []byte) bool {
	if isDeletionWatch(p) {
		return true
	}
	if path, ok := watchRequestPath(p, opGetChildren2); ok {
		return c.ka.wantsChildren != nil && c.ka.wantsChildren(path)
	}
	path, ok := watchRequestPath(p, opExists)
	return ok && c.ka.wantsChange != nil && c.ka.wantsChange(path)
}

// received handles one packet from the server (up to frameKeep bytes).
func (c *trackedConn) received(body []byte) {
	if !c.handshakeDone {
		c.handshakeDone = true
		// connect response: protocolVersion int32, timeOut int32,
		// sessionID int64, passwd buffer.
		sent, ok := c.pop()
		if !ok || len(body) < 16 {
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(body[4:8]))) * time.Millisecond
		sid := int64(binary.BigEndian.Uint64(body[8:16]))
		if sid == 0 { // the session expired; no new one yet
			return
		}
		if old := c.ka.timeout.Swap(int64(timeout)); old != int64(timeout) && c.ka.onTimeout != nil {
			c.ka.onTimeout(timeout)
		}
		c.ka.markHeard(sent.sent)
		if c.ka.onConnect != nil {
			c.ka.onConnect()
		}
		return
	}
	if len(body) >= 4 && int32(binary.BigEndian.Uint32(body[:4])) == -1 {
		return // a watch notification answers no request
	}
	// A reply's header: xid int32, zxid int64, err int32.
	if req, ok := c.pop(); ok && req.confirms && len(body) >= 16 && binary.BigEndian.Uint32(body[12:16]) == 0 {
		c.ka.markHeard(req.sent)
	}
}

func (c *trackedConn) pop() (request, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sent) == 0 {
		return request{}, false
	}
	t := c.sent[0]
	c.sent = c.sent[1:]
	return t, true
}

// frameKeep is how much of each packet frames keeps: a connect response.
const frameKeep = 64

// frames splits a byte stream into ZooKeeper's length-prefixed packets.
type frames struct {
	hdr  [4]byte
	nhdr int
	need int
	body []byte
}

func (f *frames) feed(p []byte, done func(body []byte)) {
	for len(p) > 0 {
		if f.nhdr < 4 {
			k := copy(f.hdr[f.nhdr:], p)
			f.nhdr += k
			p = p[k:]
			if f.nhdr == 4 {
				f.need = int(binary.BigEndian.Uint32(f.hdr[:]))
				f.body = f.body[:0]
				if f.need == 0 {
					f.nhdr = 0
					done(nil)
				}
			}
			continue
		}
		k := min(len(p), f.need)
		if keep := frameKeep - len(f.body); keep > 0 {
			f.body = append(f.body, p[:min(k, keep)]...)
		}
		f.need -= k
		p = p[k:]
		if f.need == 0 {
			f.nhdr = 0
			done(f.body)
		}
	}
}

// run calls sync every interval() while the connection has a session,
// answered or not, with at most keepaliveFraction outstanding.
func (ka *keepalive) run(g *group, conn link, sync func(), interval func() time.Duration) {
	slots := make(chan struct{}, keepaliveFraction)
	timer := ka.clk.NewTimer(interval())
	defer timer.Stop()
	for {
		select {
		case <-g.closing:
			return
		case <-timer.C():
		}
		timer.Reset(interval())
		if conn.State() != zk.StateHasSession {
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // a timeout's worth is outstanding: the server is not answering
		}
		g.spawn(func() {
			defer func() { <-slots }()
			sync()
		})
	}
}

// Request codes of go-zookeeper's requests that trackedConn recognizes.
const (
	opSync         = 9  // Sync
	opExists       = 3  // Exists, ExistsW
	opGetChildren2 = 12 // Children, ChildrenW
)

// isDeletionWatch reports whether p is one whole getChildren2 request,
// without the watch flag, for a lock znode: the Locker's deletion watch
// (docs/design/zookeeper.md, "Watches").
func isDeletionWatch(p []byte) bool {
	path, ok := watchRequestPath(p, opGetChildren2)
	return ok && isLockPath(path)
}

// watchRequestPath returns the path of p if p is one whole request of
// type op, a path and a clear watch flag.
func watchRequestPath(p []byte, op int32) ([]byte, bool) {
	const head = 4 + 4 + 4 + 4 // packet length, xid, type, path length
	if len(p) < head+2 || int(binary.BigEndian.Uint32(p[0:4])) != len(p)-4 ||
		int32(binary.BigEndian.Uint32(p[8:12])) != op {
		return nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(p[12:16])))
	if n != len(p)-head-1 || p[len(p)-1] != 0 {
		return nil, false
	}
	return p[head : head+n], true
}

// isLockPath reports whether path's last segment is a lock znode's name.
func isLockPath(path []byte) bool {
	i := bytes.LastIndexByte(path, '/')
	if i < 0 {
		return false
	}
	_, ok := parseChild(string(path[i+1:]))
	return ok
}
