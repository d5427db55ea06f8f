package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line, on 127.0.0.1.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen() = %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// lineConn is a client connection that sends and reads lines.
type lineConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialLine(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("Dial(%s) = %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends line and returns the answer, or an error if none came
// within d.
func (l *lineConn) roundTrip(line string, d time.Duration) (string, error) {
	l.c.SetDeadline(time.Now().Add(d))
	defer l.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(l.c, line+"\n"); err != nil {
		return "", err
	}
	s, err := l.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func TestProxyForwards(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q; want 127.0.0.1:port", p.Addr())
	}
	c := dialLine(t, p.Addr())
	if got, err := c.roundTrip("hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("roundTrip(hello) = %q, %v; want hello, nil", got, err)
	}
	// A chunk is counted once its write to the other side has returned,
	// which may be after the echo of it came back: the counts settle a
	// moment after the round trip.
	want := func(s ProxyStats) bool {
		return s.Accepted == 1 && s.Active == 1 && s.BytesUp == 6 && s.BytesDown == 6 && s.HeldWhileBlackholed == 0
	}
	s := p.Stats()
	for deadline := time.Now().Add(2 * time.Second); !want(s) && time.Now().Before(deadline); s = p.Stats() {
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	if !want(s) {
		t.Fatalf("Stats() = %+v; want 1 accepted, 1 active, 6 bytes each way, none held", s)
	}
}

func TestProxyBlackholeHoldsAndHealDelivers(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	if _, err := c.roundTrip("warm", 5*time.Second); err != nil {
		t.Fatalf("roundTrip(warm) = %v", err)
	}

	p.Blackhole()
	if !p.Blackholed() {
		t.Fatalf("Blackholed() = false after Blackhole; want true")
	}
	_, err := c.roundTrip("held", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("roundTrip through blackhole = %v; want a timeout", err)
	}
	if s := p.Stats(); s.HeldWhileBlackholed != 5 || s.Active != 1 {
		t.Fatalf("Stats() while blackholed = %+v; want 5 bytes held and the connection open", s)
	}
	// A new connection is accepted but goes nowhere either.
	c2 := dialLine(t, p.Addr())
	if _, err := c2.roundTrip("new", 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("roundTrip on a connection made while blackholed = %v; want a timeout", err)
	}
	if s := p.Stats(); s.Accepted != 2 {
		t.Fatalf("Stats().Accepted = %d; want 2", s.Accepted)
	}

	p.Heal()
	// What was held arrives first, in order.
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("read after Heal = %q, %v; want the held line", got, err)
	}
	if got, err := c.roundTrip("after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("roundTrip(after) = %q, %v; want after, nil", got, err)
	}
	c2.c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := c2.r.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("read on second connection after Heal = %q, %v; want new", got, err)
	}
}

func TestProxyDelay(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	const d = 150 * time.Millisecond
	p.SetDelay(d)
	begin := time.Now()
	if got, err := c.roundTrip("slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("roundTrip(slow) = %q, %v; want slow, nil", got, err)
	}
	// One delay each way.
	if took := time.Since(begin); took < 2*d {
		t.Fatalf("roundTrip with delay %v took %v; want at least %v", d, took, 2*d)
	}
	p.SetDelay(0)
	if got, err := c.roundTrip("fast", 5*time.Second); err != nil || got != "fast" {
		t.Fatalf("roundTrip(fast) = %q, %v; want fast, nil", got, err)
	}
}

func TestProxyResetConns(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	if _, err := c.roundTrip("one", 5*time.Second); err != nil {
		t.Fatalf("roundTrip(one) = %v", err)
	}
	p.ResetConns()
	if _, err := c.roundTrip("two", 5*time.Second); err == nil {
		t.Fatalf("roundTrip on a reset connection = nil error; want one")
	}
	if s := p.Stats(); s.Resets != 1 {
		t.Fatalf("Stats().Resets = %d; want 1", s.Resets)
	}
	// The proxy itself keeps working.
	c2 := dialLine(t, p.Addr())
	if got, err := c2.roundTrip("three", 5*time.Second); err != nil || got != "three" {
		t.Fatalf("roundTrip on a new connection = %q, %v; want three, nil", got, err)
	}
}

func TestProxyTargetDown(t *testing.T) {
	// A port nobody listens on: reserve it, then let it go.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen() = %v", err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := NewProxy(t, target)
	// The proxy accepts, fails to dial and resets the connection, which
	// the client may see as early as its own dial.
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if err == nil {
		t.Fatalf("read through a proxy to a dead target = nil error; want one")
	}
	if s := p.Stats(); s.DialFailures != 1 {
		t.Fatalf("Stats().DialFailures = %d; want 1", s.DialFailures)
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 0, ""},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"one", 1, "one"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.in, tt.n), func(t *testing.T) {
			if got := lastLines(tt.in, tt.n); got != tt.want {
				t.Errorf("lastLines(%q, %d) = %q; want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestBuildOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		want    options
		wantErr bool
	}{
		{"defaults", nil, options{members: 3, tickTime: 200 * time.Millisecond, maxSessionTime: 60 * time.Second, maxClientConns: -1}, false},
		{"one member", []Option{WithMembers(1)}, options{members: 1, tickTime: 200 * time.Millisecond, maxSessionTime: 60 * time.Second, maxClientConns: -1}, false},
		{"no connection limit", []Option{WithMaxClientConns(0)}, options{members: 3, tickTime: 200 * time.Millisecond, maxSessionTime: 60 * time.Second, maxClientConns: 0}, false},
		{"negative connection limit", []Option{WithMaxClientConns(-2)}, options{}, true},
		{"negative jute.maxbuffer", []Option{WithJuteMaxBuffer(-1)}, options{}, true},
		{"zero members", []Option{WithMembers(0)}, options{}, true},
		{"zero tick", []Option{WithTickTime(0)}, options{}, true},
		{"session below two ticks", []Option{WithMaxSessionTimeout(300 * time.Millisecond)}, options{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := buildOptions(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("buildOptions() error = %v; want error %t", err, tt.wantErr)
			}
			if !tt.wantErr && (got.members != tt.want.members || got.tickTime != tt.want.tickTime || got.maxSessionTime != tt.want.maxSessionTime || got.maxClientConns != tt.want.maxClientConns) {
				t.Fatalf("buildOptions() = %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestReserveLoopbackPorts(t *testing.T) {
	a, err := reserveLoopbackPorts(4)
	if err != nil {
		t.Fatalf("reserveLoopbackPorts(4) = %v", err)
	}
	defer a.close()
	b, err := reserveLoopbackPorts(4)
	if err != nil {
		t.Fatalf("reserveLoopbackPorts(4) = %v", err)
	}
	defer b.close()
	seen := map[int]bool{}
	for _, p := range append(append([]int{}, a.ports...), b.ports...) {
		if seen[p] {
			t.Fatalf("port %d reserved twice: %v and %v", p, a.ports, b.ports)
		}
		seen[p] = true
	}
	// Held until unhold: nobody else can bind them.
	if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports[0]))); err == nil {
		ln.Close()
		t.Fatalf("Listen on reserved port %d succeeded; want it held", a.ports[0])
	}
	a.unhold()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports[0])))
	if err != nil {
		t.Fatalf("Listen on port %d after unhold = %v; want nil", a.ports[0], err)
	}
	ln.Close()
}

func TestFromEnv(t *testing.T) {
	t.Setenv("FENCELOCK_PROVIDER", "")
	if got := FromEnv(t).Name(); got != "process" {
		t.Fatalf("FromEnv() with FENCELOCK_PROVIDER unset = %q; want process", got)
	}
	t.Setenv("FENCELOCK_PROVIDER", "process")
	if got := FromEnv(t).Name(); got != "process" {
		t.Fatalf("FromEnv() with FENCELOCK_PROVIDER=process = %q; want process", got)
	}
	if containersProvider != nil {
		t.Setenv("FENCELOCK_PROVIDER", "containers")
		if got := FromEnv(t).Name(); got != "containers" {
			t.Fatalf("FromEnv() with FENCELOCK_PROVIDER=containers = %q; want containers", got)
		}
	}
}

// TestProxyBlackholeCountsChunkInFlight: a chunk the proxy read before a
// blackhole began but had not forwarded yet (here, held by a delay) is
// held by the blackhole, and counted as held, as are the bytes behind it.
// A write queued behind such a chunk used to go uncounted, and a test
// waiting for "held" bytes waited in vain.
func TestProxyBlackholeCountsChunkInFlight(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dialLine(t, p.Addr())
	if _, err := c.roundTrip("warm", 5*time.Second); err != nil {
		t.Fatalf("roundTrip(warm) = %v", err)
	}
	p.SetDelay(time.Second)
	if _, err := io.WriteString(c.c, "early\n"); err != nil {
		t.Fatal(err)
	}
	// The delay keeps the chunk inside the proxy whether it was read
	// before or after the blackhole began: either way it is held. The
	// pause makes the first case, the one that went uncounted, the
	// likely one; the assertions hold in both.
	time.Sleep(100 * time.Millisecond)
	p.Blackhole()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().HeldWhileBlackholed < 6 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := p.Stats(); s.HeldWhileBlackholed != 6 || s.BytesUp != 5 {
		t.Fatalf("Stats() while blackholed = %+v; want the 6 bytes of \"early\\n\" held and only \"warm\\n\" delivered", s)
	}
	p.SetDelay(0)
	p.Heal()
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if s, err := c.r.ReadString('\n'); err != nil || s != "early\n" {
		t.Fatalf("answer after Heal = %q, %v; want \"early\\n\"", s, err)
	}
}
