package zklock

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Locker grants leases on locks stored under its root znode. It is safe
// for concurrent use.
type Locker struct {
	conn  *zk.Conn
	o     *options
	tel   *telemetry.Telemetry // metrics and spans; nil records nothing
	g     *group
	ss    *sessions
	jan   *janitor
	watch *recordWatcher
	life  lifetime

	// Writes found refused, and so no longer tried: the stamp of the
	// parent (createZnodes), the release mark (deleteOwn).
	stampDenied, markDenied atomic.Bool
}

// lifetime is what Close needs to end a Locker once, after the public calls
// in progress.
type lifetime struct {
	calls  sync.WaitGroup // public calls in progress
	closed atomic.Bool    // a Close has begun
	down   chan struct{}  // closed when the first Close has finished
}

// Dial connects to the ZooKeeper servers ("host:port", at least one) and
// returns a Locker that owns the connection, once the first session is
// established; ctx bounds that wait only. Bad options or servers return
// errors wrapping [lock.ErrInvalidConfig].
func Dial(ctx context.Context, servers []string, opts ...Option) (*Locker, error) {
	l, err := dial(ctx, servers, opts)
	if err != nil {
		return nil, fmt.Errorf("zklock: dial: %w", secure.Refusal(err, isRefusal))
	}
	return l, nil
}

func dial(ctx context.Context, servers []string, opts []Option) (*Locker, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkServers(servers); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", lock.ErrInvalidConfig)
	}
	l := newLocker(o)
	conn, err := l.connect(servers)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", lock.ErrInvalidConfig, err)
	}
	l.start(conn)
	l.g.spawn(func() { l.ss.loss.ka.run(l.g, l.conn, func() { _, _ = l.conn.Sync("/") }, l.keepaliveInterval) })
	if _, err := l.ss.get(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("%v: no session: %w", servers, err)
	}
	if err := o.checkNegotiated(l.ss.loss.ka.negotiated()); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.addAuth(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("%v: %w", servers, err)
	}
	return l, nil
}

// connect opens the Locker's connection, whose keepalive sees every
// packet through the dialer's wrapper.
func (l *Locker) connect(servers []string) (*zk.Conn, error) {
	o, ka := l.o, l.ss.loss.ka
	ka.onHeard, ka.onTimeout, ka.onConnect = l.ss.heard, l.negotiatedTimeout, l.watch.connect
	ka.wantsChange = l.watch.wantsChange
	ka.wantsChildren = l.watch.wantsChildren
	dialer := o.dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	if o.tls != nil {
		r := &refusals{notify: l.ss.kickState}
		l.ss.hooks.refused = r.last
		dialer = tlsDialer(dialer, o.tls, r)
	}
	hosts := o.hosts
	if hosts == nil {
		hosts = zk.NewDNSHostProvider()
	}
	conn, _, err := zk.Connect(servers, o.sessionTimeout,
		zk.WithDialer(ka.wrap(dialer)),
		zk.WithHostProvider(hosts),
		// Unlike the event channel, the callback drops no event.
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession {
				l.watch.route(ev)
				return
			}
			l.ss.event(ev)
		}),
		zk.WithLogger(zkLogger{o.Logger, o.secrets()}),
		zk.WithLogInfo(false),
	)
	return conn, err
}

func checkServers(servers []string) error {
	if len(servers) == 0 {
		return fmt.Errorf("%w: empty server list", lock.ErrInvalidConfig)
	}
	for _, s := range servers {
		if s == "" || strings.ContainsAny(s, ", /") {
			return fmt.Errorf("%w: server address %q: want host:port", lock.ErrInvalidConfig, s)
		}
	}
	return nil
}

// newLocker composes a Locker, before it has a connection.
func newLocker(o *options) *Locker {
	g := newGroup()
	ka := &keepalive{clk: o.clock}
	l := &Locker{o: o, g: g, life: lifetime{down: make(chan struct{})}}
	tel, err := telemetry.New(backend, o.Telemetry)
	if err != nil {
		o.Logger.Warn("zklock: some instruments are not recorded", config.LogErr, err)
	}
	l.tel = tel
	l.ss = newSessions(o.clock, ka, o, g.closing)
	l.ss.journal.tel = tel
	l.jan = newJanitor(g, o.Logger)
	l.watch = newRecordWatcher(g, l.ss, l.jan)
	l.ss.hooks.onEnd, l.ss.hooks.onHealthy = l.watch.sessionEnd, l.jan.wake
	return l
}

// start gives the parts the connection and starts their goroutines.
func (l *Locker) start(conn *zk.Conn) {
	l.conn, l.ss.conn, l.jan.conn, l.watch.conn = conn, conn, conn, conn
	l.g.spawn(l.ss.run)
	l.g.spawn(l.jan.run)
	l.g.spawn(l.watch.run)
}

// Identity returns the identity stored in the Locker's lock znodes.
func (l *Locker) Identity() string {
	if l.usable(context.Background()) != nil {
		return ""
	}
	return l.o.Identity
}

// SessionTimeout returns the session timeout the server negotiated (before
// the first handshake, the one asked for).
func (l *Locker) SessionTimeout() time.Duration {
	if l.usable(context.Background()) != nil {
		return 0
	}
	return l.ss.timeout()
}

// SessionID returns the ID of the session the Locker trusts now, or 0.
func (l *Locker) SessionID() int64 {
	if l.usable(context.Background()) != nil {
		return 0
	}
	return l.ss.id()
}

// Close ends every lease granted through the Locker with
// [lock.ErrReleased], makes waiting calls return errors wrapping
// [lock.ErrClosed], and closes the connection, which removes the Locker's
// znodes. Later calls wait for the first and return nil.
func (l *Locker) Close() error {
	if err := l.usable(context.Background()); err != nil {
		return fmt.Errorf("zklock: close: %w", err)
	}
	if !l.life.closed.CompareAndSwap(false, true) {
		<-l.life.down
		return nil
	}
	defer close(l.life.down)
	l.ss.close()
	close(l.g.closing)
	l.g.stop()

	l.life.calls.Wait()
	if l.conn != nil { // nil only in unit tests, which never connect
		l.conn.Close() // ends the session: the server removes its ephemeral znodes
	}
	l.g.wg.Wait()
	return nil
}

// enter registers a public call; it fails once the Locker is closed.
func (l *Locker) enter() error { return l.ss.admit(&l.life.calls) }

// enterName checks the arguments of a public call op on names (one, or
// distinct ones) and enters it; on success the caller must leave.
func (l *Locker) enterName(ctx context.Context, op string, names ...string) error {
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("zklock: %s %s: %w", op, quoted(names), err)
	}
	if len(names) == 0 {
		return fmt.Errorf("zklock: %s: %w: no names", op, lock.ErrInvalidConfig)
	}
	for i, name := range names {
		if err := validName(name); err != nil {
			return fmt.Errorf("zklock: %s: %w", op, err)
		}
		if slices.Contains(names[:i], name) {
			return fmt.Errorf("zklock: %s %s: %w: name %q given twice", op, quoted(names), lock.ErrInvalidConfig, name)
		}
	}
	if err := l.enter(); err != nil {
		return fmt.Errorf("zklock: %s %s: %w", op, quoted(names), err)
	}
	return nil
}

// quoted is how errors name the locks of a call: "a", or "a" "b".
func quoted(names []string) string { return strings.Trim(fmt.Sprintf("%q", names), "[]") }

// validName is lock.ValidateName, and refuses a name with a segment that
// parseChild would take for a lock record (the znode of "a/b" is a child
// of that of "a"; and see isLockPath).
func validName(name string) error {
	if err := lock.ValidateName(name); err != nil {
		return err
	}
	for _, seg := range strings.Split(name, "/") {
		if _, ok := parseChild(seg); ok {
			return fmt.Errorf("%w: %q: segment %q has the shape of a lock record", lock.ErrInvalidName, name, seg)
		}
	}
	return nil
}

func (l *Locker) leave() { l.life.calls.Done() }

func (l *Locker) keepaliveInterval() time.Duration {
	return max(l.SessionTimeout()/keepaliveFraction, time.Millisecond)
}

// negotiatedTimeout logs a loss margin clamped to a new session timeout.
func (l *Locker) negotiatedTimeout(timeout time.Duration) {
	if m, why := l.o.clampMargin(timeout); why != "" {
		l.o.Logger.Warn("zklock: loss margin clamped", "margin", l.o.LossMargin, "using", m, "reason", why)
	}
}
