package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// Timing of the frozen-member ensemble: the session timeout is the
// smallest a default-configured server negotiates (two ticks), which is
// where a follower's half-tick touch reports weigh most against it.
const (
	frozenTick    = time.Second
	frozenTimeout = 2 * frozenTick
)

// frozenTrials returns how many trials a frozen-member test runs:
// FENCELOCK_FROZEN_TRIALS, or 30.
func frozenTrials(t *testing.T) int {
	t.Helper()
	s := os.Getenv("FENCELOCK_FROZEN_TRIALS")
	if s == "" {
		return 30
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FENCELOCK_FROZEN_TRIALS=%q: want a positive integer", s)
	}
	return n
}

// TestFrozenFollower freezes the only server a holder can reach, a
// follower, until the leader expires the holder's session and a waiter on
// the other servers is granted the lock. In every trial the holder's Done
// must close before the grant, its Err must wrap lock.ErrLost, and its
// late Release must leave the new grant alone. The freeze is placed at a
// different offset after one of the holder's pings in each trial.
//
// For each trial it also reports the server's side: when the leader
// expired the holder's session (its log line) against the send time of
// the holder's last request the frozen follower answered.
func TestFrozenFollower(t *testing.T) {
	trials := frozenTrials(t)
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper, cluster.WithTickTime(frozenTick))
	ctx := testutil.Context(t, time.Minute)
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
	member := c.Members[frozen]
	proxy := cluster.NewProxy(t, member.ClientAddr())
	wire := newWireLog()
	h := &harness{servers: others, root: uniqueRoot(t), admin: newAdmin(t, others), sess: newSessions()}
	holder := (&harness{servers: []string{proxy.Addr()}, root: h.root, admin: h.admin, sess: h.sess}).dial(t,
		zklock.WithIdentity("holder"), zklock.WithSessionTimeout(frozenTimeout), zklock.WithDialer(wire.dialer()))
	// The waiter's own session is much longer, so that a loaded machine
	// (or an election, should the one remaining follower fall behind while
	// the other is frozen) does not cost it the lock it is granted; only
	// the holder's timing is under test.
	waiter := h.dial(t, zklock.WithIdentity("waiter"), zklock.WithSessionTimeout(10*frozenTimeout))
	if got := holder.SessionTimeout(); got != frozenTimeout {
		t.Fatalf("negotiated session timeout %v; want %v", got, frozenTimeout)
	}
	t.Logf("leader %s; frozen follower %s; tickTime %v; session timeout %v; %d trials",
		c.Members[leader].Name(), member.Name(), frozenTick, frozenTimeout, trials)

	pingPeriod := frozenTimeout / 3 // go-zookeeper's idle ping interval
	var margins []time.Duration
	failed, redone, expiries := 0, 0, 0
	maxEarly := time.Duration(math.MinInt64)
	var beforeExpiry []time.Duration
	for trial := range trials {
		offset := time.Duration(trial) * pingPeriod / time.Duration(trials)
		r := frozenTrial(t, c, h, holder, waiter, wire, member, offset)
		for try := 0; r.lostEarly && try < 3; try++ {
			redone++
			t.Logf("trial %2d: the holder's lease ended before the freeze (a stalled machine, not the fault); trying again", trial)
			r = frozenTrial(t, c, h, holder, waiter, wire, member, offset)
		}
		if r.lostEarly {
			t.Fatalf("trial %d: the holder's lease ended before the freeze in 4 tries", trial)
		}
		if r.expiryFound {
			expiries++
			maxEarly = max(maxEarly, r.early)
			beforeExpiry = append(beforeExpiry, r.beforeExpiry)
		}
		if r.failed {
			failed++
		} else {
			margins = append(margins, r.margin)
		}
		t.Logf("trial %2d: freeze %3dms after a ping; holder's Done %5dms after the freeze; grant %5dms; margin %5dms; "+
			"last answered request sent %5dms before the freeze; leader expired the session %s",
			trial, offset.Milliseconds(), r.done.Milliseconds(), r.grant.Milliseconds(), r.margin.Milliseconds(),
			r.lastAck.Milliseconds(), r.expiry)
	}
	t.Logf("frozen follower: %d trials, %d failures, %d trials run again; Done-to-grant margin %s", trials, failed, redone, testutil.MarginSummary(margins))
	if expiries > 0 {
		t.Logf("the leader's expiry log line was found in %d trials; at its earliest it expired the session %v before the holder's last answered request plus the timeout (the loss margin is %v)",
			expiries, maxEarly, holder.SessionTimeout()/2) // the default margin: half the timeout
		t.Logf("the holder's Done closed before the leader's expiry by %s", testutil.MarginSummary(beforeExpiry))
	}
}

// frozenResult is what one trial measured, relative to the freeze.
type frozenResult struct {
	done, grant, margin time.Duration
	lastAck             time.Duration // how long before the freeze the last answered request was sent
	expiry              string        // the leader's expiry against the holder's last answered request
	failed              bool
	lostEarly           bool          // the holder's lease ended before the freeze
	early               time.Duration // how much earlier than lastAck + timeout the leader expired the session
	expiryFound         bool
	beforeExpiry        time.Duration // from the holder's Done to the leader's expiry
}

func frozenTrial(t *testing.T, c *cluster.Cluster, h *harness, holder, waiter *zklock.Locker, wire *wireLog,
	member cluster.Member, offset time.Duration) frozenResult {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	name := lockName(t)
	le := mustAcquire(t, ctx, holder, name)
	got := goAcquire(ctx, waiter, name)
	waitRecords(t, h, name, 2, "waiter queued")

	doneAt := make(chan time.Time, 1)
	go func() {
		<-le.Done()
		doneAt <- time.Now()
	}()

	testutil.Recv(t, wire.nextPing(), 10*time.Second, "a ping from the holder")
	time.Sleep(offset) // places the freeze within the ping period
	select {
	case <-le.Done():
		t.Logf("holder's lease ended before the freeze: %v", le.Err())
		if l := <-got; l.err == nil {
			_ = l.lease.Release(ctx)
		}
		waitRecords(t, h, name, 0, "no records left")
		return frozenResult{lostEarly: true}
	default:
	}
	frozenAt := time.Now()
	if err := member.Stop(); err != nil {
		t.Fatalf("Stop(%s) = %v", member.Name(), err)
	}
	// Whatever happens below, the member is not left frozen.
	defer func() {
		if !member.Running() {
			_ = member.Continue()
		}
	}()
	if member.Running() {
		t.Fatalf("%s still running after Stop", member.Name())
	}
	// Both events, each stamped by its own goroutine with the monotonic
	// clock as soon as it happens.
	r := testutil.Recv(t, got, 30*time.Second, "the waiter's grant")
	if r.err != nil {
		t.Fatalf("waiter's Acquire() = %v; want a lease", r.err)
	}
	done := testutil.Recv(t, doneAt, 30*time.Second, "the holder's Done")
	lastAck := wire.lastAcked()
	if member.Running() {
		t.Errorf("%s running before Continue: the freeze did not last", member.Name())
	}
	if err := member.Continue(); err != nil {
		t.Fatalf("Continue(%s) = %v", member.Name(), err)
	}

	res := frozenResult{
		done:    done.Sub(frozenAt),
		grant:   r.at.Sub(frozenAt),
		margin:  r.at.Sub(done),
		lastAck: frozenAt.Sub(lastAck),
	}
	var expiredAt time.Time
	res.expiry, expiredAt, res.early, res.expiryFound = expiryEvidence(c, sessionID(le), lastAck, holder.SessionTimeout())
	// The server's side of the same promise: the leader logs the expiry
	// (with the wall clock of this machine, to the millisecond, rounded
	// down) just before it closes the session and so frees the lock.
	if res.expiryFound {
		res.beforeExpiry = expiredAt.Sub(done)
	}
	if res.expiryFound && !done.Before(expiredAt) {
		res.failed = true
		t.Errorf("holder's Done closed at %s, not before the leader expired its session (%s)", done.Format("15:04:05.000"), res.expiry)
	}
	if !done.Before(r.at) {
		res.failed = true
		t.Errorf("holder's Done closed %v after the waiter's grant (freeze %v after a ping): two holders at once; %s",
			done.Sub(r.at), offset, res.expiry)
	}
	if !errors.Is(le.Err(), lock.ErrLost) {
		t.Errorf("holder's Err() = %v; want an error wrapping %v", le.Err(), lock.ErrLost)
	}
	if r.lease.Token() <= le.Token() {
		t.Errorf("waiter's Token() = %d; want > %d", r.lease.Token(), le.Token())
	}

	// The holder's late Release, once its Locker is back on a new session
	// through the resumed follower, must leave the waiter's grant alone.
	testutil.Eventually(t, 30*time.Second, "the holder's Locker on a new session", func() bool {
		id := sessionID(holder)
		return id != 0 && id != sessionID(le)
	})
	if err := le.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("holder's late Release() = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if err := r.lease.Err(); err != nil {
		t.Errorf("waiter's Err() after the holder's late Release = %v; want nil", err)
	}
	if hd, err := waiter.Holder(ctx, name); err != nil || hd.Token != r.lease.Token() {
		t.Errorf("Holder() after the holder's late Release = %+v, %v; want the waiter's token %d", hd, err, r.lease.Token())
	}
	if recs := h.Records(t, name); len(recs) != 1 || !slices.Contains(recs, lastSegment(r.lease.Path())) {
		t.Errorf("records after the holder's late Release = %v; want only the waiter's %s", recs, r.lease.Path())
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("waiter's Release() = %v", err)
	}
	waitRecords(t, h, name, 0, "no records left")
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() after resuming %s = %v", member.Name(), err)
	}
	return res
}

func lastSegment(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// expiryLine matches the leader's log line for a session it expires, with
// the timestamp the harness configures (HH:mm:ss.SSS, local time).
var expiryLine = regexp.MustCompile(`(\d\d:\d\d:\d\d\.\d\d\d) .*Expiring session 0x([0-9a-f]+), timeout of (\d+)ms exceeded`)

// expiryEvidence finds the server's expiry of session id in the members'
// logs and compares it with the send time of the last request the server
// answered: a server that heard from the client when the client thinks it
// did expires the session no earlier than that time plus the timeout.
//
// It returns a description, and how much earlier than that bound the
// server expired the session (negative: later).
func expiryEvidence(c *cluster.Cluster, id int64, lastAck time.Time, timeout time.Duration) (string, time.Time, time.Duration, bool) {
	want := strconv.FormatInt(id, 16)
	for _, m := range c.Members {
		for _, sm := range expiryLine.FindAllStringSubmatch(m.Logs(), -1) {
			if sm[2] != want {
				continue
			}
			clock, err := time.ParseInLocation("15:04:05.000", sm[1], time.Local)
			if err != nil {
				return fmt.Sprintf("unparsable expiry time %q", sm[1]), time.Time{}, 0, false
			}
			y, mo, d := lastAck.Date()
			at := time.Date(y, mo, d, clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), time.Local)
			early := lastAck.Add(timeout).Sub(at)
			return fmt.Sprintf("on %s at %s, %dms after the last answered request was sent, %+dms against that time plus the timeout",
				m.Name(), sm[1], at.Sub(lastAck).Milliseconds(), -early.Milliseconds()), at, early, true
		}
	}
	return "(no expiry line found)", time.Time{}, 0, false
}

// wireLog watches a client's connections: when it sends a ping, and the
// send time of the latest request the server answered (replies come back
// in request order on each connection).
type wireLog struct {
	acked atomic.Int64 // unix nanoseconds

	mu    sync.Mutex
	pings []chan struct{}
}

func newWireLog() *wireLog { return &wireLog{} }

func (w *wireLog) lastAcked() time.Time { return time.Unix(0, w.acked.Load()) }

// nextPing returns a channel closed when the client next sends a ping.
func (w *wireLog) nextPing() <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	w.pings = append(w.pings, ch)
	w.mu.Unlock()
	return ch
}

func (w *wireLog) pinged() {
	w.mu.Lock()
	for _, ch := range w.pings {
		close(ch)
	}
	w.pings = nil
	w.mu.Unlock()
}

func (w *wireLog) dialer() zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, w: w}, nil
	}
}

type wireConn struct {
	net.Conn
	w *wireLog

	mu   sync.Mutex
	sent []time.Time

	out, in   packetSplitter
	outN, inN int // packets seen; the first each way is the handshake
}

func (c *wireConn) Write(p []byte) (int, error) {
	now := time.Now()
	n, err := c.Conn.Write(p)
	c.out.feed(p[:n], func(head []byte) {
		c.outN++
		c.mu.Lock()
		c.sent = append(c.sent, now)
		c.mu.Unlock()
		// request header: xid int32, type int32; a ping is xid -2, type 11.
		if c.outN > 1 && len(head) >= 8 && int32(binary.BigEndian.Uint32(head[:4])) == -2 && binary.BigEndian.Uint32(head[4:8]) == 11 {
			c.w.pinged()
		}
	})
	return n, err
}

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n], func(head []byte) {
		c.inN++
		// reply header: xid int32; -1 is a watch notification.
		if c.inN > 1 && len(head) >= 4 && int32(binary.BigEndian.Uint32(head[:4])) == -1 {
			return
		}
		c.mu.Lock()
		if len(c.sent) == 0 {
			c.mu.Unlock()
			return
		}
		at := c.sent[0]
		c.sent = c.sent[1:]
		c.mu.Unlock()
		for {
			old := c.w.acked.Load()
			if at.UnixNano() <= old || c.w.acked.CompareAndSwap(old, at.UnixNano()) {
				return
			}
		}
	})
	return n, err
}

// packetSplitter cuts a stream into ZooKeeper's length-prefixed packets
// and hands over the first bytes of each.
type packetSplitter struct {
	hdr  [4]byte
	nhdr int
	need int
	head []byte
}

func (s *packetSplitter) feed(p []byte, done func(head []byte)) {
	for len(p) > 0 {
		if s.nhdr < 4 {
			k := copy(s.hdr[s.nhdr:], p)
			s.nhdr += k
			p = p[k:]
			if s.nhdr == 4 {
				s.need = int(binary.BigEndian.Uint32(s.hdr[:]))
				s.head = s.head[:0]
				if s.need == 0 {
					s.nhdr = 0
					done(nil)
				}
			}
			continue
		}
		k := min(len(p), s.need)
		if keep := 8 - len(s.head); keep > 0 {
			s.head = append(s.head, p[:min(k, keep)]...)
		}
		s.need -= k
		p = p[k:]
		if s.need == 0 {
			s.nhdr = 0
			done(s.head)
		}
	}
}

// TestFrozenNegotiatedTimeout checks what Dial does when the server
// negotiates a session timeout shorter than asked: a loss margin the
// negotiated timeout cannot hold is an error, and one below the bound the
// Locker can prove is raised to it, with a warning.
func TestFrozenNegotiatedTimeout(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper, cluster.WithMaxSessionTimeout(time.Second))
	ctx := testutil.Context(t, time.Minute)
	root := uniqueRoot(t)

	l, err := zklock.Dial(ctx, c.Endpoints(), zklock.WithRoot(root),
		zklock.WithSessionTimeout(4*time.Second), zklock.WithLossMargin(3*time.Second))
	if err == nil {
		negotiated := l.SessionTimeout()
		_ = l.Close()
		t.Fatalf("Dial(margin 3s, negotiated %v) = nil error; want one wrapping %v", negotiated, lock.ErrInvalidConfig)
	}
	if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), "negotiated session timeout 1s") {
		t.Errorf("Dial(margin 3s) = %v; want an error wrapping %v that names the negotiated timeout 1s", err, lock.ErrInvalidConfig)
	}

	var logs testutil.SyncBuffer
	l, err = zklock.Dial(ctx, c.Endpoints(), zklock.WithRoot(root),
		zklock.WithSessionTimeout(4*time.Second), zklock.WithLossMargin(100*time.Millisecond),
		zklock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatalf("Dial(margin 100ms) = %v; want nil", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if got := l.SessionTimeout(); got != time.Second {
		t.Fatalf("SessionTimeout() = %v; want the server's maximum, 1s", got)
	}
	if out := logs.String(); !strings.Contains(out, "loss margin clamped") || !strings.Contains(out, "using=333.333333ms") {
		t.Errorf("log = %q; want a warning that the margin was raised to 333.333333ms", out)
	}
	le, err := l.Acquire(ctx, "frozen/negotiated")
	if err != nil {
		t.Fatalf("Acquire() = %v; want a lease: the session must be trusted", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}
