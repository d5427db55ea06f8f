package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to one target and
// injects network faults between them. It is safe for concurrent use.
//
// Blackhole models a partition: connections stay open, nothing reaches the
// other side, and what was sent is held, as TCP would keep retransmitting
// it; Heal delivers it. Beyond one read buffer per direction, the bytes
// stay in the kernel's socket buffers, so senders eventually block.
type Proxy struct {
	target string
	ln     net.Listener

	mu         sync.Mutex
	blackholed bool
	healed     chan struct{} // closed by Heal; replaced by Blackhole
	delay      time.Duration
	conns      map[*proxyConn]struct{}
	closed     bool

	closing chan struct{} // closed by close
	wg      sync.WaitGroup

	accepted, resets                      atomic.Int64
	bytesUp, bytesDown, held, dialFailure atomic.Int64
}

// ProxyStats counts what a Proxy has done, so that tests can check that a
// fault really happened.
type ProxyStats struct {
	// Accepted is the number of client connections accepted so far.
	Accepted int
	// Active is the number of connections open now.
	Active int
	// BytesUp and BytesDown are the bytes delivered to the target and to
	// clients.
	BytesUp, BytesDown int64
	// HeldWhileBlackholed is the number of bytes held instead of
	// forwarded because of a blackhole: read from either side while it
	// was on, or read just before it began and stopped by it.
	HeldWhileBlackholed int64
	// Resets is the number of connections closed by ResetConns.
	Resets int
	// DialFailures is the number of connections closed because the target
	// could not be reached.
	DialFailures int
}

// proxyChunk is how much a connection reads from one side at a time.
const proxyChunk = 32 << 10

// NewProxy starts a proxy on 127.0.0.1 (a port chosen by the kernel) to
// target. It is closed, and its goroutines waited for, in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cluster: proxy to %s: %v", target, err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		healed:  make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
		closing: make(chan struct{}),
	}
	close(p.healed)
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Blackhole stops forwarding in both directions without closing any
// connection. New connections are accepted but not forwarded either (the
// target is not even dialed) until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blackholed {
		p.blackholed = true
		p.healed = make(chan struct{})
	}
}

// Heal resumes forwarding, delivering what was held first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blackholed {
		p.blackholed = false
		close(p.healed)
	}
}

// Blackholed reports whether the proxy is blackholed.
func (p *Proxy) Blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackholed
}

// SetDelay adds d of latency to every chunk forwarded from now on, in both
// directions; 0 removes it.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// ResetConns closes every current connection, on both sides, with a TCP
// reset. The proxy keeps accepting new ones.
func (p *Proxy) ResetConns() { p.resetConns(true) }

func (p *Proxy) resetConns(count bool) {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.abort()
		if count {
			p.resets.Add(1)
		}
	}
}

// Stats returns the counters.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	active := len(p.conns)
	p.mu.Unlock()
	return ProxyStats{
		Accepted:            int(p.accepted.Load()),
		Active:              active,
		BytesUp:             p.bytesUp.Load(),
		BytesDown:           p.bytesDown.Load(),
		HeldWhileBlackholed: p.held.Load(),
		Resets:              int(p.resets.Load()),
		DialFailures:        int(p.dialFailure.Load()),
	}
}

// close stops accepting, closes every connection and waits for all of the
// proxy's goroutines.
func (p *Proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.closing)
	p.mu.Unlock()
	p.ln.Close()
	p.resetConns(false)
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			// Out of file descriptors and the like: back off and retry,
			// unless the proxy is closing.
			select {
			case <-p.closing:
				return
			case <-time.After(10 * time.Millisecond):
				continue
			}
		}
		p.accepted.Add(1)
		pc := &proxyConn{p: p, client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go pc.run()
	}
}

// gate blocks while the proxy is blackholed. It returns false when the
// connection ends first. held, if not nil, is called before it blocks.
func (p *Proxy) gate(done <-chan struct{}, held func()) bool {
	for {
		p.mu.Lock()
		bh, healed := p.blackholed, p.healed
		p.mu.Unlock()
		if !bh {
			return true
		}
		if held != nil {
			held()
		}
		select {
		case <-healed:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	p      *Proxy
	client net.Conn

	mu       sync.Mutex
	upstream net.Conn // nil until dialed

	once sync.Once
	done chan struct{} // closed by abort
}

// abort closes both sides with a reset and wakes every wait.
func (c *proxyConn) abort() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		for _, conn := range []net.Conn{c.client, up} {
			if conn == nil {
				continue
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	})
}

func (c *proxyConn) run() {
	p := c.p
	defer p.wg.Done()
	defer func() {
		c.abort()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	// In a partition the target would not even see the handshake.
	if !p.gate(c.done, nil) {
		return
	}
	var d net.Dialer
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		p.dialFailure.Add(1)
		return
	}
	c.mu.Lock()
	c.upstream = up
	c.mu.Unlock()
	select {
	case <-c.done: // aborted while dialing
		up.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.pump(up, c.client, &p.bytesUp) }()
	go func() { defer wg.Done(); c.pump(c.client, up, &p.bytesDown) }()
	wg.Wait()
}

// pump copies src to dst through the gate and the delay. When src ends
// cleanly the end is passed on as a half close; any error ends the whole
// connection.
func (c *proxyConn) pump(dst, src net.Conn, counter *atomic.Int64) {
	p := c.p
	buf := make([]byte, proxyChunk)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			// A chunk read just before a blackhole began is held too,
			// and so is everything behind it: count it when the gate
			// stops it, once.
			counted := false
			held := func() {
				if !counted {
					counted = true
					p.held.Add(int64(n))
				}
			}
			if p.Blackholed() {
				held()
			}
			if !p.gate(c.done, held) {
				return
			}
			if d := p.currentDelay(); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-c.done:
					timer.Stop()
					return
				}
				// A blackhole that began during the delay holds the chunk.
				if !p.gate(c.done, held) {
					return
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				c.abort()
				return
			}
			counter.Add(int64(n))
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			c.abort()
			return
		}
	}
}

// Proxies is one Proxy per member of a cluster.
type Proxies struct {
	list []*Proxy
}

// NewProxies starts a proxy in front of every member of c. They are closed
// in t.Cleanup.
func NewProxies(t testing.TB, c *Cluster) *Proxies {
	t.Helper()
	ps := &Proxies{}
	for _, m := range c.Members {
		ps.list = append(ps.list, NewProxy(t, m.ClientAddr()))
	}
	return ps
}

// Endpoints returns the proxies' addresses, in member order.
func (ps *Proxies) Endpoints() []string {
	eps := make([]string, len(ps.list))
	for i, p := range ps.list {
		eps[i] = p.Addr()
	}
	return eps
}

// Proxy returns the proxy in front of member i.
func (ps *Proxies) Proxy(i int) *Proxy { return ps.list[i] }

// Len returns the number of proxies.
func (ps *Proxies) Len() int { return len(ps.list) }

// Blackhole blackholes every proxy.
func (ps *Proxies) Blackhole() {
	for _, p := range ps.list {
		p.Blackhole()
	}
}

// Heal heals every proxy.
func (ps *Proxies) Heal() {
	for _, p := range ps.list {
		p.Heal()
	}
}

// ResetConns resets every connection of every proxy.
func (ps *Proxies) ResetConns() {
	for _, p := range ps.list {
		p.ResetConns()
	}
}

// Stats returns the sum of every proxy's counters.
func (ps *Proxies) Stats() ProxyStats {
	var s ProxyStats
	for _, p := range ps.list {
		x := p.Stats()
		s.Accepted += x.Accepted
		s.Active += x.Active
		s.BytesUp += x.BytesUp
		s.BytesDown += x.BytesDown
		s.HeldWhileBlackholed += x.HeldWhileBlackholed
		s.Resets += x.Resets
		s.DialFailures += x.DialFailures
	}
	return s
}
