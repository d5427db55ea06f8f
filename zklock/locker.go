package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// Locker grants leases on locks stored under its root znode. It is safe for
// concurrent use.
type Locker struct {
	conn  *zk.Conn
	owned bool
	o     *options
	lv    *liveness       // Dial only
	evs   <-chan zk.Event // New only; nil once closed
	root  string          // without a trailing slash
	data  []byte          // identity, stored in every lock znode
	kick  chan struct{}   // wakes the state goroutine
	jkick chan struct{}   // wakes the janitor
	lkick chan struct{}   // wakes the lease loop
	close chan struct{}   // closed by Close
	down  chan struct{}   // closed when the first Close has finished
	once  sync.Once
	bg    context.Context // cancelled by Close
	stop  context.CancelFunc
	calls sync.WaitGroup // public calls in progress
	wg    sync.WaitGroup // the Locker's goroutines

	expired    atomic.Int64 // StateExpired events seen
	needHeard  atomic.Bool  // a reply from the server may make a session usable again
	epochEnded atomic.Bool  // an epoch ended; the lease loop has not ended its leases yet

	wmu     sync.Mutex
	watched map[string]*watchEntry // the znodes of acquisitions and held leases, by path
	pending []nodeEvent            // events for held leases, for the lease loop

	mu       sync.Mutex
	closed   bool
	connGone bool          // New: the caller closed the connection
	cur      *epoch        // the usable session; nil while there is none
	changed  chan struct{} // closed and replaced whenever the state is reevaluated
	discAt   time.Time     // New: when the connection was first seen without a session
	seenExp  int64         // expired events already acted on
	leases   map[*Lease]struct{}
	cleanups []cleanup // znodes to delete once connected in their session
}

// epoch is one stretch of a session during which the Locker trusts it. It
// ends when the session expires or is replaced, when the Locker has been
// cut off long enough that the server may have expired it, or at Close. A
// session that survives a long disconnection gets a new epoch afterwards,
// so leases and waits of the old epoch stay lost.
type epoch struct {
	id   int64
	done chan struct{}
	err  error // set before done is closed
}

// Dial connects to the ZooKeeper servers ("host:port", at least one) and
// returns a Locker that owns the connection: Close closes it, which ends
// the session and so removes every znode the Locker created. Dial returns
// once the first session is established, or with ctx's error. ctx bounds
// the connection attempt only.
//
// Bad options, an empty server list or an empty address return errors
// wrapping [lock.ErrInvalidConfig].
func Dial(ctx context.Context, servers []string, opts ...Option) (*Locker, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("zklock: dial: %w", err)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("zklock: dial: %w: empty server list", lock.ErrInvalidConfig)
	}
	for _, s := range servers {
		if s == "" || strings.ContainsAny(s, ", /") {
			return nil, fmt.Errorf("zklock: dial: %w: server address %q: want host:port", lock.ErrInvalidConfig, s)
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("zklock: dial: %w: nil context", lock.ErrInvalidConfig)
	}
	l := newLocker(o)
	l.owned = true
	l.lv = &liveness{onHeard: func() {
		if l.needHeard.Load() {
			l.kickState()
		}
	}, onTimeout: l.negotiatedTimeout}
	dialer := o.dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect(servers, o.sessionTimeout,
		zk.WithDialer(l.lv.wrap(dialer)),
		// The callback, unlike the event channel, never drops an event. It
		// runs on go-zookeeper's goroutines, so it only counts, routes and
		// wakes.
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession {
				l.route(ev)
				return
			}
			if ev.State == zk.StateExpired {
				l.expired.Add(1)
			}
			l.kickState()
		}),
		zk.WithLogger(zkLogger{o.logger}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		return nil, fmt.Errorf("zklock: dial: %w: %w", lock.ErrInvalidConfig, err)
	}
	l.conn = conn
	l.start()
	l.wg.Add(1)
	go l.keepaliveLoop()
	if _, err := l.session(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("zklock: dial %v: no session: %w", servers, err)
	}
	if err := l.checkNegotiated(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// New returns a Locker on a connection the caller opened with zk.Connect,
// and borrows it: Close deletes the Locker's znodes but leaves conn open.
//
// events must be the channel zk.Connect returned with conn. The Locker
// reads it until it is closed (when conn is closed) and the caller must
// not read it too. The session states on it drive the Locker; go-zookeeper
// drops events when nobody reads the channel, so New must be called right
// after zk.Connect, and the Locker also compares conn.State and
// conn.SessionID with what it last saw, so that a session change is never
// missed even if its event was dropped. The watch events on the channel
// tell held leases that their znodes were deleted; one that was dropped is
// caught within about half a second by looking at the watch itself.
//
// go-zookeeper does not reveal the negotiated session timeout, so New needs
// it: give [WithSessionTimeout] the value passed to zk.Connect (it must lie
// inside the server's [2, 20] × tickTime range, or the server negotiates
// another one and the loss bound is wrong). New cannot see when the server
// last heard from the connection either, and relies on go-zookeeper's
// disconnection event (see [WithLossMargin]); prefer [Dial] where the loss
// bound matters.
//
// A nil conn or events, or a missing WithSessionTimeout, return errors
// wrapping [lock.ErrInvalidConfig]. New does not wait for a session.
func New(conn *zk.Conn, events <-chan zk.Event, opts ...Option) (*Locker, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("zklock: new: %w", err)
	}
	if conn == nil {
		return nil, fmt.Errorf("zklock: new: %w: nil connection", lock.ErrInvalidConfig)
	}
	if events == nil {
		return nil, fmt.Errorf("zklock: new: %w: nil event channel", lock.ErrInvalidConfig)
	}
	if !o.timeoutSet {
		return nil, fmt.Errorf("zklock: new: %w: WithSessionTimeout is required (the timeout given to zk.Connect)", lock.ErrInvalidConfig)
	}
	if o.dialer != nil {
		return nil, fmt.Errorf("zklock: new: %w: WithDialer applies to Dial only", lock.ErrInvalidConfig)
	}
	l := newLocker(o)
	l.conn = conn
	l.evs = events
	l.start()
	return l, nil
}

func newLocker(o *options) *Locker {
	bg, stop := context.WithCancel(context.Background())
	return &Locker{
		bg:      bg,
		stop:    stop,
		o:       o,
		root:    o.root,
		data:    []byte(o.identity),
		kick:    make(chan struct{}, 1),
		jkick:   make(chan struct{}, 1),
		lkick:   make(chan struct{}, 1),
		close:   make(chan struct{}),
		down:    make(chan struct{}),
		changed: make(chan struct{}),
		leases:  make(map[*Lease]struct{}),
		watched: make(map[string]*watchEntry),
	}
}

func (l *Locker) start() {
	l.wg.Add(3)
	go l.stateLoop()
	go l.janitorLoop()
	go l.leaseLoop()
}

// Identity returns the identity stored in the Locker's lock znodes.
func (l *Locker) Identity() string {
	if l.usable(context.Background()) != nil {
		return ""
	}
	return l.o.identity
}

// Root returns the znode under which the Locker's locks live.
func (l *Locker) Root() string {
	if l == nil {
		return ""
	}
	return l.root
}

// SessionID returns the id of the session the Locker currently trusts, or 0
// while it has none.
func (l *Locker) SessionID() int64 {
	if l.usable(context.Background()) != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.id
}

// SessionTimeout returns the session timeout the Locker works with: the
// one the server negotiated (Dial) or the one given (New).
func (l *Locker) SessionTimeout() time.Duration {
	if l.usable(context.Background()) != nil {
		return 0
	}
	if l.lv != nil {
		if t := l.lv.negotiated(); t > 0 {
			return t
		}
	}
	return l.o.sessionTimeout
}

// Close ends every lease granted through the Locker (their Err wraps
// [lock.ErrReleased]), makes waiting Acquire calls return errors wrapping
// [lock.ErrClosed], and waits for the Locker's goroutines. A Locker from
// [Dial] then closes its connection, which ends the session and removes its
// znodes at once; one from [New] deletes its znodes itself, waiting at most
// one session timeout for the connection. Later calls return nil; one made
// while another is in progress waits for that one to finish, so that
// whichever Close returns, the Locker is torn down.
func (l *Locker) Close() error {
	if err := l.usable(context.Background()); err != nil {
		return fmt.Errorf("zklock: close: %w", err)
	}
	first := false
	l.once.Do(func() { first = true })
	if !first {
		<-l.down
		return nil
	}
	defer close(l.down)
	l.mu.Lock()
	l.closed = true
	if l.cur != nil {
		l.endEpochLocked(fmt.Errorf("%w", lock.ErrClosed))
	}
	l.broadcastLocked()
	l.mu.Unlock()
	close(l.close)
	l.stop()

	l.calls.Wait()
	if l.owned {
		l.conn.Close() // ends the session: the server removes its ephemeral znodes
		l.wg.Wait()
		return nil
	}
	l.wg.Wait()
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), finalKey{}, true), l.SessionTimeout())
	defer cancel()
	if n := l.sweep(ctx); n > 0 {
		l.o.logger.Warn("zklock: close: znodes left for the session to remove", "count", n)
	}
	l.wg.Wait() // the sweep's requests
	return nil
}

// enter registers a public call; it fails once the Locker is closed.
func (l *Locker) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return lock.ErrClosed
	}
	l.calls.Add(1)
	return nil
}

func (l *Locker) leave() { l.calls.Done() }

func (l *Locker) kickState() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *Locker) kickJanitor() {
	select {
	case l.jkick <- struct{}{}:
	default:
	}
}

// broadcastLocked wakes everyone waiting for a state change.
func (l *Locker) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *Locker) endEpochLocked(err error) {
	ep := l.cur
	l.cur = nil
	ep.err = err
	close(ep.done)
	l.epochEnded.Store(true)
	l.kickLeases()
	if !errors.Is(err, lock.ErrClosed) {
		l.o.logger.Warn("zklock: session no longer trusted; its leases are lost", "session", fmt.Sprintf("0x%x", ep.id), "cause", err)
	}
}

// stateLoop follows the connection: it reacts to session events and to the
// loss deadline, and is the only place epochs begin and (apart from Close)
// end.
func (l *Locker) stateLoop() {
	defer l.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	evs := l.evs
	for {
		select {
		case <-l.close:
			return
		case <-l.kick:
		case <-timer.C:
		case ev, ok := <-evs:
			if !ok {
				evs = nil
				l.mu.Lock()
				l.connGone = true
				l.mu.Unlock()
			} else if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
				l.expired.Add(1)
			} else if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged {
				l.route(ev)
			}
		}
		next := l.reconcile(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		}
	}
}

// reconcile brings the Locker's view in line with the connection, and
// returns when it must next look (the loss deadline), or zero.
func (l *Locker) reconcile(now time.Time) time.Time {
	state, id := l.conn.State(), l.conn.SessionID()
	healthy := state == zk.StateHasSession && id != 0

	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.broadcastLocked()
	if l.closed {
		return time.Time{}
	}
	if l.connGone {
		healthy = false
	}

	// When may the server expire the session, less the margin?
	var deadline time.Time
	timeout := l.SessionTimeout()
	if l.lv != nil {
		deadline, _ = l.lv.deadline(l.o.margin)
	} else {
		if healthy {
			l.discAt = time.Time{}
		} else if l.discAt.IsZero() {
			l.discAt = now
		}
		if !l.discAt.IsZero() {
			// go-zookeeper raises the disconnection at most two thirds of
			// the timeout after the last reply.
			deadline = l.discAt.Add(max(timeout/3-l.o.margin(timeout), 0))
		}
	}

	if exp := l.expired.Load(); exp != l.seenExp {
		l.seenExp = exp
		// An expiry ends the trusted session unless that session began
		// after the expired one (the events may lag behind the state).
		if l.cur != nil && !(healthy && id == l.cur.id) {
			l.endEpochLocked(fmt.Errorf("%w: session 0x%x expired", lock.ErrLost, l.cur.id))
		}
	}
	if l.cur != nil {
		switch {
		case l.connGone:
			l.endEpochLocked(fmt.Errorf("%w: the zk connection was closed", lock.ErrLost))
		case healthy && id != l.cur.id:
			l.endEpochLocked(fmt.Errorf("%w: session 0x%x replaced by 0x%x", lock.ErrLost, l.cur.id, id))
		case !deadline.IsZero() && !now.Before(deadline):
			l.endEpochLocked(fmt.Errorf("%w: no reply from the server within the session timeout %v (margin %v): it may have expired session 0x%x",
				lock.ErrLost, timeout, l.o.margin(timeout), l.cur.id))
		}
	}
	if l.cur == nil && healthy {
		if deadline.IsZero() || now.Before(deadline) {
			l.cur = &epoch{id: id, done: make(chan struct{})}
			l.needHeard.Store(false)
			l.o.logger.Info("zklock: session established", "session", fmt.Sprintf("0x%x", id), "timeout", timeout)
		} else {
			l.needHeard.Store(true)
		}
	}
	if healthy && len(l.cleanups) > 0 {
		l.kickJanitor()
	}
	if l.cur == nil {
		return time.Time{}
	}
	return deadline
}

// session returns the epoch to work in, waiting for one while there is
// none.
func (l *Locker) session(ctx context.Context) (*epoch, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, lock.ErrClosed
		}
		if l.connGone {
			l.mu.Unlock()
			return nil, fmt.Errorf("%w: the zk connection was closed", lock.ErrLost)
		}
		if ep := l.cur; ep != nil {
			l.mu.Unlock()
			return ep, nil
		}
		ch := l.changed
		l.mu.Unlock()
		l.kickState()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-l.close:
		}
	}
}

// awaitConnected waits until the connection has a session again, for a
// request to be retried in epoch ep.
func (l *Locker) awaitConnected(ctx context.Context, ep *epoch) error {
	var epDone <-chan struct{}
	if ep != nil {
		epDone = ep.done
	}
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if l.conn.State() == zk.StateHasSession {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return &stopError{context.Cause(ctx)}
		case <-epDone:
			return &stopError{ep.err}
		case <-l.close:
			return &stopError{lock.ErrClosed}
		}
	}
}

// zkLogger sends go-zookeeper's log lines to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zk: " + fmt.Sprintf(format, args...))
}
