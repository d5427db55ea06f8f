package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencelock/fencelock/fencing"
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

// ElectionConfig configures an [Election]. The zero value of every field but
// OnStarted means its documented default; a negative duration, or a
// combination that contradicts itself, is an error wrapping
// [ErrInvalidConfig]. [NewElection] copies the struct, so changing it
// afterwards has no effect.
type ElectionConfig struct {
	// OnStarted is called, in a goroutine of its own, each time this
	// candidate is elected. ctx is the leadership context: it is cancelled
	// the moment the term ends — the lease ends (lost, or its Locker
	// closed), Run's context ends, or [Election.Resign] is called — and
	// context.Cause(ctx) says why. term is the lease's fencing token:
	// strictly greater than every earlier term of this election. Send it
	// with every write the leader makes and have the resource enforce it
	// (package fencing).
	//
	// OnStarted may block for the whole term or return at once (having
	// started work that watches ctx); returning does not end the term.
	// It must return promptly once ctx is done: OnStopped is called, and
	// the lease released, only after it has returned.
	//
	// Required.
	OnStarted func(ctx context.Context, term fencing.Token)

	// OnStopped is called once after each term, after OnStarted has
	// returned and before the lease is released, so that unless the lease
	// was lost it still runs under the term: its writes may use the term's
	// token, and the next leader is elected only after it has returned. It
	// must therefore be quick, and it must not call Resign. err is nil when
	// the term ended by Resign or by the end of Run's context; otherwise it
	// is the lease's error, which wraps [ErrLost] when the lease was lost
	// (or [ErrReleased] when the Locker was closed under the leader).
	//
	// Default: nothing is called.
	OnStopped func(term fencing.Token, err error)

	// OnNewLeader, if set, is called while Run runs with the election's
	// leader and then with every change of leader, in order; the zero
	// Holder (Token 0) means there is no leader. Calls are made one at a
	// time from one goroutine and the last has returned before Run returns.
	// They are not ordered with OnStarted and OnStopped: the backend's
	// watch and this candidate's own grant travel on different paths. It
	// is fed by the Locker's [Observer], which outlives lost connections,
	// expired sessions, restarted servers and (etcd) compactions; a leader
	// is never reported twice in a row. Should an Observer end anyway (a
	// third-party one), the watch is restarted with backoff: changes that
	// happened in the gap are not reported, but the leader it resumes with
	// is, unless it is the one reported last. A backend may also miss a
	// term shorter than about one round trip; see its Observe.
	//
	// It requires the Locker to implement [Observer]; NewElection fails
	// otherwise. Default: nothing is called and nothing is watched.
	OnNewLeader func(leader Holder)

	// OnError, if set, is called with every error Run recovers from by
	// campaigning or watching again after a backoff: a failed Acquire, a
	// session lost while waiting, a failed watch. It is called from Run's
	// goroutines and must not block for long. Default: errors are dropped
	// (Run retries regardless).
	OnError func(err error)

	// StopOnLoss makes Run return, with an error wrapping [ErrLost], after
	// the first term that ends because the lease was lost. By default the
	// candidate campaigns again at once.
	StopOnLoss bool

	// MinBackoff is the pause after the first failed campaign; each
	// further failure in a row doubles it up to MaxBackoff, and each pause
	// is randomised between half and all of its value. A successful
	// campaign resets it. Default [DefaultMinBackoff].
	MinBackoff time.Duration

	// MaxBackoff caps the pause between failed campaigns. It must not be
	// smaller than MinBackoff. Default [DefaultMaxBackoff], or MinBackoff
	// when that is larger.
	MaxBackoff time.Duration

	// ReleaseTimeout bounds the release of the lease at the end of a term,
	// which runs on a fresh context because Run's may already be done. A
	// failed release is reported to OnError and by Resign; the backend then
	// ends the lease on its own when the session expires. Default
	// [DefaultReleaseTimeout].
	ReleaseTimeout time.Duration

	// MeterProvider, if set, records the election's metrics: the
	// up-down counter fencelock.election.leader, 1 while this candidate
	// leads and 0 otherwise, and the counter fencelock.election.changes of
	// its terms begun (fencelock.change "elected") and ended ("ended").
	// The election's name is their attribute fencelock.election only as
	// NameAttribute maps it; without that, the elections of a process add
	// up in one series. A typed nil is an error. Default: nothing is
	// recorded.
	MeterProvider metric.MeterProvider

	// NameAttribute maps the election's name to the value of the
	// attribute fencelock.election ("" for none). Default: no attribute.
	NameAttribute func(name string) string
}

// Election runs one candidate in a leader election over any [Locker]: the
// leader is the holder of the lock called name, its identity is the
// Locker's, and its term is the lease's fencing token.
//
// Run campaigns by acquiring the lock. Candidates are elected in the order
// they started waiting, as the Locker serves waiters. A leader's term ends
// when its lease ends, when Run's context ends, or by Resign; the lease is
// then released, which hands leadership to the next waiting candidate within
// about one round trip to the backend rather than after a timeout.
//
// The order of events in each term is fixed: the lease is granted;
// OnStarted is called in its own goroutine with the leadership context; the
// term ends and that context is cancelled; OnStarted returns (Run waits for
// it); OnStopped is called and returns; the lease is released; Run campaigns
// again or returns. OnStopped is never called without OnStarted, both are
// called exactly once per term, and both have returned before Run returns.
// Unless a lease is lost, the span from one candidate's OnStarted to the
// return of its OnStopped lies within its lease, so such spans of different
// candidates never overlap.
//
// What is not guaranteed: a leader can lose its lease at any moment (a
// paused process, a partition, an expired session), and learns it only when
// the Locker does. The leadership context is cancelled the moment the lease
// is known to have ended, but code already running — a write on its way, a
// goroutine that has not yet looked at ctx — cannot be stopped by it, and a
// successor may be elected while that code still runs. Only the term, sent
// with each write and enforced by the resource (package fencing), makes such
// writes safe. Likewise Leader and OnNewLeader report what the backend said
// a moment ago, not what is true now.
//
// The methods of Election are safe for concurrent use. Run may be called
// again after it has returned; a Run while another is running returns an
// error at once.
type Election struct {
	l       Locker
	name    string
	cfg     ElectionConfig // the caller's copy, with the defaults filled in
	obs     Observer       // nil unless the Locker implements Observer
	mu      sync.Mutex
	running bool
	cur     *term // the current term, nil between terms
	tel     *telemetry.Telemetry
}

// term is the state of one term, shared between Run and Resign.
type term struct {
	token      fencing.Token
	resign     chan struct{} // closed by Resign
	resignOnce sync.Once
	ended      chan struct{} // closed once the lease has been released
	err        error         // the term's end, set before ended is closed
}

// leadershipKey marks a leadership context with its term, so that Resign
// called from OnStarted can tell it is being asked to end its own term.
type leadershipKey struct{}

// errResigned is the cause of a leadership context cancelled by Resign.
var errResigned = errors.New("lock: election: resigned")

// NewElection returns a candidate for the election called name, campaigning
// through l. name must be a valid lock name ([ValidateName]); the errors for
// a bad name or configuration wrap [ErrInvalidName] and [ErrInvalidConfig].
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
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"MinBackoff", cfg.MinBackoff},
		{"MaxBackoff", cfg.MaxBackoff},
		{"ReleaseTimeout", cfg.ReleaseTimeout},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("lock: election %q: %w: %s is negative (%v)", name, ErrInvalidConfig, d.field, d.v)
		}
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	switch {
	case cfg.MaxBackoff != 0 && cfg.MaxBackoff < cfg.MinBackoff:
		return nil, fmt.Errorf("lock: election %q: %w: MaxBackoff %v is smaller than MinBackoff %v", name, ErrInvalidConfig, cfg.MaxBackoff, cfg.MinBackoff)
	case cfg.MaxBackoff == 0:
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
	}
	if cfg.MeterProvider != nil && nilcheck.IsNil(cfg.MeterProvider) {
		return nil, fmt.Errorf("lock: election %q: %w: MeterProvider is a typed nil", name, ErrInvalidConfig)
	}
	e := &Election{l: l, name: name, cfg: cfg}
	if cfg.MeterProvider != nil {
		// A refused instrument stays a no-op.
		e.tel, _ = telemetry.New("", telemetry.Config{MeterProvider: cfg.MeterProvider, NameAttribute: cfg.NameAttribute})
	}
	if obs, ok := l.(Observer); ok {
		e.obs = obs
	} else if cfg.OnNewLeader != nil {
		return nil, fmt.Errorf("lock: election %q: %w: OnNewLeader is set but %T does not implement lock.Observer", name, ErrInvalidConfig, l)
	}
	return e, nil
}

// Name returns the election's name, which is the name of its lock ("" for
// a nil *Election).
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

// Run campaigns until ctx ends, calling the configured callbacks for each
// term as described on [Election]. It returns an error wrapping ctx's error
// when ctx ends, [ErrClosed] when the Locker is closed, and, with
// StopOnLoss, [ErrLost] after a term lost its lease. Other errors — a
// backend that cannot be reached, a session lost while waiting — are
// reported to OnError and retried with backoff.
//
// Before returning, Run ends the current term (releasing the lease, so that
// the next candidate is elected at once), waits for OnStarted and OnStopped,
// and stops watching for OnNewLeader.
func (e *Election) Run(ctx context.Context) error {
	if err := e.check(ctx, "run"); err != nil {
		return err
	}
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return fmt.Errorf("lock: election %q: Run called while already running", e.name)
	}
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()

	if e.cfg.OnNewLeader != nil {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.watchLeader(wctx)
		}()
		defer func() { stop(); <-done }()
	}
	return e.campaign(ctx)
}

// campaign acquires the lock and leads a term on each grant, until ctx
// ends or an error ends the election; other errors are reported and
// retried with backoff.
func (e *Election) campaign(ctx context.Context) error {
	failures := 0
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lock: election %q: %w", e.name, err)
		}
		lease, err := e.l.Acquire(ctx, e.name)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("lock: election %q: %w", e.name, ctx.Err())
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidName) {
				return fmt.Errorf("lock: election %q: campaign: %w", e.name, err)
			}
			e.report(fmt.Errorf("lock: election %q: campaign: %w", e.name, err))
			if !e.pause(ctx, failures) {
				return fmt.Errorf("lock: election %q: %w", e.name, ctx.Err())
			}
			failures++
			continue
		}
		failures = 0
		if ctx.Err() != nil {
			// Granted as Run was being stopped: hand the lock on without
			// starting a term that would end at once.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReleaseTimeout)
			_ = lease.Release(rctx)
			cancel()
			return fmt.Errorf("lock: election %q: %w", e.name, ctx.Err())
		}
		if err := e.lead(ctx, lease); err != nil && e.cfg.StopOnLoss && errors.Is(err, ErrLost) {
			return fmt.Errorf("lock: election %q: term %v: %w", e.name, lease.Token(), err)
		}
	}
}

// lead runs one term on lease and returns the error given to OnStopped.
func (e *Election) lead(ctx context.Context, lease Lease) error {
	t := &term{token: lease.Token(), resign: make(chan struct{}), ended: make(chan struct{})}
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, leadershipKey{}, t))
	defer cancel(nil)
	e.mu.Lock()
	e.cur = t
	e.mu.Unlock()
	e.tel.Leader(e.name, true)
	defer e.tel.Leader(e.name, false)

	started := make(chan struct{})
	go func() {
		defer close(started)
		e.cfg.OnStarted(lctx, t.token)
	}()

	var cause error
	select {
	case <-lease.Done():
		cause = lease.Err()
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-t.resign:
		cause = errResigned
	}
	cancel(cause)
	<-started

	var ended error
	select {
	case <-lease.Done():
		ended = lease.Err()
	default:
	}
	if e.cfg.OnStopped != nil {
		e.cfg.OnStopped(t.token, ended)
	}

	// Release even a lease that has ended: for a lost one, Release cleans
	// up what it can, and its error adds nothing to the lease's own.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReleaseTimeout)
	rerr := lease.Release(rctx)
	rcancel()
	res := ended
	if ended == nil && rerr != nil {
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

// pause waits out the backoff after failures+1 failures in a row. It reports
// false if ctx ended first.
func (e *Election) pause(ctx context.Context, failures int) bool {
	d := e.cfg.MinBackoff
	for i := 0; i < failures && d < e.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, e.cfg.MaxBackoff)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (e *Election) report(err error) {
	if e.cfg.OnError != nil {
		e.cfg.OnError(err)
	}
}

// watchLeader calls OnNewLeader with every change of leader until ctx ends,
// restarting the watch with backoff when it fails.
func (e *Election) watchLeader(ctx context.Context) {
	var last Holder
	first := true
	failures := 0
	for {
		ch, errf, err := e.obs.Observe(ctx, e.name)
		if err == nil {
			for h := range ch {
				failures = 0
				if first || h != last {
					first, last = false, h
					e.cfg.OnNewLeader(h)
				}
			}
			err = errf()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		e.report(fmt.Errorf("lock: election %q: observe: %w", e.name, err))
		if !e.pause(ctx, failures) {
			return
		}
		failures++
	}
}

// Resign ends this candidate's current term: it cancels the leadership
// context, and once OnStarted and OnStopped have returned releases the
// lease, so that the next waiting candidate is elected within about one
// round trip to the backend. Run then campaigns again, behind the candidates already waiting;
// to leave the election altogether, cancel Run's context instead (which
// releases the lease just the same).
//
// Resign waits until the lease has been released or ctx is done, and
// returns the release's error (wrapping [ErrLost] if the lease had been
// lost). It returns an error wrapping [ErrNotHeld] when this candidate is
// not the leader. Called from OnStarted with the leadership context (or one
// derived from it), it cannot wait for its own caller to return: it ends the
// term and returns nil at once, and the lease is released after OnStarted
// returns. It must not be called from OnStopped.
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
	t.resignOnce.Do(func() { close(t.resign) })
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

// Leader returns the election's current leader: its identity and term. It
// returns an error wrapping [ErrNotHeld] when there is none. Like
// [Locker.Holder], it reports what the backend said, which may already have
// changed.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	if err := e.check(ctx, "leader"); err != nil {
		return Holder{}, err
	}
	return e.l.Holder(ctx, e.name)
}

// Observe sends the election's current leader and then every change of
// leader, in order, until ctx is done or the Locker is closed; the zero
// Holder means there is no leader. It is [Observer.Observe] on the election's lock,
// backed by the backend's watch, and returns an error wrapping
// [ErrInvalidConfig] if the Locker does not implement [Observer]. The
// channel is closed at the end and the returned function then tells why.
// It reports what the backend's watch saw: see the backend's Observe for
// terms too short to be seen.
func (e *Election) Observe(ctx context.Context) (<-chan Holder, func() error, error) {
	if err := e.check(ctx, "observe"); err != nil {
		return nil, nil, err
	}
	if e.obs == nil {
		return nil, nil, fmt.Errorf("lock: election %q: observe: %w: %T does not implement lock.Observer", e.name, ErrInvalidConfig, e.l)
	}
	return e.obs.Observe(ctx, e.name)
}
