package zklock

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/lock"
)

// Defaults of the options.
const (
	// DefaultRoot is the znode under which locks live unless [WithRoot]
	// says otherwise.
	DefaultRoot = "/fencelock"

	// DefaultSessionTimeout is the session timeout [Dial] asks the server
	// for unless [WithSessionTimeout] says otherwise.
	DefaultSessionTimeout = 10 * time.Second
)

// Fractions of the negotiated session timeout T: the default loss margin
// is T/2; a margin below T/3, the most the leader's view of the session
// can lag behind the client's, is raised to it; a Locker sends a sync
// every T/12 (docs/design/zookeeper-loss.md).
const (
	defaultLossMarginFraction = 2
	minLossMarginFraction     = 3
	keepaliveFraction         = 12
)

// backend is the value of the backend attribute of metrics and log lines.
const backend = "zookeeper"

// Option configures a Locker. Leaving an option out means its documented
// default; giving an option a bad value makes [Dial] return an error
// wrapping [lock.ErrInvalidConfig].
type Option func(*options)

// options holds what the options set; config.Common holds what every
// backend shares.
type options struct {
	config.Common
	root           string
	sessionTimeout time.Duration
	acl            []zk.ACL        // nil: defaultACL
	digest         *digest         // WithDigest
	auth           []authCred      // WithAuth
	tls            *tls.Config     // WithTLS; nil: plain TCP
	dialer         zk.Dialer       // nil: net.DialTimeout
	hosts          zk.HostProvider // nil: go-zookeeper's DNS host provider
	clock          clock.Clock     // the loss deadline's and keepalive's; unit tests set a fake
	layout         Layout
}

// Layout is how a Locker names its lock znodes: fencelock's own way, or a
// recipe's. Every layout counts the records of all of these recipes
// (docs/design/zookeeper.md, "Layouts").
type Layout string

// The layouts, and the Curator recipes (and go-zookeeper's Lock) whose
// records each writes.
const (
	LayoutFencelock        Layout = "fencelock"     // the default, for every kind of request
	LayoutCurator          Layout = "curator"       // InterProcessMutex, LeaderSelector, zk.Lock: locks only
	LayoutCuratorReadWrite Layout = "curator-rw"    // InterProcessReadWriteLock: locks and read-write locks
	LayoutCuratorLatch     Layout = "curator-latch" // LeaderLatch: locks only
)

// WithLayout sets the layout of the Locker's lock znodes (default
// [LayoutFencelock]). A Curator layout refuses shared or semaphore
// requests it has no record for with [lock.ErrIncompatible], and cannot
// be combined with [WithLockDelay].
func WithLayout(y Layout) Option {
	return func(o *options) {
		switch y {
		case LayoutFencelock, LayoutCurator, LayoutCuratorReadWrite, LayoutCuratorLatch:
			o.layout = y
		default:
			o.Fail("layout %q: want fencelock, curator, curator-rw or curator-latch", y)
		}
	}
}

// WithRoot sets the znode under which locks live (default [DefaultRoot]).
// It accepts the paths etcdlock.WithPrefix accepts (see [lock.URLPath]):
// "/myapp/locks", "myapp/locks" and "myapp/locks/" all name /myapp/locks.
// A missing root is created, with its ancestors, as persistent znodes.
func WithRoot(root string) Option {
	return func(o *options) {
		if ns, ok := o.SetNamespace("root", root); ok {
			o.root = "/" + ns.Path
		}
	}
}

// WithSessionTimeout sets the session timeout asked of the server
// (default [DefaultSessionTimeout]), which may negotiate another.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		switch {
		case d <= 0:
			o.Fail("session timeout %v: must be positive", d)
		case d < time.Millisecond || d > 24*time.Hour:
			o.Fail("session timeout %v: out of range", d)
		default:
			o.sessionTimeout = d
		}
	}
}

// WithIdentity sets the identity stored in each lock znode and reported by
// [Locker.Holder] (default [lock.DefaultIdentity]); see [lock.ValidateIdentity].
func WithIdentity(id string) Option {
	return func(o *options) { o.SetIdentity(id) }
}

// WithACL sets the ACL of every znode the Locker creates (root, lock
// parents, records). It must be non-empty. The default is
// zk.WorldACL(zk.PermAll) without credentials, and with them
// zk.WorldACL(zk.PermRead) plus zk.DigestACL(zk.PermAll, user, password)
// for [WithDigest] or zk.AuthACL(zk.PermAll) for [WithAuth] alone.
//
// An ACL must grant the Locker READ, CREATE and DELETE on the root and
// the lock parents and READ on its records, or its calls fail with
// [lock.ErrPermission]; to let several identities share locks, give each
// all permissions. A root created beforehand keeps its own ACL.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.Fail("empty ACL")
			return
		}
		o.acl = append([]zk.ACL(nil), acl...)
	}
}

// WithLogger sets where the Locker and its connection log (default
// slog.Default()): connection chatter at debug level, sessions and lost
// leases at info and warn. It must not be nil or a zero slog.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithLockDelay sets the lock-delay d (default none): after a lease ends
// without a clean Release, the next grant of its name waits d. d must be
// positive. See "Lock-delay" in docs/design/zookeeper.md.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) { o.SetLockDelay(d) }
}

// WithMeterProvider is [lock.WithMeterProvider] for a Locker made by [Dial].
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.SetMeterProvider(mp) }
}

// WithTracerProvider is [lock.WithTracerProvider] for a Locker made by [Dial].
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.SetTracerProvider(tp) }
}

// WithNameAttribute is [lock.WithNameAttribute] for a Locker made by [Dial].
func WithNameAttribute(f func(name string) string) Option {
	return func(o *options) { o.SetNameAttribute(f) }
}

// WithLossMargin sets how much earlier than the server could expire the
// session a cut-off Locker declares its leases lost (default T/2, T the
// negotiated session timeout). It must be positive and at most 5T/6; one
// below T/3 is raised to T/3, with a warning. A negotiated timeout too
// short for it fails Dial, and lowers it in a later session. Why:
// docs/design/zookeeper-loss.md.
func WithLossMargin(d time.Duration) Option {
	return func(o *options) { o.SetLossMargin(d) }
}

// WithDialer sets the function [Dial] uses to open each TCP connection
// (default net.DialTimeout); with [WithTLS], TLS runs over the connections
// it opens. It must not be nil.
func WithDialer(d zk.Dialer) Option {
	return func(o *options) {
		if d == nil {
			o.Fail("nil dialer")
			return
		}
		o.dialer = d
	}
}

// WithHostProvider sets how [Dial]'s connection picks the next server to
// try (default go-zookeeper's, which resolves each address once, at Dial,
// and tries them in random order). It must not be nil.
func WithHostProvider(hp zk.HostProvider) Option {
	return func(o *options) {
		if nilcheck.IsNil(hp) {
			o.Fail("nil host provider")
			return
		}
		o.hosts = hp
	}
}

// buildOptions applies opts over the defaults (errors without prefix).
func buildOptions(opts []Option) (*options, error) {
	o := &options{
		root:           DefaultRoot,
		sessionTimeout: DefaultSessionTimeout,
		clock:          clock.Real(),
		layout:         LayoutFencelock,
	}
	if err := config.Apply(o, &o.Common, opts); err != nil {
		return nil, err
	}
	o.Logger = o.Logger.With(config.LogBackend, backend)
	if o.acl == nil {
		o.acl = o.defaultACL()
	}
	if o.layout != LayoutFencelock && o.LockDelay > 0 {
		return nil, fmt.Errorf("%w: lock-delay with layout %s: its markers would be records the recipe cannot parse", lock.ErrInvalidConfig, o.layout)
	}
	if o.LossMargin != 0 && o.LossMargin > maxMargin(o.sessionTimeout) {
		return nil, fmt.Errorf("%w: loss margin %v: must be at most five sixths of the session timeout %v", lock.ErrInvalidConfig, o.LossMargin, o.sessionTimeout)
	}
	return o, nil
}

// margin returns the loss margin for a negotiated session timeout.
func (o *options) margin(timeout time.Duration) time.Duration {
	m, _ := o.clampMargin(timeout)
	return m
}

// clampMargin returns the loss margin for a negotiated session timeout
// and, when it is not the one asked for, why.
func (o *options) clampMargin(timeout time.Duration) (time.Duration, string) {
	if o.LossMargin == 0 {
		return timeout / defaultLossMarginFraction, ""
	}
	switch lo, hi := timeout/minLossMarginFraction, maxMargin(timeout); {
	case o.LossMargin < lo:
		return lo, fmt.Sprintf("raised to a third of the session timeout %v, the most the leader's view of the session can lag behind the Locker's", timeout)
	case o.LossMargin > hi:
		return hi, fmt.Sprintf("lowered to five sixths of the session timeout %v, so that two keepalives fit before the deadline", timeout)
	}
	return o.LossMargin, ""
}

// checkNegotiated says whether the margin fits the negotiated timeout.
func (o *options) checkNegotiated(timeout time.Duration) error {
	if o.LossMargin != 0 && o.LossMargin > maxMargin(timeout) {
		return fmt.Errorf("%w: negotiated session timeout %v is too short for the loss margin %v: the margin must be at most five sixths of it (%v), so that the Locker can hear from the server before it stops trusting the session",
			lock.ErrInvalidConfig, timeout, o.LossMargin, maxMargin(timeout))
	}
	return nil
}

// maxMargin is the largest margin: it leaves two keepalive intervals.
func maxMargin(timeout time.Duration) time.Duration {
	return timeout - 2*(timeout/keepaliveFraction)
}
