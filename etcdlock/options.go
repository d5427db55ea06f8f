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
	// A server may still grant a longer TTL than asked for (its minimum is
	// derived from its election timeout); the Locker then keeps using the
	// shorter, configured TTL for its own loss deadline, which is safe.
	MinTTL = time.Second
)

// backend is the value of the backend attribute of metrics and log lines.
const backend = "etcd"

// maxCloseWait bounds the lease revocation done by Close and the cleanup
// deletes done after a cancelled call.
const maxCloseWait = 5 * time.Second

// Option configures a Locker. Leaving an option out means its documented
// default; giving an option a bad value makes [New] (or [lock.Open]) return
// an error wrapping [lock.ErrInvalidConfig].
type Option func(*options)

type options struct {
	config.Common // identity, logger, loss margin (0: the default, TTL/5)
	prefix        string
	ttl           time.Duration
}

// WithPrefix sets the key prefix under which the Locker keeps its records
// (default [DefaultPrefix]). It accepts the same paths as zklock.WithRoot,
// checked by the same rule (see [lock.URLPath]): a valid lock name, with or
// without a leading and a trailing slash, whose first segment is not
// "zookeeper".
//
// The prefix is used as written, plus a trailing slash when missing: a
// leading slash stays, as in etcd's own convention. So "/app/locks" and
// "/app/locks/" put records under "/app/locks/…" (the key space of
// concurrency.NewMutex(s, "/app/locks/")), while "app/locks" puts them
// under "app/locks/…": on etcd those are two different key spaces, and
// Lockers that should see each other's locks must use the same one. One
// prefix should not be nested inside another (a prefix "a" with a lock
// "b/c" and a prefix "a/b" with a lock "c" name the same keys).
func WithPrefix(prefix string) Option {
	return func(o *options) {
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
// (default [DefaultTTL]). A holder that stops reaching the cluster loses its
// leases after about this long, and so does a crashed holder's lock stay
// blocked for about this long. It must be a whole number of seconds, at
// least [MinTTL]: etcd leases count whole seconds, and rounding silently
// would change the loss deadline behind the caller's back.
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
// [Locker.Holder] (default [lock.DefaultIdentity], "hostname/pid/random").
// It must follow the rule of [lock.ValidateIdentity], the same on every
// backend: 1 to 1024 bytes of UTF-8 without control characters.
func WithIdentity(identity string) Option {
	return func(o *options) {
		o.SetIdentity(identity)
	}
}

// WithLogger sets the logger for background events: keepalive failures,
// session loss, failed cleanups, and (at debug level) create attempts that
// failed without an answer (default: slog.Default(), as in zklock). Every
// line carries backend=etcd, and where they apply the keys lock, token
// and session (the session lease's ID, in hex). A Locker from [lock.Open]
// also sends its etcd client's own log lines there (the client's warnings
// at debug level, its errors at warn level); a client given to [New] logs
// where its own configuration says. It must not be nil or a zero
// slog.Logger (which has no handler).
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) {
		o.SetLogger(logger)
	}
}

// WithMeterProvider sets the provider of the Locker's metrics (see
// [lock.WithMeterProvider] for the instruments); without it the Locker
// records none. It must not be nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) {
		o.SetMeterProvider(mp)
	}
}

// WithTracerProvider sets the provider of the Locker's spans (acquire,
// release, guarded writes); without it the Locker records none. It must
// not be nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		o.SetTracerProvider(tp)
	}
}

// WithNameAttribute makes lock names the attribute fencelock.lock of the
// Locker's metrics and spans, as f maps them ("" for none); see
// [lock.WithNameAttribute]. Without it, no lock name is an attribute. It
// must not be nil.
func WithNameAttribute(f func(name string) string) Option {
	return func(o *options) {
		o.SetNameAttribute(f)
	}
}

// WithLossMargin sets how long before the server could expire the session
// lease a lease is declared lost when keepalives go unanswered (default: a
// fifth of the TTL, 2s for the default TTL). A lease is lost locally at the
// send time of the last acknowledged keepalive plus the TTL minus this
// margin; the margin absorbs timer latency, a local clock that runs slower
// than the server's, and scheduling pauses. It must be positive and at most
// half the TTL, so that a single late keepalive does not end the session.
func WithLossMargin(margin time.Duration) Option {
	return func(o *options) {
		o.SetLossMargin(margin)
	}
}

// WithLockDelay sets the lock-delay d (default 0: none): when a lease of
// this Locker ends without a clean Release, or its acquisition's session
// ends while it waits, the next grant of its name waits d after the
// grantee saw the record gone, so that the old holder's writes in flight
// drain first. d must be positive. See "Lock-delay" in docs/design/etcd.md.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) {
		o.SetLockDelay(d)
	}
}

// buildOptions applies opts over the defaults and checks the result. Its
// errors, all of them, carry no package prefix: New and the URL driver
// add one.
func buildOptions(opts []Option) (*options, error) {
	o := &options{prefix: DefaultPrefix, ttl: DefaultTTL}
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
