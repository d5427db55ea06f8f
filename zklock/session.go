package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// session is one ZooKeeper session while the Locker trusts it: until it
// expires or is replaced, the server may have expired it, or Close. A
// session trusted again later is a new *session.
type session struct {
	id   int64
	done chan struct{}
	err  error // set before done is closed
}

// endErr returns why s ended; it is read once done is closed.
func (s *session) endErr() error { return s.err }

func ended(s *session) bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// link is the connection's state (a fake one in unit tests).
type link interface {
	State() zk.State
	SessionID() int64
}

// sessions follows the connection; sessions begin and end only here. Its
// goroutine, run, owns the loss deadline; everyone else reads the current
// session under mu, or waits on changed.
type sessions struct {
	conn    link
	closing <-chan struct{}
	loss    lossDeadline
	sig     signals
	hooks   hooks
	journal journal

	mu      sync.Mutex
	closed  bool
	cur     *session      // the usable session; nil while there is none
	changed chan struct{} // closed and replaced whenever the state is reevaluated
	seenExp int64         // expired events (sig.expired) already acted on
}

// lossDeadline is when the Locker stops trusting a session.
type lossDeadline struct {
	clk    clock.Clock
	ka     *keepalive // when the leader last certainly heard of the session
	given  time.Duration
	margin func(timeout time.Duration) time.Duration
}

// signals tell run, without a lock, to look at the connection.
type signals struct {
	kick      chan struct{} // wakes run
	expired   atomic.Int64  // StateExpired events seen
	needHeard atomic.Bool   // a reply from the server may make a session usable again
}

// hooks are what sessions tells and asks the Locker's other parts: onEnd
// and onHealthy run with mu held, and only wake someone; refused says why
// the servers refused the latest connection, or nil.
type hooks struct {
	onEnd, onHealthy func()
	refused          func() error
}

// journal logs and counts the beginnings and ends of sessions.
type journal struct {
	logger *slog.Logger
	tel    *telemetry.Telemetry
}

func newSessions(clk clock.Clock, ka *keepalive, o *options, closing <-chan struct{}) *sessions {
	return &sessions{
		loss:    lossDeadline{clk: clk, ka: ka, given: o.sessionTimeout, margin: o.margin},
		journal: journal{logger: o.Logger},
		closing: closing,
		hooks:   hooks{onEnd: func() {}, onHealthy: func() {}, refused: func() error { return nil }},
		sig:     signals{kick: make(chan struct{}, 1)},
		changed: make(chan struct{}),
	}
}

// timeout is Locker.SessionTimeout.
func (ss *sessions) timeout() time.Duration {
	if t := ss.loss.ka.negotiated(); t > 0 {
		return t
	}
	return ss.loss.given
}

func (ss *sessions) kickState() { poke(ss.sig.kick) }

// event takes a session event (from go-zookeeper's callback).
func (ss *sessions) event(ev zk.Event) {
	if ev.State == zk.StateExpired {
		ss.sig.expired.Add(1)
	}
	ss.kickState()
}

// heard is told that the server answered a request (keepalive's onHeard).
func (ss *sessions) heard() {
	if ss.sig.needHeard.Load() {
		ss.kickState()
	}
}

// broadcastLocked wakes everyone waiting for a state change.
func (ss *sessions) broadcastLocked() {
	close(ss.changed)
	ss.changed = make(chan struct{})
}

func (ss *sessions) endLocked(err error) {
	s := ss.cur
	ss.cur = nil
	s.err = err
	close(s.done)
	ss.hooks.onEnd()
	if errors.Is(err, lock.ErrClosed) {
		ss.journal.tel.SessionEnded(telemetry.Closed)
		return
	}
	ss.journal.tel.SessionEnded(config.EndReason(err))
	ss.journal.logger.Warn("zklock: session no longer trusted; its leases are lost", "session", fmt.Sprintf("0x%x", s.id), "cause", err)
}

// admit registers a public call in calls unless the Locker is closed.
func (ss *sessions) admit(calls *sync.WaitGroup) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return lock.ErrClosed
	}
	calls.Add(1)
	return nil
}

// close ends the current session with lock.ErrClosed; no other begins.
func (ss *sessions) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	if ss.cur != nil {
		ss.endLocked(fmt.Errorf("%w", lock.ErrClosed))
	}
	ss.broadcastLocked()
}

func (ss *sessions) id() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cur == nil {
		return 0
	}
	return ss.cur.id
}

// run follows the connection until the Locker closes: it reacts to
// session events (event) and to the loss deadline.
func (ss *sessions) run() {
	timer := ss.loss.clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ss.closing:
			return
		case <-ss.sig.kick:
		case <-timer.C():
		}
		next := ss.reconcile(ss.loss.clk.Now())
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(ss.loss.clk.Now()), 0))
		}
	}
}

// reconcile brings the session in line with the connection, and returns
// when to look next (the loss deadline), or zero.
func (ss *sessions) reconcile(now time.Time) time.Time {
	state, id := ss.conn.State(), ss.conn.SessionID()
	healthy := state == zk.StateHasSession && id != 0

	ss.mu.Lock()
	defer ss.mu.Unlock()
	defer ss.broadcastLocked()
	if ss.closed {
		return time.Time{}
	}
	timeout := ss.timeout()
	deadline, heard := ss.loss.ka.deadline(timeout, ss.loss.margin)
	if !heard {
		deadline = now // the leader was never heard from
	}
	ss.checkLocked(now, healthy, id, deadline, timeout)
	if ss.cur == nil && healthy {
		if now.Before(deadline) {
			ss.cur = &session{id: id, done: make(chan struct{})}
			ss.sig.needHeard.Store(false)
			ss.journal.tel.SessionStarted()
			ss.journal.logger.Info("zklock: session established", "session", fmt.Sprintf("0x%x", id), "timeout", timeout)
		} else {
			ss.sig.needHeard.Store(true)
		}
	}
	if healthy {
		ss.hooks.onHealthy()
	}
	if ss.cur == nil {
		return time.Time{}
	}
	return deadline
}

// checkLocked ends the current session if the connection shows it is
// over, or may be.
func (ss *sessions) checkLocked(now time.Time, healthy bool, id int64, deadline time.Time, timeout time.Duration) {
	if exp := ss.sig.expired.Load(); exp != ss.seenExp {
		ss.seenExp = exp
		// Unless the trusted session began after the expired one.
		if ss.cur != nil && !(healthy && id == ss.cur.id) {
			ss.endLocked(telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: session 0x%x expired", lock.ErrLost, ss.cur.id)))
		}
	}
	if ss.cur == nil {
		return
	}
	switch {
	case healthy && id != ss.cur.id:
		ss.endLocked(telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: session 0x%x replaced by 0x%x", lock.ErrLost, ss.cur.id, id)))
	case !now.Before(deadline):
		ss.endLocked(telemetry.WithReason(telemetry.Disconnected, fmt.Errorf("%w: no reply from the server within the session timeout %v (margin %v): it may have expired session 0x%x",
			lock.ErrLost, timeout, ss.loss.margin(timeout), ss.cur.id)))
	}
}

// getPoll is how often get asks run to look again while there is no
// session, in case a wake-up was missed.
const getPoll = 50 * time.Millisecond

// get returns the session to work in, waiting for one while there is none.
func (ss *sessions) get(ctx context.Context) (*session, error) {
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		ss.mu.Lock()
		if ss.closed {
			ss.mu.Unlock()
			return nil, lock.ErrClosed
		}
		if s := ss.cur; s != nil {
			ss.mu.Unlock()
			return s, nil
		}
		ch := ss.changed
		ss.mu.Unlock()
		if err := ss.hooks.refused(); err != nil {
			return nil, err
		}
		// Not at every wake-up: each look wakes this loop again.
		if poll == nil {
			ss.kickState()
			poll = time.NewTimer(getPoll)
		}
		select {
		case <-ch:
		case <-poll.C:
			ss.kickState()
			poll.Reset(getPoll)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-ss.closing:
		}
	}
}

// awaitConnected waits until the connection has session s (nil: any) again.
func (ss *sessions) awaitConnected(ctx context.Context, s *session) error {
	var sDone <-chan struct{}
	if s != nil {
		sDone = s.done
	}
	for {
		ss.mu.Lock()
		ch := ss.changed
		ss.mu.Unlock()
		if ss.conn.State() == zk.StateHasSession {
			return nil
		}
		if err := ss.hooks.refused(); err != nil {
			return &stopError{err}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return &stopError{context.Cause(ctx)}
		case <-sDone:
			return &stopError{s.err}
		case <-ss.closing:
			return &stopError{lock.ErrClosed}
		}
	}
}

func (ss *sessions) isClosed() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.closed
}
