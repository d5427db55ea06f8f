package zklock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
)

func TestKeepaliveDeadline(t *testing.T) {
	half := func(d time.Duration) time.Duration { return d / 2 }
	ka := &keepalive{clk: clock.NewFake(epoch0)}
	if d, ok := ka.deadline(4*time.Second, half); ok || !d.IsZero() {
		t.Fatalf("deadline() before a handshake = %v, %t; want zero, false", d, ok)
	}
	handshake(ka, epoch0, 4*time.Second, 1)
	tests := []struct {
		name  string
		heard time.Time // markHeard's argument; zero: none
		want  time.Time
	}{
		{"the handshake", time.Time{}, epoch0.Add(2 * time.Second)},
		{"an answer 1ns later", epoch0.Add(1), epoch0.Add(2*time.Second + 1)},
		{"an older answer, out of order", epoch0, epoch0.Add(2*time.Second + 1)},
		{"the same answer again", epoch0.Add(1), epoch0.Add(2*time.Second + 1)},
		{"a much later answer", epoch0.Add(time.Hour), epoch0.Add(time.Hour + 2*time.Second)},
		{"a late answer to a request of an old connection", epoch0.Add(time.Minute), epoch0.Add(time.Hour + 2*time.Second)},
	}
	for _, tt := range tests {
		if !tt.heard.IsZero() {
			ka.markHeard(tt.heard)
		}
		d, ok := ka.deadline(4*time.Second, half)
		if !ok || !d.Equal(tt.want) {
			t.Errorf("%s: deadline() = %v, %t; want %v", tt.name, d.Sub(epoch0), ok, tt.want.Sub(epoch0))
		}
	}
}

// connectResponse is the body of a ZooKeeper connect response.
func connectResponse(timeout time.Duration, sid int64) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0) // protocol version
	b = binary.BigEndian.AppendUint32(b, uint32(timeout/time.Millisecond))
	b = binary.BigEndian.AppendUint64(b, uint64(sid))
	return binary.BigEndian.AppendUint32(b, 16) // password length; the password is not read
}

// frame prefixes body with its length, as ZooKeeper's packets are.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// scriptConn is a net.Conn whose reads return what the test queued and
// whose writes are swallowed.
type scriptConn struct {
	net.Conn
	mu    sync.Mutex
	reads [][]byte
}

func (c *scriptConn) Write(p []byte) (int, error) { return len(p), nil }

func (c *scriptConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.reads[0]
	n := copy(p, b)
	if n == len(b) {
		c.reads = c.reads[1:]
	} else {
		c.reads[0] = b[n:]
	}
	return n, nil
}

func (c *scriptConn) queue(b []byte) {
	c.mu.Lock()
	c.reads = append(c.reads, b)
	c.mu.Unlock()
}

// TestTrackedConn runs a handshake and requests through the dialer
// keepalive wraps: send times come from the clock, answers match requests
// in order, watch notifications answer nothing, and a handshake with a new
// timeout is reported once.
func TestTrackedConn(t *testing.T) {
	clk := clock.NewFake(epoch0)
	var heard, renegotiated atomic.Int32
	var lastTimeout atomic.Int64
	ka := &keepalive{clk: clk}
	ka.onHeard = func() { heard.Add(1) }
	ka.onTimeout = func(d time.Duration) { renegotiated.Add(1); lastTimeout.Store(int64(d)) }
	var connects atomic.Int32
	ka.onConnect = func() { connects.Add(1) }
	sc := &scriptConn{}
	dial := ka.wrap(func(string, string, time.Duration) (net.Conn, error) { return sc, nil })
	c, err := dial("tcp", "x:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	write := func(body []byte) {
		if _, err := c.Write(frame(body)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(b []byte) {
		sc.queue(b)
		for sc.pending() || c.(*trackedConn).buffered() > 0 {
			if _, err := c.Read(buf[:7]); err != nil { // odd sizes split the packets
				t.Fatal(err)
			}
		}
	}

	write(make([]byte, 40)) // connect request at 0
	clk.Advance(time.Second)
	read(frame(connectResponse(6*time.Second, 0x55)))
	if got := ka.negotiated(); got != 6*time.Second {
		t.Errorf("negotiated() = %v; want 6s", got)
	}
	if connects.Load() != 1 || renegotiated.Load() != 1 || lastTimeout.Load() != int64(6*time.Second) {
		t.Errorf("after the handshake: %d connects, %d timeout reports (last %v); want 1, 1, 6s",
			connects.Load(), renegotiated.Load(), time.Duration(lastTimeout.Load()))
	}
	if d, _ := ka.deadline(ka.negotiated(), func(d time.Duration) time.Duration { return d / 2 }); !d.Equal(epoch0.Add(3 * time.Second)) {
		t.Errorf("deadline after the handshake = %v; want 3s (sent at 0, timeout 6s, margin 3s)", d.Sub(epoch0))
	}

	// A sync at 2s, a read at 3s and a sync at 3s; a watch notification,
	// then the answers: the first sync's moves heard to 2s, the read's
	// does not (a follower answers reads by itself), and neither does the
	// second sync's, an error.
	clk.Advance(time.Second)
	write([]byte{0, 0, 0, 1, 0, 0, 0, opSync})
	clk.Advance(time.Second)
	write([]byte{0, 0, 0, 2, 0, 0, 0, 4})
	write([]byte{0, 0, 0, 3, 0, 0, 0, opSync})
	notification := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	read(append(frame(notification), frame([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0})...))
	if got := time.Unix(0, ka.heard.Load()); !got.Equal(epoch0.Add(2 * time.Second)) {
		t.Errorf("heard after the sync's answer = %v; want 2s (the notification answers nothing)", got.Sub(epoch0))
	}
	read(frame([]byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0}))
	read(frame([]byte{0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0x90}))
	if got := time.Unix(0, ka.heard.Load()); !got.Equal(epoch0.Add(2 * time.Second)) {
		t.Errorf("heard after the read's answer and a failed sync = %v; want 2s", got.Sub(epoch0))
	}
	if heard.Load() != 2 {
		t.Errorf("onHeard called %d times; want 2 (handshake, the first sync)", heard.Load())
	}

	// A new connection: same timeout (not reported again), then an expired
	// session (no session id, no answer recorded), then a new timeout.
	for i, tc := range []struct {
		timeout time.Duration
		sid     int64
		reports int32
		heard   time.Duration
	}{
		{6 * time.Second, 0x55, 1, 4 * time.Second},
		{6 * time.Second, 0, 1, 4 * time.Second},
		{2 * time.Second, 0x56, 2, 6 * time.Second},
	} {
		c, _ = dial("tcp", "x:1", time.Second)
		clk.Advance(time.Second)
		write(make([]byte, 40))
		read(frame(connectResponse(tc.timeout, tc.sid)))
		if renegotiated.Load() != tc.reports {
			t.Errorf("handshake %d (session 0x%x): %d timeout reports; want %d", i, tc.sid, renegotiated.Load(), tc.reports)
		}
		if got := time.Unix(0, ka.heard.Load()).Sub(epoch0); got != tc.heard {
			t.Errorf("handshake %d: heard at %v; want %v", i, got, tc.heard)
		}
	}
	// Handshakes with a session: the first, 0x55 again and 0x56.
	if connects.Load() != 3 {
		t.Errorf("after four handshakes, one without a session: onConnect called %d times; want 3", connects.Load())
	}
}

// TestTrackedConnRead checks that go-zookeeper's reads (a packet's length,
// then the rest) get the bytes as they came, from one read of the
// connection for packets that arrived together, that a large read goes
// straight through, and that an error which came with data follows it.
func TestTrackedConnRead(t *testing.T) {
	sc := &countingReads{}
	ka := &keepalive{clk: clock.NewFake(epoch0)}
	c := &trackedConn{Conn: sc, ka: ka}
	var stream []byte
	for i := range 5 {
		stream = append(stream, frame(bytes.Repeat([]byte{byte(i)}, 10+i*100))...)
	}
	sc.data, sc.err = stream, io.EOF
	var got []byte
	for {
		hdr := make([]byte, 4)
		if _, err := io.ReadFull(c, hdr); err != nil {
			if !errors.Is(err, io.EOF) || len(got) != len(stream) {
				t.Fatalf("after %d of %d bytes: reading a length: %v; want io.EOF at the end", len(got), len(stream), err)
			}
			break
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr))
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatalf("after %d bytes: reading a body of %d bytes: %v", len(got), len(body), err)
		}
		got = append(append(got, hdr...), body...)
	}
	if !bytes.Equal(got, stream) {
		t.Errorf("read %d bytes that differ from the %d sent", len(got), len(stream))
	}
	if sc.reads != 1 {
		t.Errorf("%d reads of the connection for %d bytes that came together; want 1", sc.reads, len(stream))
	}

	big := bytes.Repeat([]byte{7}, 3*readBufSize)
	sc.data, sc.err, sc.reads = big, nil, 0
	p := make([]byte, len(big))
	if n, err := c.Read(p); n != len(big) || err != nil || !bytes.Equal(p, big) {
		t.Errorf("Read of %d bytes = %d, %v; want all of them, nil", len(p), n, err)
	}
	if sc.reads != 1 || c.buffered() != 0 {
		t.Errorf("a large read: %d reads of the connection, %d bytes kept; want 1, 0", sc.reads, c.buffered())
	}
}

// countingReads is a net.Conn that returns data, up to what each read asks
// for, with err along with its last byte, and counts the reads.
type countingReads struct {
	net.Conn
	data  []byte
	err   error
	reads int
}

func (c *countingReads) Read(p []byte) (int, error) {
	c.reads++
	n := copy(p, c.data)
	c.data = c.data[n:]
	if len(c.data) == 0 {
		err := c.err
		c.err = nil
		return n, err
	}
	return n, nil
}

// recordConn is a net.Conn that keeps a copy of every write.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

// childrenRequest is a whole getChildren2 request packet for path.
func childrenRequest(xid int32, path string, watch bool) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, opGetChildren2)
	b = binary.BigEndian.AppendUint32(b, uint32(len(path)))
	b = append(b, path...)
	flag := byte(0)
	if watch {
		flag = 1
	}
	return frame(append(b, flag))
}

// TestTrackedConnDeletionWatch checks which requests trackedConn sends
// with the watch flag set: a child listing of a lock znode without it, and
// nothing else; and that the caller's buffer is left as it was.
func TestTrackedConnDeletionWatch(t *testing.T) {
	const lockZnode = "/fencelock/a/b/~0123456789abcdef0123456789abcdef~0000000042"
	watched := func(p []byte) bool { return p[len(p)-1] == 1 }
	tests := []struct {
		name string
		req  []byte
		want bool // sent with the flag set
	}{
		{"listing of a lock znode", childrenRequest(7, lockZnode, false), true},
		{"listing of a shared lock znode", childrenRequest(7, "/r/n/~0123456789abcdef0123456789abcdef~r~0000000001", false), true},
		{"listing of a semaphore znode", childrenRequest(7, "/r/n/~0123456789abcdef0123456789abcdef~s12~0000000001", false), true},
		{"watched listing of a lock znode", childrenRequest(7, lockZnode, true), true},
		{"listing of a lock's parent", childrenRequest(7, "/fencelock/a/b", false), false},
		{"listing of a name that looks almost like a lock znode", childrenRequest(7, "/r/~0123456789abcdef0123456789abcdeg~0000000042", false), false},
		{"listing of the root", childrenRequest(7, "/", false), false},
		{"exists of a lock znode", func() []byte {
			p := childrenRequest(7, lockZnode, false)
			binary.BigEndian.PutUint32(p[8:12], 3) // exists
			return p
		}(), false},
		{"a listing cut short", childrenRequest(7, lockZnode, false)[:40], false},
		{"two packets in one write", append(childrenRequest(7, lockZnode, false), childrenRequest(8, lockZnode, false)...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordConn{}
			ka := &keepalive{clk: clock.NewFake(epoch0)}
			c, err := ka.wrap(func(string, string, time.Duration) (net.Conn, error) { return rc, nil })("tcp", "x:1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// The connect request is never changed, whatever it looks like.
			if _, err := c.Write(childrenRequest(7, lockZnode, false)); err != nil {
				t.Fatal(err)
			}
			orig := append([]byte(nil), tt.req...)
			if _, err := c.Write(tt.req); err != nil {
				t.Fatal(err)
			}
			if len(rc.writes) != 2 {
				t.Fatalf("%d writes reached the connection; want 2", len(rc.writes))
			}
			if watched(rc.writes[0]) {
				t.Errorf("the connect request was sent with its last byte set")
			}
			got := rc.writes[1]
			if !bytes.Equal(tt.req, orig) {
				t.Errorf("Write changed the caller's buffer")
			}
			if len(got) != len(orig) || !bytes.Equal(got[:len(got)-1], orig[:len(orig)-1]) {
				t.Fatalf("sent %x; want %x but for the last byte", got, orig)
			}
			if watched(got) != tt.want {
				t.Errorf("sent with the watch flag %t; want %t", watched(got), tt.want)
			}
		})
	}
}

func (c *scriptConn) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reads) > 0
}

// TestKeepaliveRun sends a request every interval while the connection has
// a session, and keeps at most keepaliveFraction unanswered.
func TestKeepaliveRun(t *testing.T) {
	clk := clock.NewFake(epoch0)
	ka := &keepalive{clk: clk}
	link := &fakeLink{}
	g := newGroup()
	var sent atomic.Int32
	answer := make(chan struct{})
	const every = 250 * time.Millisecond
	g.spawn(func() {
		ka.run(g, link, func() { sent.Add(1); <-answer }, func() time.Duration { return every })
	})
	defer func() {
		close(answer)
		close(g.closing)
		g.wg.Wait()
	}()
	tick := func() {
		clk.WaitTimers(1)
		clk.Advance(every)
	}
	waitSent := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for sent.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d keepalives sent; want %d", sent.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	tick()
	tick()
	clk.WaitTimers(1)
	if sent.Load() != 0 {
		t.Fatalf("%d keepalives sent without a session; want 0", sent.Load())
	}
	link.set(zk.StateHasSession, 1)
	for i := int32(1); i <= keepaliveFraction+3; i++ {
		tick()
		waitSent(min(i, keepaliveFraction))
	}
	clk.WaitTimers(1)
	time.Sleep(10 * time.Millisecond)
	if got := sent.Load(); got != keepaliveFraction {
		t.Fatalf("%d keepalives outstanding; want at most %d", got, keepaliveFraction)
	}
	answer <- struct{}{} // one answered: one slot free
	deadline := time.Now().Add(5 * time.Second)
	for sent.Load() == keepaliveFraction {
		if time.Now().After(deadline) {
			t.Fatal("no keepalive after an answer freed a slot")
		}
		tick()
	}
}

// serveZK answers one client connection as a ZooKeeper server that grants
// session 0x55 and says yes to every request, until the connection fails.
func serveZK(c net.Conn) {
	defer c.Close()
	read := func() ([]byte, error) {
		var n [4]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return nil, err
		}
		body := make([]byte, binary.BigEndian.Uint32(n[:]))
		_, err := io.ReadFull(c, body)
		return body, err
	}
	if _, err := read(); err != nil { // connect request
		return
	}
	if _, err := c.Write(frame(append(connectResponse(4*time.Second, 0x55), make([]byte, 16)...))); err != nil {
		return
	}
	for {
		req, err := read()
		if err != nil || len(req) < 4 {
			return
		}
		// reply header: the request's xid, zxid 1, error 0
		reply := binary.BigEndian.AppendUint64(append([]byte(nil), req[:4]...), 1)
		if _, err := c.Write(frame(binary.BigEndian.AppendUint32(reply, 0))); err != nil {
			return
		}
	}
}

// failingConn fails every write after the first (the connect request).
type failingConn struct {
	net.Conn
	writes int
}

func (c *failingConn) Write(p []byte) (int, error) {
	if c.writes++; c.writes > 1 {
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(p)
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// TestTrackedConnWriteFailure checks that a failed write does not stop
// go-zookeeper's connection loop for good (see trackedConn.Write): the
// second connection fails the write of the credentials go-zookeeper sends
// again first thing after the handshake, and the client must go on to a
// third connection and a session.
func TestTrackedConnWriteFailure(t *testing.T) {
	ka := &keepalive{clk: clock.Real()}
	var dials atomic.Int32
	firstServer := make(chan net.Conn, 1)
	dial := ka.wrap(func(string, string, time.Duration) (net.Conn, error) {
		client, server := net.Pipe()
		go serveZK(server)
		switch dials.Add(1) {
		case 1:
			firstServer <- server
		case 2:
			return &failingConn{Conn: client}, nil
		}
		return client, nil
	})
	sessions := make(chan struct{}, 8) // the callback, unlike the event channel, drops nothing
	onEvent := func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
			sessions <- struct{}{}
		}
	}
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 4*time.Second, zk.WithDialer(dial),
		zk.WithEventCallback(onEvent), zk.WithLogger(discardLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk.Connect() = %v", err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(10 * time.Second)
	waitSession := func(on int32) {
		t.Helper()
		for {
			select {
			case <-sessions:
				if dials.Load() >= on {
					return
				}
			case <-deadline:
				t.Fatalf("no session on connection %d (%d dialled, state %v); want one", on, dials.Load(), conn.State())
			}
		}
	}
	waitSession(1)
	if err := conn.AddAuth("digest", []byte("user:password")); err != nil {
		t.Fatalf("AddAuth() = %v", err)
	}
	(<-firstServer).Close()
	// The second connection has a session too before its write fails.
	waitSession(3)
}

// buffered returns how many bytes read from the connection wait for the
// reader.
func (c *trackedConn) buffered() int { return c.rb.end - c.rb.pos }
