package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// Defaults of [ElectionConfig].
const (
	// DefaultMinBackoff is the first pause after a failed campaign.
	DefaultMinBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff caps the pause between failed campaigns.
	DefaultMaxBackoff = 10 * time.Second
	// DefaultReleaseTimeout bounds the release at the end of a term.
	DefaultReleaseTimeout = 10 * time.Second
)

// ElectionConfig configures an [Election]. A zero field means its default;
// a negative duration or a contradiction is an error wrapping
// [ErrInvalidConfig]. [NewElection] copies the struct.
type ElectionConfig struct {
	// OnStarted is called in its own goroutine each time this candidate is
	// elected, with the leadership context, cancelled the moment the term
	// ends (context.Cause says why), and the term, the lease's fencing
	// token. It may block for the term or return at once (returning does
	// not end the term), and must return promptly once ctx is done.
	// Required.
	OnStarted func(ctx context.Context, term fencing.Token)

	// OnStopped is called once after each term, before the lease is
	// released (see [Election]). It must be quick and must not call Resign.
	// err is nil after Resign or the end of Run's context, else the lease's
	// error (wrapping [ErrLost], or [ErrReleased] if the Locker was
	// closed). Default: none.
	OnStopped func(term fencing.Token, err error)

	// OnNewLeader is called with the current leader and then every change
	// (the zero Holder: none), one call at a time, never the same leader
	// twice in a row, all returned before Run returns; not ordered with
	// OnStarted and OnStopped. It needs the Locker to be an [Observer], and
	// misses what that Observe misses. Default: none.
	OnNewLeader func(leader Holder)

	// OnError is called, from Run's goroutines, with every error Run
	// retries after a backoff (a failed Acquire or watch, a session lost
	// while waiting). It must not block for long. Default: dropped.
	OnError func(err error)

	// StopOnLoss makes Run return, wrapping [ErrLost], after the first term
	// whose lease was lost. By default the candidate campaigns again.
	StopOnLoss bool

	// MinBackoff is the pause after a failed campaign, doubled per further
	// failure in a row up to MaxBackoff, randomised between half and all
	// of its value, and reset by a grant. Default [DefaultMinBackoff].
	MinBackoff time.Duration

	// MaxBackoff caps the pause; not smaller than MinBackoff. Default
	// [DefaultMaxBackoff], or MinBackoff when that is larger.
	MaxBackoff time.Duration

	// ReleaseTimeout bounds the release at the end of a term. A failed
	// release is reported to OnError and by Resign; the session's expiry
	// then ends the lease. Default [DefaultReleaseTimeout].
	ReleaseTimeout time.Duration

	// MeterProvider records the election's metrics (see
	// [WithMeterProvider]). A typed nil is an error. Default: nothing is
	// recorded.
	MeterProvider metric.MeterProvider

	// NameAttribute maps the election's name to the value of the attribute
	// fencelock.election ("" for none). Default: no attribute.
	NameAttribute func(name string) string
}

// Election runs one candidate in a leader election over any [Locker]: the
// leader holds the lock called name, its identity is the Locker's, and its
// term is the lease's fencing token. Candidates are elected in the order
// the Locker serves them.
//
// Each term runs in a fixed order: the lease is granted; OnStarted is
// called with the leadership context; the term ends and that context is
// cancelled; OnStarted returns; OnStopped is called and returns; the lease
// is released; Run campaigns again or returns. Both callbacks are called
// exactly once per term and have returned before Run returns. Unless a
// lease is lost, the spans from OnStarted to the return of OnStopped of
// different candidates never overlap.
//
// Not guaranteed: a leader learns it lost its lease only when the Locker
// does, and code still running then may write while a successor leads;
// send the term with each write and have the resource enforce it (package
// fencing). Leader and OnNewLeader report what the backend said a moment
// ago.
//
// Its methods are safe for concurrent use. Run may be called again after
// it has returned, not while it runs.
type Election struct {
	l       Locker
	name    string
	cfg     ElectionConfig // the caller's copy, with the defaults filled in
	running atomic.Bool
	mu      sync.Mutex
	cur     *term // the current term, nil between terms
	tel     *telemetry.Telemetry
}

// term is the state of one term, shared between Run and Resign.
type term struct {
	token fencing.Token
	end   context.CancelCauseFunc // cancels the leadership context
	ended chan struct{}           // closed once the lease has been released
	err   error                   // the term's end, set before ended is closed
}

// leadershipKey marks a leadership context with its term, so that Resign
// called from OnStarted can tell it is being asked to end its own term.
type leadershipKey struct{}

// errResigned is the cause of a leadership context cancelled by Resign.
var errResigned = errors.New("lock: election: resigned")

// NewElection returns a candidate for the election called name (a lock
// name), campaigning through l. A bad name or configuration is an error
// wrapping [ErrInvalidName] or [ErrInvalidConfig].
func NewElection(l Locker, name string, cfg ElectionConfig) (*Election, error) {
	if nilcheck.IsNil(l) {
		return nil, fmt.Errorf("lock: election %q: %w: nil Locker", name, ErrInvalidConfig)
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("lock: election: %w", err)
	}
	if cfg.OnStarted == nil {
		return nil, fmt.Errorf("lock: election %q: %w: OnStarted is nil", name, ErrInvalidConfig)
	}
	if min(cfg.MinBackoff, cfg.MaxBackoff, cfg.ReleaseTimeout) < 0 {
		return nil, fmt.Errorf("lock: election %q: %w: a negative duration (MinBackoff %v, MaxBackoff %v, ReleaseTimeout %v)",
			name, ErrInvalidConfig, cfg.MinBackoff, cfg.MaxBackoff, cfg.ReleaseTimeout)
	}
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, DefaultMinBackoff)
	if cfg.MaxBackoff != 0 && cfg.MaxBackoff < cfg.MinBackoff {
		return nil, fmt.Errorf("lock: election %q: %w: MaxBackoff %v is smaller than MinBackoff %v", name, ErrInvalidConfig, cfg.MaxBackoff, cfg.MinBackoff)
	}
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, max(DefaultMaxBackoff, cfg.MinBackoff))
	cfg.ReleaseTimeout = cmp.Or(cfg.ReleaseTimeout, DefaultReleaseTimeout)
	if cfg.MeterProvider != nil && nilcheck.IsNil(cfg.MeterProvider) {
		return nil, fmt.Errorf("lock: election %q: %w: MeterProvider is a typed nil", name, ErrInvalidConfig)
	}
	if _, ok := l.(Observer); !ok && cfg.OnNewLeader != nil {
		return nil, fmt.Errorf("lock: election %q: %w: OnNewLeader is set but %T does not implement lock.Observer", name, ErrInvalidConfig, l)
	}
	// Without a provider tel is nil; a refused instrument stays a no-op.
	tel, _ := telemetry.New("", telemetry.Config{MeterProvider: cfg.MeterProvider, NameAttribute: cfg.NameAttribute})
	return &Election{l: l, name: name, cfg: cfg, tel: tel}, nil
}

// Name returns the election's name, its lock's ("" for a nil *Election).
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// check refuses a nil or zero *Election (one not made by [NewElection])
// and a nil ctx with an error wrapping [ErrInvalidConfig].
func (e *Election) check(ctx context.Context, op string) error {
	switch {
	case e == nil || e.l == nil:
		return fmt.Errorf("lock: election: %s: %w: not created by NewElection", op, ErrInvalidConfig)
	case ctx == nil:
		return fmt.Errorf("lock: election %q: %s: %w: nil context", e.name, op, ErrInvalidConfig)
	}
	return nil
}

// Run campaigns until ctx ends, calling the callbacks for each term as
// described on [Election]. It returns an error wrapping ctx's error,
// [ErrClosed] when the Locker is closed, or, with StopOnLoss, [ErrLost];
// other errors go to OnError and are retried with backoff. Run ends the
// current term and waits for the callbacks before it returns.
func (e *Election) Run(ctx context.Context) error {
	if err := e.check(ctx, "run"); err != nil {
		return err
	}
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("lock: election %q: Run called while already running", e.name)
	}
	defer e.running.Store(false)

	if e.cfg.OnNewLeader != nil {
		wctx, stop := context.WithCancel(ctx)
		var watch sync.WaitGroup
		watch.Go(func() { e.watchLeader(wctx) })
		defer func() { stop(); watch.Wait() }()
	}
	return e.campaign(ctx)
}

// campaign acquires the lock and leads a term on each grant, until ctx
// ends or an error ends the election; other errors are reported and
// retried with backoff.
func (e *Election) campaign(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		lease, err := e.l.Acquire(ctx, e.name)
		switch {
		case ctx.Err() != nil:
			if err == nil { // granted as Run was stopped: hand the lock on
				_ = release(ctx, lease, e.cfg.ReleaseTimeout)
			}
		case errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidName):
			return fmt.Errorf("lock: election %q: campaign: %w", e.name, err)
		case err != nil:
			e.report(fmt.Errorf("lock: election %q: campaign: %w", e.name, err))
			e.pause(ctx, failures)
			failures++
		default:
			failures = 0
			if err := e.lead(ctx, lease); e.cfg.StopOnLoss && errors.Is(err, ErrLost) {
				return fmt.Errorf("lock: election %q: term %v: %w", e.name, lease.Token(), err)
			}
		}
	}
	return fmt.Errorf("lock: election %q: %w", e.name, ctx.Err())
}

// lead runs one term on lease and returns the error given to OnStopped.
func (e *Election) lead(ctx context.Context, lease Lease) error {
	t := &term{token: lease.Token(), ended: make(chan struct{})}
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, leadershipKey{}, t))
	defer cancel(nil)
	t.end = cancel
	e.mu.Lock()
	e.cur = t
	e.mu.Unlock()
	e.tel.Leader(e.name, true)
	defer e.tel.Leader(e.name, false)

	var started sync.WaitGroup
	started.Go(func() { e.cfg.OnStarted(lctx, t.token) })
	select { // the term ends: Run's ctx or Resign cancel lctx themselves
	case <-lease.Done():
		cancel(lease.Err())
	case <-lctx.Done():
	}
	started.Wait()

	ended := endedErr(lease)
	if e.cfg.OnStopped != nil {
		e.cfg.OnStopped(t.token, ended)
	}
	// A lost lease is released too, to clean up; its error adds nothing.
	res := ended
	if rerr := release(ctx, lease, e.cfg.ReleaseTimeout); ended == nil && rerr != nil {
		res = fmt.Errorf("lock: election %q: release term %v: %w", e.name, t.token, rerr)
		e.report(res)
	}

	e.mu.Lock()
	t.err = res
	e.cur = nil
	close(t.ended)
	e.mu.Unlock()
	return ended
}

// pause waits the backoff after failures+1 failures; false if ctx ended.
func (e *Election) pause(ctx context.Context, failures int) bool {
	d := e.cfg.MinBackoff
	for i := 0; i < failures && d < e.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, e.cfg.MaxBackoff)
	return clock.Sleep(ctx, d/2+rand.N(d/2+1), nil, nil, nil) == nil
}

func (e *Election) report(err error) {
	if e.cfg.OnError != nil {
		e.cfg.OnError(err)
	}
}

// watchLeader calls OnNewLeader with every change of leader until ctx ends.
func (e *Election) watchLeader(ctx context.Context) {
	var last *Holder // nil until the first leader is reported
	failures := 0
	for {
		ch, errf, err := e.l.(Observer).Observe(ctx, e.name)
		if err == nil {
			for h := range ch {
				failures = 0
				if last == nil || h != *last {
					last = &h
					e.cfg.OnNewLeader(h)
				}
			}
			err = errf()
		}
		if ctx.Err() != nil {
			return
		}
		e.report(fmt.Errorf("lock: election %q: observe: %w", e.name, cmp.Or(err, errors.New("watch ended"))))
		if !e.pause(ctx, failures) {
			return
		}
		failures++
	}
}

// Resign ends this candidate's current term: it cancels the leadership
// context and, once OnStarted and OnStopped have returned, releases the
// lease, electing the next waiting candidate. Run then campaigns again;
// to leave the election, cancel Run's context instead.
//
// Resign waits until the lease is released or ctx is done, and returns the
// release's error (wrapping [ErrLost] if the lease was lost), or one
// wrapping [ErrNotHeld] when this candidate is not the leader. Called from
// OnStarted with the leadership context, it returns nil at once. It must
// not be called from OnStopped.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.check(ctx, "resign"); err != nil {
		return err
	}
	e.mu.Lock()
	t := e.cur
	e.mu.Unlock()
	if t == nil {
		return fmt.Errorf("lock: election %q: resign: %w: not the leader", e.name, ErrNotHeld)
	}
	t.end(errResigned)
	select {
	case <-t.ended:
		if t.err != nil {
			return fmt.Errorf("lock: election %q: resign: %w", e.name, t.err)
		}
		return nil
	case <-ctx.Done():
		if own, _ := ctx.Value(leadershipKey{}).(*term); own == t {
			return nil
		}
		return fmt.Errorf("lock: election %q: resign: %w", e.name, ctx.Err())
	}
}

// Leader returns the election's current leader, or an error wrapping
// [ErrNotHeld] when there is none. Like [Locker.Holder], it reports what
// the backend said, which may already have changed.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	if err := e.check(ctx, "leader"); err != nil {
		return Holder{}, err
	}
	return e.l.Holder(ctx, e.name)
}

// Observe is [Observer.Observe] on the election's lock: the current
// leader, then every change (the zero Holder: no leader). It returns an
// error wrapping [ErrInvalidConfig] if the Locker is not an [Observer].
func (e *Election) Observe(ctx context.Context) (<-chan Holder, func() error, error) {
	if err := e.check(ctx, "observe"); err != nil {
		return nil, nil, err
	}
	obs, ok := e.l.(Observer)
	if !ok {
		return nil, nil, fmt.Errorf("lock: election %q: observe: %w: %T does not implement lock.Observer", e.name, ErrInvalidConfig, e.l)
	}
	return obs.Observe(ctx, e.name)
}
