// Package telemetry holds the one copy of fencelock's metric instruments
// and spans (names, units, attributes), shared by both backends, the
// election and the fencing helpers. A nil *Telemetry, or one made from a
// zero Config, records nothing and allocates nothing. A lock name is never
// an attribute unless the user maps it.
package telemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/nilcheck"
)

// scope is the instrumentation scope of every meter and tracer.
const scope = "github.com/fencelock/fencelock"

// The attribute keys.
const (
	KeyBackend  = attribute.Key("fencelock.backend")
	KeyKind     = attribute.Key("fencelock.kind")
	KeyOutcome  = attribute.Key("fencelock.outcome")
	KeyReason   = attribute.Key("fencelock.reason")
	KeyHelper   = attribute.Key("fencelock.helper")
	KeyDecision = attribute.Key("fencelock.decision")
	KeyLock     = attribute.Key("fencelock.lock")
	KeyElection = attribute.Key("fencelock.election")
	KeyToken    = attribute.Key("fencelock.token")
	KeyChange   = attribute.Key("fencelock.change")
)

// Outcomes of an acquisition (the outcome attribute of fencelock.acquire.duration).
const (
	Granted   = "granted"   // the call returned a lease
	Locked    = "locked"    // TryAcquire found the lock held
	Cancelled = "cancelled" // the call's context ended, or the Locker closed
	Lost      = "lost"      // the session was lost while waiting
	Error     = "error"     // anything else
)

// Reasons a lease ends without its own Release (the reason attribute of
// fencelock.leases.lost and, with Closed, of fencelock.session.ends).
const (
	Expired      = "expired"      // the server ended the session
	Deleted      = "deleted"      // someone else deleted the record
	Disconnected = "disconnected" // nothing heard until the loss deadline
	Revoked      = "revoked"      // the Locker ended its own session
	Closed       = "closed"       // the Locker was closed
)

// Fencing decisions (the decision attribute of fencelock.fencing.decisions).
const (
	Accepted = "accepted"
	Rejected = "rejected"
)

// reasonError tags an error with the reason a lease ended.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// WithReason returns err, unchanged in text and in what errors.Is finds,
// tagged with the reason a lease or session ended, which [ReasonOf] reads.
func WithReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &reasonError{reason: reason, err: err}
}

// ReasonOf returns the reason err was tagged with by [WithReason], or "".
// It avoids errors.As's reflection where it can: that would be most of
// what counting a released lease costs.
func ReasonOf(err error) string {
	for err != nil {
		switch e := err.(type) {
		case *reasonError:
			return e.reason
		case interface{ As(any) bool }:
			var r *reasonError
			if errors.As(err, &r) {
				return r.reason
			}
			return ""
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				if r := ReasonOf(err); r != "" {
					return r
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// Config is what a user gives; a nil field records nothing (providers) or
// no name attribute (NameAttribute, which may also return "" for none).
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	NameAttribute  func(name string) string // a lock or election name to its attribute's value
}

// SetMeterProvider sets c's meter provider; a nil or typed nil one is an
// error without a sentinel (the caller wraps its own).
func (c *Config) SetMeterProvider(mp metric.MeterProvider) error {
	if nilcheck.IsNil(mp) {
		return errors.New("meter provider: nil")
	}
	c.MeterProvider = mp
	return nil
}

// SetTracerProvider is SetMeterProvider for the tracer provider.
func (c *Config) SetTracerProvider(tp trace.TracerProvider) error {
	if nilcheck.IsNil(tp) {
		return errors.New("tracer provider: nil")
	}
	c.TracerProvider = tp
	return nil
}

// Telemetry records the metrics and spans of one component (a Locker, a
// Guard, a Store, an Election), safe for concurrent use.
type Telemetry struct {
	backend  string
	nameAttr func(string) string
	meter    bool
	tracer   trace.Tracer // nil: no spans
	instruments

	// sets maps a setKey to its *options, built once per set; named counts
	// those with a mapped name, kept up to about maxNamed.
	sets  sync.Map
	named atomic.Int64
}

// maxNamed bounds the attribute sets with a mapped name a Telemetry keeps:
// a mapping may give every lock its own value.
const maxNamed = 1024

// setKey names an attribute set: the backend's, up to two more
// attributes, and the mapped name under nameKey (each when not "").
type setKey struct {
	k1, k2, nameKey attribute.Key
	v1, v2, name    string
}

// options are an attribute set as the options of Add and of Record,
// ready to be passed on without allocating.
type options struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// instruments are a Telemetry's metric instruments, one per metric;
// each is a no-op when the meter provider refused it.
type instruments struct {
	acquireDur metric.Float64Histogram
	holdDur    metric.Float64Histogram
	held       metric.Int64UpDownCounter
	waiting    metric.Int64UpDownCounter
	lost       metric.Int64Counter
	sessStarts metric.Int64Counter
	sessEnds   metric.Int64Counter
	decisions  metric.Int64Counter
	leader     metric.Int64UpDownCounter
	changes    metric.Int64Counter
}

// durationBuckets are the histograms' bucket boundaries, in seconds: from a
// round trip on a local network to an hour-long hold.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New returns the Telemetry of a component of backend ("etcd",
// "zookeeper", or "" for a fencing helper or an election), or nil when cfg
// asks for neither metrics nor spans. An instrument the provider refuses
// stays a no-op; the errors are returned for the caller to log.
func New(backend string, cfg Config) (*Telemetry, error) {
	if cfg.MeterProvider == nil && cfg.TracerProvider == nil {
		return nil, nil
	}
	t := &Telemetry{backend: backend, nameAttr: cfg.NameAttribute}
	if cfg.TracerProvider != nil {
		t.tracer = cfg.TracerProvider.Tracer(scope)
	}
	if cfg.MeterProvider == nil {
		return t, nil
	}
	m := cfg.MeterProvider.Meter(scope)
	if m == nil {
		return t, errors.New("the meter provider returned no meter")
	}
	t.meter = true
	var errs []error
	hist := keep(&errs, metric.Float64Histogram(noop.Float64Histogram{}))
	counter := keep(&errs, metric.Int64Counter(noop.Int64Counter{}))
	updown := keep(&errs, metric.Int64UpDownCounter(noop.Int64UpDownCounter{}))
	secs := []metric.Float64HistogramOption{metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...)}
	t.acquireDur = hist(m.Float64Histogram("fencelock.acquire.duration", append(secs, metric.WithDescription(
		"Time from the start of an acquisition to its end: granted, locked, cancelled, lost or error."))...))
	t.holdDur = hist(m.Float64Histogram("fencelock.hold.duration", append(secs, metric.WithDescription(
		"Time from a grant to the end of the lease: released, lost or closed."))...))
	t.held = updown(m.Int64UpDownCounter("fencelock.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases granted and not yet ended.")))
	t.waiting = updown(m.Int64UpDownCounter("fencelock.acquisitions.waiting", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquire calls in progress (TryAcquire calls are not counted).")))
	t.lost = counter(m.Int64Counter("fencelock.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended without their own Release, by reason.")))
	t.sessStarts = counter(m.Int64Counter("fencelock.session.starts", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions begun.")))
	t.sessEnds = counter(m.Int64Counter("fencelock.session.ends", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions ended, by reason (closed, or why it was lost).")))
	t.decisions = counter(m.Int64Counter("fencelock.fencing.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Fenced writes accepted or rejected as stale, by helper.")))
	t.leader = updown(m.Int64UpDownCounter("fencelock.election.leader", metric.WithUnit("{leader}"),
		metric.WithDescription("1 while this process leads the election, else 0.")))
	t.changes = counter(m.Int64Counter("fencelock.election.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Terms this candidate began (elected) and ended (ended).")))
	return t, errors.Join(errs...)
}

// keep returns a function that passes on an instrument, or none when the
// provider returned nil, and gathers the provider's errors in errs.
func keep[T any](errs *[]error, none T) func(T, error) T {
	return func(i T, err error) T {
		*errs = append(*errs, err)
		if any(i) == nil {
			return none
		}
		return i
	}
}

// Metrics reports whether t records metrics.
func (t *Telemetry) Metrics() bool { return t != nil && t.meter }

// label returns the value the user maps name to, or "" for none.
func (t *Telemetry) label(name string) string {
	if t.nameAttr == nil || name == "" {
		return ""
	}
	return t.nameAttr(name)
}

// opts returns the options of the attribute set k names, built once.
func (t *Telemetry) opts(k setKey) *options {
	if k.name == "" {
		k.nameKey = ""
	}
	if o, ok := t.sets.Load(k); ok {
		return o.(*options)
	}
	kv := make([]attribute.KeyValue, 0, 4)
	if t.backend != "" {
		kv = append(kv, KeyBackend.String(t.backend))
	}
	for _, a := range [...]attribute.KeyValue{k.k1.String(k.v1), k.k2.String(k.v2), k.nameKey.String(k.name)} {
		if a.Key != "" { // nameKey is "" without a name
			kv = append(kv, a)
		}
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	o := &options{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	if k.name != "" && t.named.Load() >= maxNamed {
		return o
	}
	if prev, loaded := t.sets.LoadOrStore(k, o); loaded {
		return prev.(*options)
	}
	if k.name != "" {
		t.named.Add(1)
	}
	return o
}

// leaseOpts returns the options of a lease's attributes: its kind, its
// mapped name (label) and, when key is not "", key=val.
func (t *Telemetry) leaseOpts(kind, label string, key attribute.Key, val string) *options {
	return t.opts(setKey{k1: KeyKind, v1: kind, k2: key, v2: val, nameKey: KeyLock, name: label})
}

// span starts a span named name; spans must be on (t.tracer not nil).
func (t *Telemetry) span(ctx context.Context, name, lockName string, kv ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.backend != "" {
		kv = append(kv, KeyBackend.String(t.backend))
	}
	if v := t.label(lockName); v != "" {
		kv = append(kv, KeyLock.String(v))
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(kv...))
}

func endSpan(sp trace.Span, err error, kv ...attribute.KeyValue) {
	if sp == nil {
		return
	}
	if len(kv) > 0 {
		sp.SetAttributes(kv...)
	}
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// Acquire is one acquisition in progress; the zero Acquire records nothing.
type Acquire struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	start time.Time
	label string // the mapped name
	kind  string
	base  *options // kind and label; nil with metrics off
	wait  bool
}

// StartAcquire begins an acquisition of name, of kind ("exclusive",
// "shared", "permit"); wait is false for TryAcquire.
func (t *Telemetry) StartAcquire(ctx context.Context, name, kind string, wait bool) (context.Context, Acquire) {
	if t == nil {
		return ctx, Acquire{}
	}
	// The span's attributes are built only for a span: they escape.
	var sp trace.Span
	if t.tracer != nil {
		ctx, sp = t.span(ctx, "fencelock.acquire", name, KeyKind.String(kind), attribute.Bool("fencelock.wait", wait))
	}
	a := Acquire{t: t, ctx: ctx, span: sp, start: time.Now(), kind: kind, wait: wait}
	if t.meter {
		a.label = t.label(name)
		a.base = t.leaseOpts(kind, a.label, "", "")
		if wait {
			t.waiting.Add(ctx, 1, a.base.add...)
		}
	}
	return ctx, a
}

// End records the acquisition's outcome, with the granted token, and
// returns the Hold of a granted lease.
func (a Acquire) End(outcome string, token uint64, err error) Hold {
	t := a.t
	if t == nil {
		return Hold{}
	}
	now := time.Now()
	if t.meter {
		if a.wait {
			t.waiting.Add(a.ctx, -1, a.base.add...)
		}
		t.acquireDur.Record(a.ctx, now.Sub(a.start).Seconds(), t.leaseOpts(a.kind, a.label, KeyOutcome, outcome).rec...)
	}
	switch {
	case a.span == nil:
	case outcome == Granted:
		endSpan(a.span, nil, KeyOutcome.String(outcome), KeyToken.Int64(int64(token)))
	default:
		endSpan(a.span, err, KeyOutcome.String(outcome))
	}
	if outcome != Granted {
		return Hold{}
	}
	if t.meter {
		t.held.Add(a.ctx, 1, a.base.add...)
	}
	return Hold{t: t, start: now, label: a.label, kind: a.kind}
}

// Hold is one granted lease; the zero Hold records nothing.
type Hold struct {
	t     *Telemetry
	start time.Time
	label string // the mapped name
	kind  string
}

// End records the end of the lease, once: reason "" for its own Release
// (or a loss [Hold.Lost] records later), else a loss reason or Closed.
func (h Hold) End(reason string) {
	t := h.t
	if t == nil || !t.meter {
		return
	}
	ctx := context.Background()
	o := t.leaseOpts(h.kind, h.label, "", "")
	t.held.Add(ctx, -1, o.add...)
	t.holdDur.Record(ctx, time.Since(h.start).Seconds(), o.rec...)
	h.Lost(reason)
}

// Counts reports whether End and Lost record anything (metrics are on).
func (h Hold) Counts() bool { return h.t != nil && h.t.meter }

// Lost counts the lease as lost for reason; "" counts nothing.
func (h Hold) Lost(reason string) {
	if t := h.t; t != nil && t.meter && reason != "" {
		t.lost.Add(context.Background(), 1, t.leaseOpts(h.kind, h.label, KeyReason, reason).add...)
	}
}

// StartRelease begins a Release of the lease name with token; call the
// returned function with Release's error.
func (t *Telemetry) StartRelease(ctx context.Context, name string, token uint64) (context.Context, func(error)) {
	if t == nil || t.tracer == nil {
		return ctx, func(error) {}
	}
	ctx, sp := t.span(ctx, "fencelock.release", name, KeyToken.Int64(int64(token)))
	return ctx, func(err error) { endSpan(sp, err) }
}

// SessionStarted counts a session begun.
func (t *Telemetry) SessionStarted() {
	if t.Metrics() {
		t.sessStarts.Add(context.Background(), 1, t.opts(setKey{}).add...)
	}
}

// SessionEnded counts a session ended, with reason Closed or a loss reason.
func (t *Telemetry) SessionEnded(reason string) {
	if t.Metrics() {
		t.sessEnds.Add(context.Background(), 1, t.opts(setKey{k1: KeyReason, v1: reason}).add...)
	}
}

// StartWrite begins a fenced write by helper with token; lockName is the
// lock of a backend's guarded write (mapped like any lock name), "" for
// a resource that is not a lock. End the returned Write.
func (t *Telemetry) StartWrite(ctx context.Context, helper, lockName string, token uint64) (context.Context, Write) {
	if t == nil {
		return ctx, Write{}
	}
	var sp trace.Span
	if t.tracer != nil {
		ctx, sp = t.span(ctx, "fencelock.fenced_write", lockName, KeyHelper.String(helper), KeyToken.Int64(int64(token)))
	}
	return ctx, Write{t: t, ctx: ctx, span: sp, helper: helper}
}

// Write is one fenced write in progress; the zero Write records nothing.
type Write struct {
	t      *Telemetry
	ctx    context.Context
	span   trace.Span
	helper string
}

// End records the write's decision (Accepted, Rejected, or "" when no
// decision was made) and ends its span.
func (w Write) End(decision string, err error) {
	switch {
	case decision == "" || w.t == nil:
		endSpan(w.span, err)
	case w.span == nil: // the attribute escapes: built only for a span
		w.t.Decide(w.ctx, w.helper, decision)
	default:
		w.t.Decide(w.ctx, w.helper, decision)
		endSpan(w.span, err, KeyDecision.String(decision))
	}
}

// Decide counts one fencing decision of helper without a span.
func (t *Telemetry) Decide(ctx context.Context, helper, decision string) {
	if t.Metrics() {
		t.decisions.Add(ctx, 1, t.opts(setKey{k1: KeyHelper, v1: helper, k2: KeyDecision, v2: decision}).add...)
	}
}

// Leader records that this candidate became (true) or stopped being
// (false) the leader of election, as "elected" or "ended".
func (t *Telemetry) Leader(election string, leading bool) {
	if !t.Metrics() {
		return
	}
	d, change := int64(-1), "ended"
	if leading {
		d, change = 1, "elected"
	}
	ctx := context.Background()
	label := t.label(election)
	t.leader.Add(ctx, d, t.opts(setKey{nameKey: KeyElection, name: label}).add...)
	t.changes.Add(ctx, 1, t.opts(setKey{k1: KeyChange, v1: change, nameKey: KeyElection, name: label}).add...)
}
