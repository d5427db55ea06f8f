// Package config holds the options every backend shares (and lock.Open
// gathers) with their one validation. Errors are all gathered, each
// wrapping lock.ErrInvalidConfig, without a package prefix: the backend
// adds its own once. It also holds the words both backends use for what
// happened to a call, in metrics and logs.
package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/internal/sentinel"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// The keys of log lines both backends use for the same things.
const (
	LogBackend = "backend" // "etcd", "zookeeper"
	LogLock    = "lock"    // the lock's name
	LogToken   = "token"   // a lease's fencing token
	LogSession = "session" // the session's ID: etcd lease ID, ZooKeeper session ID, in hex
	LogErr     = "err"     // the error or cause
)

// Common holds the options every backend has, embedded in its options. A
// zero field was not given; Apply then fills Identity and Logger, while
// LossMargin and LockDelay stay 0 (the backend's margin, no lock-delay).
type Common struct {
	Identity   string
	Logger     *slog.Logger
	LossMargin time.Duration
	LockDelay  time.Duration
	Telemetry  telemetry.Config // from WithMeterProvider, WithTracerProvider, WithNameAttribute

	errs []error
}

// Fail records an error wrapping lock.ErrInvalidConfig.
func (c *Common) Fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{sentinel.InvalidConfig}, args...)...))
}

// SetIdentity sets the identity if it is valid (names.CheckIdentity).
func (c *Common) SetIdentity(id string) {
	if err := names.CheckIdentity(id); err != nil {
		c.errs = append(c.errs, err)
		return
	}
	c.Identity = id
}

// SetLogger sets the logger; nil, or a zero slog.Logger (which has no
// handler), is an error.
func (c *Common) SetLogger(l *slog.Logger) {
	if l == nil || l.Handler() == nil {
		c.Fail("logger: nil, or a zero slog.Logger without a handler")
		return
	}
	c.Logger = l
}

// SetMeterProvider sets the meter provider; a nil or typed nil is an error.
func (c *Common) SetMeterProvider(mp metric.MeterProvider) {
	c.check(c.Telemetry.SetMeterProvider(mp))
}

// SetTracerProvider is SetMeterProvider for the tracer provider.
func (c *Common) SetTracerProvider(tp trace.TracerProvider) {
	c.check(c.Telemetry.SetTracerProvider(tp))
}

func (c *Common) check(err error) {
	if err != nil {
		c.Fail("%w", err)
	}
}

// SetNameAttribute sets the mapping of lock names to the value of their
// metric and span attribute; nil is an error.
func (c *Common) SetNameAttribute(f func(string) string) {
	if f == nil {
		c.Fail("name attribute: nil function")
		return
	}
	c.Telemetry.NameAttribute = f
}

// SetOpen applies what lock.Open's options gave (the fields of
// lock.OpenConfig, in order; a zero value was not given). urlIdentity
// says whether the URL gave an identity too, which with id is an error.
func (c *Common) SetOpen(l *slog.Logger, mp metric.MeterProvider, tp trace.TracerProvider, id string, name func(string) string, urlIdentity bool) {
	if l != nil {
		c.SetLogger(l)
	}
	if mp != nil {
		c.SetMeterProvider(mp)
	}
	if tp != nil {
		c.SetTracerProvider(tp)
	}
	if name != nil {
		c.SetNameAttribute(name)
	}
	if id != "" {
		if urlIdentity {
			c.Fail("identity given both in the URL and as an option")
			return
		}
		c.SetIdentity(id)
	}
}

// SetLossMargin sets the loss margin, which must be positive; the backend
// checks it against its TTL or session timeout after Apply.
func (c *Common) SetLossMargin(d time.Duration) { c.positive("loss margin", d, &c.LossMargin) }

// SetLockDelay sets the lock-delay, which must be positive: leaving the
// option out is how to have none.
func (c *Common) SetLockDelay(d time.Duration) { c.positive("lock delay", d, &c.LockDelay) }

func (c *Common) positive(what string, d time.Duration, dst *time.Duration) {
	if d <= 0 {
		c.Fail("%s %v: must be positive", what, d)
		return
	}
	*dst = d
}

// SetNamespace checks a namespace (an etcd key prefix or a ZooKeeper root,
// called what in the error) by names.ParseNamespace.
func (c *Common) SetNamespace(what, path string) (names.Namespace, bool) {
	ns, err := names.ParseNamespace(path)
	if err != nil {
		c.Fail("%s: %w", what, err)
		return names.Namespace{}, false
	}
	return ns, true
}

// Apply applies opts to target, whose Common is c, then fills c's
// defaults; a nil option is an error. It returns [Common.Err].
func Apply[O ~func(*T), T any](target *T, c *Common, opts []O) error {
	for i, opt := range opts {
		if opt == nil {
			c.Fail("option %d: nil", i)
			continue
		}
		opt(target)
	}
	if err := c.Err(); err != nil {
		return err
	}
	if c.Identity == "" {
		c.Identity = names.DefaultIdentity()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Outcome returns the outcome attribute of an acquisition that returned
// err (telemetry.Granted for nil). ctx is the call's context.
func Outcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return telemetry.Granted
	case errors.Is(err, sentinel.Locked), errors.Is(err, sentinel.Incompatible):
		return telemetry.Locked
	case ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, sentinel.Closed):
		return telemetry.Cancelled
	case errors.Is(err, sentinel.Lost):
		return telemetry.Lost
	}
	return telemetry.Error
}

// EndReason returns the reason a lease that ended with err counts as
// lost: "" for its own Release, the reason err was tagged with
// (telemetry.WithReason), telemetry.Deleted for an untagged loss.
func EndReason(err error) string {
	if r := telemetry.ReasonOf(err); r != "" {
		return r
	}
	if errors.Is(err, sentinel.Lost) {
		return telemetry.Deleted
	}
	return ""
}

// Err returns nil, the one error recorded, or one error that wraps each,
// their texts joined by "; ".
func (c *Common) Err() error {
	switch len(c.errs) {
	case 0:
		return nil
	case 1:
		return c.errs[0]
	}
	return &multiError{errs: append([]error(nil), c.errs...)}
}

// multiError is several configuration errors, read on one line.
type multiError struct{ errs []error }

func (m *multiError) Error() string {
	parts := make([]string, len(m.errs))
	for i, err := range m.errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (m *multiError) Unwrap() []error { return m.errs }
