package etcdlock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/lock"
)

// Defaults used when an option is left out.
const (
	// DefaultPrefix is the key prefix under which lock records live.
	DefaultPrefix = "fencelock/"
	// DefaultTTL is the TTL of the etcd lease behind a Locker's session.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest TTL accepted: etcd leases count whole seconds.
	// A longer TTL granted by the server leaves the deadline on this one.
	MinTTL = time.Second
)

// backend is the value of the backend attribute of metrics and log lines.
const backend = "etcd"

// maxCloseWait bounds Close's revocation and a failed call's cleanup.
const maxCloseWait = 5 * time.Second

// Option configures a Locker. Leaving an option out means its documented
// default; giving an option a bad value makes [New] (or [lock.Open]) return
// an error wrapping [lock.ErrInvalidConfig].
type Option func(*options)

type options struct {
	config.Common // identity, logger, loss margin (0: the default, TTL/5)
	prefix        string
	ttl           time.Duration
	layout        Layout
}

// WithPrefix sets the key prefix under which the Locker keeps its records
// (default [DefaultPrefix]). It accepts the paths zklock.WithRoot does and
// uses them as written, plus a trailing slash: "/app/locks" and
// "app/locks" are two key spaces. "" and "/" are the empty prefixes, for
// keys "<name>/…" and "/<name>/…" (etcdctl lock's, say). One prefix should
// not be nested inside another (docs/design/etcd.md, "Key layout").
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix == "" || prefix == "/" {
			o.prefix = prefix
			return
		}
		ns, ok := o.SetNamespace("prefix", prefix)
		if !ok {
			return
		}
		o.prefix = ns.Path + "/"
		if ns.Rooted {
			o.prefix = "/" + o.prefix
		}
	}
}

// WithTTL sets the TTL of the etcd lease that backs the Locker's session
// (default [DefaultTTL]): about how long a crashed holder blocks its
// locks. It must be a whole number of seconds, at least [MinTTL].
func WithTTL(ttl time.Duration) Option {
	return func(o *options) {
		switch {
		case ttl <= 0:
			o.Fail("ttl %v: must be positive", ttl)
		case ttl < MinTTL:
			o.Fail("ttl %v: must be at least %v", ttl, MinTTL)
		case ttl%time.Second != 0:
			o.Fail("ttl %v: must be a whole number of seconds", ttl)
		default:
			o.ttl = ttl
		}
	}
}

// WithIdentity sets the identity stored in every lock record and reported by
// [Locker.Holder] (default [lock.DefaultIdentity]); see [lock.ValidateIdentity].
func WithIdentity(identity string) Option {
	return func(o *options) { o.SetIdentity(identity) }
}

// WithLogger sets the logger for background events such as keepalive
// failures, session loss and failed cleanups (default: slog.Default()),
// the session logged as its lease's ID in hex. A Locker from [lock.Open]
// also logs its client's warnings there at debug level, errors at warn
// level. It must not be nil or a zero slog.Logger.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.SetLogger(logger) }
}

// WithMeterProvider is [lock.WithMeterProvider] for a Locker made by [New].
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.SetMeterProvider(mp) }
}

// WithTracerProvider is [lock.WithTracerProvider] for a Locker made by [New].
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.SetTracerProvider(tp) }
}

// WithNameAttribute is [lock.WithNameAttribute] for a Locker made by [New].
func WithNameAttribute(f func(name string) string) Option {
	return func(o *options) { o.SetNameAttribute(f) }
}

// WithLossMargin sets how long before the server could expire the session
// lease a lease is declared lost when keepalives go unanswered (default: a
// fifth of the TTL). It must exceed the longest stall of the process, and
// be positive and at most half the TTL (docs/design/etcd.md, "The loss
// deadline").
func WithLossMargin(margin time.Duration) Option {
	return func(o *options) { o.SetLossMargin(margin) }
}

// WithLockDelay sets the lock-delay d (default 0: none): after a lease of
// this Locker ends without a clean Release, the next grant of its name
// waits d, so that the old holder's writes drain first. d must be
// positive. See "Lock-delay" in docs/design/etcd.md.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) { o.SetLockDelay(d) }
}

// A Layout is the shape and place of a Locker's records (see the package
// doc, "Keys and security", and docs/design/etcd.md, "Layouts").
type Layout string

const (
	// LayoutFencelock, the default: records "<prefix><name>/#<lease>-<n>".
	LayoutFencelock Layout = "fencelock"
	// LayoutConcurrency: etcd's concurrency.Mutex records,
	// "<prefix><name>/<lease>"; exclusive locks only, a second acquisition
	// of a name through one Locker waits in it for the first's record.
	LayoutConcurrency Layout = "concurrency"
)

// WithLayout sets the Locker's layout (default [LayoutFencelock]). The
// default layout does not see the other's records: switch a name's
// layout when no Locker holds or waits on it, or move to a new name.
func WithLayout(layout Layout) Option {
	return func(o *options) {
		if layout != LayoutFencelock && layout != LayoutConcurrency {
			o.Fail("layout %q: must be %q or %q", layout, LayoutFencelock, LayoutConcurrency)
		}
		o.layout = layout
	}
}

// buildOptions applies opts over the defaults and checks the result. Its
// errors carry no package prefix.
func buildOptions(opts []Option) (*options, error) {
	o := &options{prefix: DefaultPrefix, ttl: DefaultTTL, layout: LayoutFencelock}
	if err := config.Apply(o, &o.Common, opts); err != nil {
		return nil, err
	}
	o.Logger = o.Logger.With(config.LogBackend, backend)
	if o.LossMargin == 0 {
		o.LossMargin = o.ttl / 5
	} else if o.LossMargin > o.ttl/2 {
		return nil, fmt.Errorf("%w: loss margin %v: must be at most half the ttl %v", lock.ErrInvalidConfig, o.LossMargin, o.ttl)
	}
	return o, nil
}
