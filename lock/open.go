package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/internal/nilcheck"
)

// Driver opens Lockers for one URL scheme; backends [Register] it in init.
type Driver interface {
	// Open returns a Locker configured by u, parsed and its scheme
	// matched, and by cfg. Anything it does not accept (an unknown query
	// key, a field of cfg it does not support) is an error wrapping
	// [ErrInvalidConfig], never ignored.
	Open(ctx context.Context, u *url.URL, cfg OpenConfig) (Locker, error)
}

// OpenConfig is what the options given to [Open] set, for a [Driver], each
// checked by Open. A zero field was not given: the backend's default
// applies. An Identity given with the URL's identity key too is an error.
type OpenConfig struct {
	Logger         *slog.Logger             // [WithLogger]
	MeterProvider  metric.MeterProvider     // [WithMeterProvider]
	TracerProvider trace.TracerProvider     // [WithTracerProvider]
	Identity       string                   // [WithIdentity]
	NameAttribute  func(name string) string // [WithNameAttribute]

	opts config.Common // checks and gathers what the options give
}

// OpenOption configures a Locker made by [Open], whatever its backend. A
// bad value (a nil or typed nil logger or provider, an invalid identity)
// makes Open fail with [ErrInvalidConfig]. Backends have options too.
type OpenOption func(*OpenConfig)

// WithLogger sets the logger of the Locker and of its backend client
// (default [slog.Default]). It must not be nil or a zero slog.Logger.
func WithLogger(l *slog.Logger) OpenOption {
	return func(c *OpenConfig) { c.opts.SetLogger(l) }
}

// WithMeterProvider sets the provider of the Locker's metrics; without it,
// the Locker records none. It must not be nil. The instrumentation scope
// is "github.com/fencelock/fencelock", and the instruments, the same on
// every backend, are:
//
//	fencelock.acquire.duration      histogram, s       backend, kind, outcome (granted, locked, cancelled, lost, error)
//	fencelock.hold.duration         histogram, s       backend, kind
//	fencelock.leases.held           up-down, {lease}   backend, kind
//	fencelock.acquisitions.waiting  up-down, {acquisition}  backend, kind (Acquire calls only)
//	fencelock.leases.lost           counter, {lease}   backend, kind, reason
//	fencelock.session.starts        counter, {session} backend
//	fencelock.session.ends          counter, {session} backend, reason (closed, or a loss reason)
//	fencelock.fencing.decisions     counter, {decision} helper, decision (accepted, rejected)
//	fencelock.election.leader       up-down, {leader}  election (1 while leading)
//	fencelock.election.changes      counter, {change}  election, change (elected, ended)
//
// Attribute keys are prefixed "fencelock." (backend "etcd" or
// "zookeeper"; kind "exclusive", "shared" or "permit"). A loss reason is
// expired (the server ended the session), deleted (by someone else),
// disconnected (nothing heard until the loss deadline), revoked (the
// Locker ended its session, unable to delete a record) or closed. The
// fencing helpers ("guard", "sqlfence", "httpfence", "etcdlock.GuardedTxn",
// "zklock.GuardedMulti") take a provider by their own options, and names
// are attributes only as [WithNameAttribute] maps them.
func WithMeterProvider(mp metric.MeterProvider) OpenOption {
	return func(c *OpenConfig) { c.opts.SetMeterProvider(mp) }
}

// WithTracerProvider sets the provider of the Locker's spans; without it,
// the Locker records none. It must not be nil. The spans are
// fencelock.acquire, fencelock.release and fencelock.fenced_write (the
// guarded writes, sqlfence's Apply and httpfence's Handler), each with the
// token as fencelock.token.
func WithTracerProvider(tp trace.TracerProvider) OpenOption {
	return func(c *OpenConfig) { c.opts.SetTracerProvider(tp) }
}

// WithIdentity sets the identity stored with the Locker's records (see
// [ValidateIdentity]). A URL that gives the identity key as well is an
// error.
func WithIdentity(id string) OpenOption {
	return func(c *OpenConfig) { c.opts.SetIdentity(id) }
}

// WithNameAttribute makes lock names an attribute (fencelock.lock) of the
// Locker's metrics and spans as f maps them, for instance to a few classes
// ("" for none). Without it no metric or span carries a lock name, which
// keeps the number of series bounded. f must be non-nil and safe for
// concurrent use.
func WithNameAttribute(f func(name string) string) OpenOption {
	return func(c *OpenConfig) { c.opts.SetNameAttribute(f) }
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a driver available to [Open] under scheme. Like
// database/sql.Register it is for init functions, and panics on an empty
// scheme, a nil driver or a scheme registered twice.
func Register(scheme string, driver Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if scheme == "" || driver == nil {
		panic("lock: Register with an empty scheme or a nil driver")
	}
	if _, dup := drivers[scheme]; dup {
		panic("lock: Register called twice for scheme " + scheme)
	}
	drivers[scheme] = driver
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	return slices.Sorted(maps.Keys(drivers))
}

// Open returns a Locker for rawURL, for instance
// "etcd://h1:2379,h2:2379/prefix?ttl=10s" or
// "zk://h1:2181,h2:2181/root?session_timeout=10s". The scheme's backend
// must be registered, usually by importing its package:
//
//	import _ "github.com/fencelock/fencelock/etcdlock"
//
// A nil ctx, a nil or bad option, or a bad URL (one that does not parse,
// lacks a scheme or the "//" after it, has an unknown scheme or a
// fragment, or bad hosts, path, query or user information as the backend
// checks them with [URLHosts], [URLPath] and [CheckQuery]) is an error
// wrapping [ErrInvalidConfig] that never repeats the URL's user
// information. ctx bounds the connection attempt only.
func Open(ctx context.Context, rawURL string, opts ...OpenOption) (Locker, error) {
	if ctx == nil {
		return nil, fmt.Errorf("lock: open: %w: nil context", ErrInvalidConfig)
	}
	var cfg OpenConfig
	for i, o := range opts {
		if o == nil {
			cfg.opts.Fail("option %d: nil", i)
			continue
		}
		o(&cfg)
	}
	if err := cfg.opts.Err(); err != nil {
		return nil, fmt.Errorf("lock: open: %w", err)
	}
	c := cfg.opts
	cfg = OpenConfig{Logger: c.Logger, MeterProvider: c.Telemetry.MeterProvider, TracerProvider: c.Telemetry.TracerProvider,
		Identity: c.Identity, NameAttribute: c.Telemetry.NameAttribute}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Parse's *url.Error repeats the URL, password included.
		return nil, fmt.Errorf("lock: open: %w: malformed URL: %w", ErrInvalidConfig, errors.Unwrap(err))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("lock: open %q: %w: no scheme (want one of %s)", describe(u), ErrInvalidConfig, strings.Join(Schemes(), ", "))
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("lock: open %q: %w: want %s://host:port[,host:port...]/path", describe(u), ErrInvalidConfig, u.Scheme)
	}
	if u.Fragment != "" || strings.Contains(rawURL, "#") {
		return nil, fmt.Errorf("lock: open %q: %w: a fragment (#...) is not supported", describe(u), ErrInvalidConfig)
	}
	driversMu.RLock()
	d, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("lock: open %q: %w: unknown scheme %q (registered: %s; did you import the backend package?)",
			describe(u), ErrInvalidConfig, u.Scheme, strings.Join(Schemes(), ", "))
	}
	l, err := d.Open(ctx, u, cfg)
	if err != nil {
		return nil, err
	}
	if nilcheck.IsNil(l) {
		return nil, fmt.Errorf("lock: open %q: driver for %q returned no Locker and no error", describe(u), u.Scheme)
	}
	return l, nil
}

// describe returns u for an error message, without its user information.
func describe(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// The URL helpers below are for drivers. Their errors carry no package
// prefix: the driver adds its own, once.

// URLHosts returns the comma-separated host:port list of a backend URL. An
// empty list or element, or one without a port (1 to 65535), is an error
// wrapping [ErrInvalidConfig].
func URLHosts(u *url.URL) ([]string, error) {
	if u == nil {
		return nil, fmt.Errorf("URL hosts: %w: nil URL", ErrInvalidConfig)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%s URL %q: %w: no host", u.Scheme, describe(u), ErrInvalidConfig)
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		i := strings.LastIndexByte(h, ':')
		if port, err := strconv.ParseUint(h[i+1:], 10, 16); i <= 0 || err != nil || port == 0 {
			return nil, fmt.Errorf("%s URL %q: %w: host %q is not host:port", u.Scheme, describe(u), ErrInvalidConfig, h)
		}
	}
	return hosts, nil
}

// URLPath returns the namespace of a backend URL: its path without the
// slash that ends the host list and without a trailing slash ("" for no
// path), so "etcd://h:2379/app/locks" gives "app/locks" and
// "etcd://h:2379//app/locks" gives "/app/locks". The namespace follows the
// rule of etcdlock.WithPrefix and zklock.WithRoot: a valid lock name after
// an optional leading and trailing slash, not starting with the segment
// "zookeeper". Anything else is an error wrapping [ErrInvalidConfig].
func URLPath(u *url.URL) (string, error) {
	if u == nil {
		return "", fmt.Errorf("URL path: %w: nil URL", ErrInvalidConfig)
	}
	p := strings.TrimPrefix(u.Path, "/")
	if p == "" {
		return "", nil
	}
	ns, err := names.ParseNamespace(p)
	if err != nil {
		return "", fmt.Errorf("%s URL %q: %w: path: %w", u.Scheme, describe(u), ErrInvalidConfig, err)
	}
	if ns.Rooted {
		return "/" + ns.Path, nil
	}
	return ns.Path, nil
}

// CheckQuery returns the URL's query, or an error wrapping
// [ErrInvalidConfig] if it does not parse or has a key not in allowed or
// given more than once.
func CheckQuery(u *url.URL, allowed ...string) (url.Values, error) {
	if u == nil {
		return nil, fmt.Errorf("URL query: %w: nil URL", ErrInvalidConfig)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%s URL %q: %w: query: %w", u.Scheme, describe(u), ErrInvalidConfig, err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) { // the same key every time
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%s URL %q: %w: unknown query key %q (known: %s)", u.Scheme, describe(u), ErrInvalidConfig, k, strings.Join(allowed, ", "))
		}
		if n := len(q[k]); n != 1 {
			return nil, fmt.Errorf("%s URL %q: %w: query key %q given %d times", u.Scheme, describe(u), ErrInvalidConfig, k, n)
		}
	}
	return q, nil
}

// URLDuration returns the duration under key in q (time.ParseDuration's
// syntax) and whether it was present. A value that does not parse or is
// not positive is an error wrapping [ErrInvalidConfig].
func URLDuration(q url.Values, key string) (time.Duration, bool, error) {
	s, ok := q[key]
	if !ok {
		return 0, false, nil
	}
	if len(s) != 1 {
		return 0, true, fmt.Errorf("URL query %s: %w: given %d times", key, ErrInvalidConfig, len(s))
	}
	d, err := time.ParseDuration(s[0])
	if err != nil {
		return 0, true, fmt.Errorf("URL query %s=%q: %w: %w", key, s[0], ErrInvalidConfig, err)
	}
	if d <= 0 {
		return 0, true, fmt.Errorf("URL query %s=%q: %w: must be positive", key, s[0], ErrInvalidConfig)
	}
	return d, true, nil
}
