package lock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// waitTimeout bounds every wait for an event that must happen; in-memory
// elections take microseconds, so reaching it means a bug.
const waitTimeout = 10 * time.Second

var nameSeq atomic.Int64

// uniqueName returns a lock name no other test uses.
func uniqueName(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("election-test/%d", nameSeq.Add(1))
}

// candidate is one Election running in its own goroutine.
type candidate struct {
	id       string
	l        *locktest.MemLocker
	e        *lock.Election
	cancel   context.CancelFunc
	finished chan struct{} // closed when Run has returned
	runErr   error         // Run's result, set before finished is closed
}

// newCandidate returns a candidate for name on m whose Locker has identity
// id, without starting it.
func newCandidate(t *testing.T, m *locktest.Memory, id, name string, cfg lock.ElectionConfig) *candidate {
	t.Helper()
	l := m.NewLocker(id)
	t.Cleanup(func() { _ = l.Close() })
	e, err := lock.NewElection(l, name, cfg)
	if err != nil {
		t.Fatalf("NewElection(%q) = %v; want nil error", name, err)
	}
	return &candidate{id: id, l: l, e: e, finished: make(chan struct{})}
}

// start runs the candidate until the test ends or stop is called.
func (c *candidate) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.finished)
		c.runErr = c.e.Run(ctx)
	}()
	t.Cleanup(func() { c.stop(t) })
}

// stop cancels Run's context and returns Run's error.
func (c *candidate) stop(t *testing.T) error {
	t.Helper()
	c.cancel()
	return c.wait(t)
}

// wait waits for Run to return and returns its error.
func (c *candidate) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-c.finished:
		return c.runErr
	case <-time.After(waitTimeout):
		t.Fatalf("%s: Run did not return within %v", c.id, waitTimeout)
		return nil
	}
}

// startCandidate is newCandidate followed by start.
func startCandidate(t *testing.T, m *locktest.Memory, id, name string, cfg lock.ElectionConfig) *candidate {
	t.Helper()
	c := newCandidate(t, m, id, name, cfg)
	c.start(t)
	return c
}

// recv waits for a value on ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s within %v", what, waitTimeout)
		var zero T
		return zero
	}
}

// waitRecords polls until name has n records (holder and waiters).
func waitRecords(t *testing.T, m *locktest.Memory, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := m.Records(name)
		if len(got) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Records(%q) = %v; want %d records", name, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// started is what OnStarted reports to a test.
type started struct {
	ctx  context.Context
	term fencing.Token
}

// stopped is what OnStopped reports to a test.
type stopped struct {
	term fencing.Token
	err  error
}

// signalling returns a config whose callbacks report on the returned
// channels (buffered, so that callbacks never wait for the test) and whose
// OnStarted blocks until its context is done.
func signalling() (lock.ElectionConfig, <-chan started, <-chan stopped) {
	st := make(chan started, 100)
	sp := make(chan stopped, 100)
	cfg := lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			st <- started{ctx, term}
			<-ctx.Done()
		},
		OnStopped: func(term fencing.Token, err error) { sp <- stopped{term, err} },
	}
	return cfg, st, sp
}

func TestNewElectionValidates(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("validate")
	t.Cleanup(func() { _ = l.Close() })
	noObserver := struct{ lock.Locker }{l} // hides Observe
	onStarted := func(context.Context, fencing.Token) {}

	tests := []struct {
		desc string
		l    lock.Locker
		name string
		cfg  lock.ElectionConfig
		want error // nil: valid
	}{
		{"zero config but OnStarted", l, "e", lock.ElectionConfig{OnStarted: onStarted}, nil},
		{"all fields", l, "a/b", lock.ElectionConfig{
			OnStarted: onStarted, OnStopped: func(fencing.Token, error) {}, OnNewLeader: func(lock.Holder) {},
			OnError: func(error) {}, StopOnLoss: true, MinBackoff: time.Millisecond, MaxBackoff: time.Second,
			ReleaseTimeout: time.Second,
		}, nil},
		{"MinBackoff above default MaxBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MinBackoff: time.Minute}, nil},
		{"MaxBackoff equal to MinBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MinBackoff: time.Second, MaxBackoff: time.Second}, nil},
		{"no Observer without OnNewLeader", noObserver, "e", lock.ElectionConfig{OnStarted: onStarted}, nil},
		{"nil Locker", nil, "e", lock.ElectionConfig{OnStarted: onStarted}, lock.ErrInvalidConfig},
		{"empty name", l, "", lock.ElectionConfig{OnStarted: onStarted}, lock.ErrInvalidName},
		{"bad name", l, "a//b", lock.ElectionConfig{OnStarted: onStarted}, lock.ErrInvalidName},
		{"nil OnStarted", l, "e", lock.ElectionConfig{OnStopped: func(fencing.Token, error) {}}, lock.ErrInvalidConfig},
		{"negative MinBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MinBackoff: -1}, lock.ErrInvalidConfig},
		{"negative MaxBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MaxBackoff: -time.Second}, lock.ErrInvalidConfig},
		{"negative ReleaseTimeout", l, "e", lock.ElectionConfig{OnStarted: onStarted, ReleaseTimeout: -time.Second}, lock.ErrInvalidConfig},
		{"MaxBackoff below MinBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MinBackoff: time.Second, MaxBackoff: time.Millisecond}, lock.ErrInvalidConfig},
		{"MaxBackoff below default MinBackoff", l, "e", lock.ElectionConfig{OnStarted: onStarted, MaxBackoff: lock.DefaultMinBackoff / 2}, lock.ErrInvalidConfig},
		{"OnNewLeader without Observer", noObserver, "e", lock.ElectionConfig{OnStarted: onStarted, OnNewLeader: func(lock.Holder) {}}, lock.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			e, err := lock.NewElection(tt.l, tt.name, tt.cfg)
			if tt.want == nil {
				if err != nil || e == nil {
					t.Fatalf("NewElection() = %v, %v; want an Election, nil", e, err)
				}
				if e.Name() != tt.name {
					t.Errorf("Name() = %q; want %q", e.Name(), tt.name)
				}
				return
			}
			if !errors.Is(err, tt.want) || e != nil {
				t.Fatalf("NewElection() = %v, %v; want nil, an error wrapping %v", e, err, tt.want)
			}
		})
	}
}

func TestNewElectionDoesNotKeepCallersConfig(t *testing.T) {
	m := locktest.NewMemory()
	cfg, st, _ := signalling()
	c := newCandidate(t, m, "a", uniqueName(t), cfg)
	cfg.OnStarted = nil // must not affect c.e
	c.start(t)
	recv(t, st, "OnStarted")
	if err := c.stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
}

// TestElectionOneLeaderAtATime runs many candidates that each resign as
// soon as they are elected, and checks that the spans from OnStarted to the
// return of OnStopped never overlap, that terms rise strictly, and that
// every OnStarted is followed by exactly one OnStopped with the same term.
func TestElectionOneLeaderAtATime(t *testing.T) {
	const (
		candidates = 8
		terms      = 200
	)
	m := locktest.NewMemory()
	name := uniqueName(t)

	var (
		mu        sync.Mutex
		active    string // the candidate between OnStarted and OnStopped's return
		lastTerm  fencing.Token
		startedBy = map[fencing.Token]string{}
		stoppedBy = map[fencing.Token]string{}
		failures  []string
		total     int
	)
	enough := make(chan struct{})
	// The first term lasts until every candidate has queued. Otherwise a
	// candidate that resigns can queue again before a slow one has queued
	// at all, and terms may rotate among the early starters for all 200
	// terms. With everyone queued before the first hand-over, the FIFO
	// queue gives each candidate a term within the first 8, so "every
	// candidate led" holds by construction, not by scheduling luck.
	allQueued := make(chan struct{})
	fail := func(format string, args ...any) {
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	cands := make([]*candidate, candidates)
	for i := range cands {
		id := fmt.Sprintf("cand-%d", i)
		var c *candidate
		cfg := lock.ElectionConfig{
			OnStarted: func(ctx context.Context, term fencing.Token) {
				mu.Lock()
				if active != "" {
					fail("%s started term %v while %s was leading", id, term, active)
				}
				active = id
				if term <= lastTerm {
					fail("%s: term %v after term %v; want rising terms", id, term, lastTerm)
				}
				lastTerm = term
				if _, dup := startedBy[term]; dup {
					fail("term %v started twice", term)
				}
				startedBy[term] = id
				total++
				first := total == 1
				if total == terms {
					close(enough)
				}
				mu.Unlock()
				if first {
					select {
					case <-allQueued:
					case <-ctx.Done():
					}
				}
				// Called with the leadership context, Resign ends the term
				// without waiting for this function.
				if err := c.e.Resign(ctx); err != nil {
					mu.Lock()
					fail("%s: Resign(leadership ctx) = %v; want nil", id, err)
					mu.Unlock()
				}
				<-ctx.Done()
			},
			OnStopped: func(term fencing.Token, err error) {
				// Give a successor elected too early the time to show up.
				for range 20 {
					runtime.Gosched()
				}
				mu.Lock()
				defer mu.Unlock()
				if startedBy[term] != id {
					fail("%s: OnStopped(%v) but OnStarted(%v) was called on %q", id, term, term, startedBy[term])
				}
				if _, dup := stoppedBy[term]; dup {
					fail("%s: OnStopped(%v) called twice", id, term)
				}
				stoppedBy[term] = id
				if err != nil {
					fail("%s: OnStopped(%v, %v); want a nil error after Resign", id, term, err)
				}
				if active != id {
					fail("%s: OnStopped(%v) while %q was leading", id, term, active)
				}
				active = ""
			},
		}
		c = newCandidate(t, m, id, name, cfg)
		cands[i] = c
	}
	for _, c := range cands {
		c.start(t)
	}
	waitRecords(t, m, name, candidates)
	close(allQueued)
	recv(t, enough, fmt.Sprintf("%d terms", terms))
	for _, c := range cands {
		if err := c.stop(t); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Run() = %v; want an error wrapping context.Canceled", c.id, err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
	if len(startedBy) < terms {
		t.Errorf("%d terms started; want at least %d", len(startedBy), terms)
	}
	if len(stoppedBy) != len(startedBy) {
		t.Errorf("%d terms stopped, %d started; want every started term stopped once Run returned", len(stoppedBy), len(startedBy))
	}
	leaders := map[string]bool{}
	for _, id := range startedBy {
		leaders[id] = true
	}
	if len(leaders) != candidates {
		t.Errorf("%d distinct candidates led; want all %d (Resign hands over to the next in line)", len(leaders), candidates)
	}
	if active != "" {
		t.Errorf("%s still leading after every Run returned", active)
	}
	if h, err := cands[0].l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder() = %v, %v; want ErrNotHeld after every Run returned", h, err)
	}
}

func TestElectionResignHandsOver(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	cfgA, startedA, stoppedA := signalling()
	cfgB, startedB, _ := signalling()

	a := startCandidate(t, m, "a", name, cfgA)
	termA := recv(t, startedA, "OnStarted of a")
	b := startCandidate(t, m, "b", name, cfgB)
	waitRecords(t, m, name, 2)

	if err := b.e.Resign(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Resign() by a waiting candidate = %v; want an error wrapping ErrNotHeld", err)
	}
	h, err := b.e.Leader(context.Background())
	if err != nil || h != (lock.Holder{Identity: "a", Token: termA.term}) {
		t.Fatalf("Leader() = %+v, %v; want a with term %v", h, err, termA.term)
	}

	if err := a.e.Resign(context.Background()); err != nil {
		t.Fatalf("Resign() = %v; want nil", err)
	}
	// Resign returns once the lease is released: a's term is over.
	select {
	case <-termA.ctx.Done():
	default:
		t.Errorf("a's leadership context not done when Resign returned")
	}
	if cause := context.Cause(termA.ctx); cause == nil || errors.Is(cause, lock.ErrLost) {
		t.Errorf("context.Cause(leadership ctx) = %v; want a resignation", cause)
	}
	if sp := recv(t, stoppedA, "OnStopped of a"); sp.term != termA.term || sp.err != nil {
		t.Errorf("OnStopped(%v, %v); want OnStopped(%v, nil)", sp.term, sp.err, termA.term)
	}
	termB := recv(t, startedB, "OnStarted of b")
	if termB.term <= termA.term {
		t.Errorf("b's term %v; want above a's term %v", termB.term, termA.term)
	}
	h, err = a.e.Leader(context.Background())
	if err != nil || h != (lock.Holder{Identity: "b", Token: termB.term}) {
		t.Errorf("Leader() = %+v, %v; want b with term %v", h, err, termB.term)
	}
	// a campaigns again, behind b.
	waitRecords(t, m, name, 2)
	if err := b.stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
	termA2 := recv(t, startedA, "a's second OnStarted")
	if termA2.term <= termB.term {
		t.Errorf("a's second term %v; want above b's term %v", termA2.term, termB.term)
	}
}

func TestElectionResignWithDoneContext(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	release := make(chan struct{})
	st := make(chan started, 1)
	cfg := lock.ElectionConfig{OnStarted: func(ctx context.Context, term fencing.Token) {
		st <- started{ctx, term}
		<-release // ignores ctx until the test lets it go
	}}
	a := startCandidate(t, m, "a", name, cfg)
	recv(t, st, "OnStarted")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.e.Resign(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Resign(cancelled ctx) while OnStarted runs = %v; want an error wrapping context.Canceled", err)
	}
	close(release)
	if err := a.stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
}

func TestElectionLostLease(t *testing.T) {
	for _, stopOnLoss := range []bool{false, true} {
		t.Run(fmt.Sprintf("StopOnLoss=%v", stopOnLoss), func(t *testing.T) {
			m := locktest.NewMemory()
			name := uniqueName(t)
			cfg, startedA, stoppedA := signalling()
			cfg.StopOnLoss = stopOnLoss
			a := startCandidate(t, m, "a", name, cfg)
			term1 := recv(t, startedA, "OnStarted")

			m.ExpireSession(a.l)
			recv(t, term1.ctx.Done(), "end of the leadership context")
			if cause := context.Cause(term1.ctx); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("context.Cause(leadership ctx) = %v; want an error wrapping ErrLost", cause)
			}
			sp := recv(t, stoppedA, "OnStopped")
			if sp.term != term1.term || !errors.Is(sp.err, lock.ErrLost) {
				t.Errorf("OnStopped(%v, %v); want OnStopped(%v, an error wrapping ErrLost)", sp.term, sp.err, term1.term)
			}
			if stopOnLoss {
				if err := a.wait(t); !errors.Is(err, lock.ErrLost) {
					t.Errorf("Run() = %v; want an error wrapping ErrLost", err)
				}
				if h, err := a.l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
					t.Errorf("Holder() = %+v, %v; want ErrNotHeld", h, err)
				}
				select {
				case st := <-startedA:
					t.Errorf("OnStarted(%v) after Run returned", st.term)
				default:
				}
				return
			}
			// The candidate campaigns again on a fresh session.
			term2 := recv(t, startedA, "second OnStarted")
			if term2.term <= term1.term {
				t.Errorf("second term %v; want above %v", term2.term, term1.term)
			}
			if err := a.stop(t); !errors.Is(err, context.Canceled) {
				t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
			}
			if sp := recv(t, stoppedA, "second OnStopped"); sp.term != term2.term || sp.err != nil {
				t.Errorf("OnStopped(%v, %v); want OnStopped(%v, nil)", sp.term, sp.err, term2.term)
			}
		})
	}
}

func TestElectionLostLeaseElectsNext(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	cfgA, startedA, stoppedA := signalling()
	cfgB, startedB, _ := signalling()
	a := startCandidate(t, m, "a", name, cfgA)
	termA := recv(t, startedA, "OnStarted of a")
	startCandidate(t, m, "b", name, cfgB)
	waitRecords(t, m, name, 2)

	m.ExpireSession(a.l)
	termB := recv(t, startedB, "OnStarted of b")
	if termB.term <= termA.term {
		t.Errorf("b's term %v; want above a's %v", termB.term, termA.term)
	}
	if sp := recv(t, stoppedA, "OnStopped of a"); !errors.Is(sp.err, lock.ErrLost) {
		t.Errorf("OnStopped(%v, %v); want an error wrapping ErrLost", sp.term, sp.err)
	}
}

// TestElectionRunWaitsForCallbacks checks the order of events at the end of
// a term: the leadership context is cancelled, OnStarted returns, OnStopped
// is called and returns, the lease is released, Run returns.
func TestElectionRunWaitsForCallbacks(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	var (
		mu  sync.Mutex
		log []string
	)
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, fmt.Sprintf(format, args...))
	}
	sawCancel := make(chan struct{})
	letGo := make(chan struct{})
	var c *candidate
	cfg := lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			logf("started")
			<-ctx.Done()
			close(sawCancel)
			<-letGo
			logf("started returns")
		},
		OnStopped: func(term fencing.Token, err error) {
			logf("stopped %v", err)
			// The lease is still held while OnStopped runs.
			if h, herr := c.l.Holder(context.Background(), name); herr != nil || h.Token != term {
				logf("holder in OnStopped: %+v, %v", h, herr)
			}
			logf("stopped returns")
		},
	}
	c = newCandidate(t, m, "a", name, cfg)
	c.start(t)
	waitRecords(t, m, name, 1)
	c.cancel()
	recv(t, sawCancel, "cancellation of the leadership context")
	select {
	case <-c.finished:
		t.Fatal("Run returned while OnStarted was still running")
	case <-time.After(20 * time.Millisecond): // a window for a wrong Run to return in
	}
	close(letGo)
	err := c.wait(t)
	logf("run returns")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
	want := []string{"started", "started returns", "stopped <nil>", "stopped returns", "run returns"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(log, want) {
		t.Errorf("events = %q; want %q", log, want)
	}
	if h, err := c.l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder() after Run = %+v, %v; want ErrNotHeld", h, err)
	}
}

func TestElectionRunTwice(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	cfg, st, _ := signalling()
	c := startCandidate(t, m, "a", name, cfg)
	recv(t, st, "OnStarted")
	if err := c.e.Run(context.Background()); err == nil {
		t.Errorf("second concurrent Run() = nil; want an error")
	}
	if err := c.stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
	// Run may be called again once it has returned.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.e.Run(ctx) }()
	recv(t, st, "OnStarted of the second Run")
	cancel()
	if err := recv(t, done, "return of the second Run"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
}

func TestElectionLockerClosed(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	cfg, st, sp := signalling()
	c := startCandidate(t, m, "a", name, cfg)
	recv(t, st, "OnStarted")
	if err := c.l.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}
	if got := recv(t, sp, "OnStopped"); !errors.Is(got.err, lock.ErrReleased) {
		t.Errorf("OnStopped(%v, %v); want an error wrapping ErrReleased", got.term, got.err)
	}
	if err := c.wait(t); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Run() = %v; want an error wrapping ErrClosed", err)
	}
}

// flaky is a real in-memory Locker whose first Acquire calls fail, as a
// backend that cannot be reached does.
type flaky struct {
	*locktest.MemLocker
	failures atomic.Int32
}

var errUnreachable = errors.New("backend unreachable")

func (f *flaky) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errUnreachable
	}
	return f.MemLocker.Acquire(ctx, name)
}

func TestElectionRetriesAfterErrors(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)
	l := &flaky{MemLocker: m.NewLocker("a")}
	l.failures.Store(3)
	t.Cleanup(func() { _ = l.Close() })
	errs := make(chan error, 10)
	cfg, st, _ := signalling()
	cfg.OnError = func(err error) { errs <- err }
	cfg.MinBackoff = time.Millisecond
	cfg.MaxBackoff = 4 * time.Millisecond
	e, err := lock.NewElection(l, name, cfg)
	if err != nil {
		t.Fatalf("NewElection() = %v; want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	recv(t, st, "OnStarted after the failures")
	if n := len(errs); n != 3 {
		t.Errorf("OnError called %d times; want 3", n)
	}
	for range len(errs) {
		if err := <-errs; !errors.Is(err, errUnreachable) {
			t.Errorf("OnError(%v); want an error wrapping %v", err, errUnreachable)
		}
	}
}

func TestElectionBackoffStopsWithContext(t *testing.T) {
	m := locktest.NewMemory()
	l := &flaky{MemLocker: m.NewLocker("a")}
	l.failures.Store(1 << 30)
	t.Cleanup(func() { _ = l.Close() })
	errs := make(chan error, 1)
	e, err := lock.NewElection(l, uniqueName(t), lock.ElectionConfig{
		OnStarted:  func(context.Context, fencing.Token) { t.Error("OnStarted called; want no term") },
		OnError:    func(err error) { errs <- err },
		MinBackoff: time.Hour, // Run must not wait it out once ctx ends
	})
	if err != nil {
		t.Fatalf("NewElection() = %v; want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	recv(t, errs, "OnError")
	cancel()
	if err := recv(t, done, "return of Run"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run() = %v; want an error wrapping context.Canceled", err)
	}
}

// TestElectionObserve follows a series of leader changes with Observe and
// OnNewLeader and checks both see every leader, in the order OnStarted saw
// them.
func TestElectionObserve(t *testing.T) {
	m := locktest.NewMemory()
	name := uniqueName(t)

	watcher := newCandidate(t, m, "watcher", name, lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, errf, err := watcher.e.Observe(ctx)
	if err != nil {
		t.Fatalf("Observe() = %v; want nil", err)
	}
	if h := recv(t, ch, "first observation"); h != (lock.Holder{}) {
		t.Fatalf("first observation = %+v; want the zero Holder (no leader)", h)
	}

	var (
		mu        sync.Mutex
		elected   []lock.Holder // in OnStarted order
		newLeader []lock.Holder // by OnNewLeader of candidate "c0"
	)
	const n = 4
	cands := make([]*candidate, n)
	startedCh := make(chan *candidate, n)
	for i := range cands {
		id := fmt.Sprintf("c%d", i)
		cfg := lock.ElectionConfig{
			OnStarted: func(ctx context.Context, term fencing.Token) {
				mu.Lock()
				elected = append(elected, lock.Holder{Identity: id, Token: term})
				mu.Unlock()
				startedCh <- cands[i]
				<-ctx.Done()
			},
			StopOnLoss: true,
		}
		if i == 0 {
			cfg.OnNewLeader = func(h lock.Holder) {
				mu.Lock()
				defer mu.Unlock()
				newLeader = append(newLeader, h)
			}
		}
		cands[i] = newCandidate(t, m, id, name, cfg)
	}
	// Start them one by one so the queue order is known.
	for i, c := range cands {
		c.start(t)
		waitRecords(t, m, name, i+1)
	}
	// Hand over along the queue.
	for i, how := range []string{"resign", "expire", "stop", "stop"} {
		c := recv(t, startedCh, "OnStarted")
		if c != cands[i] {
			t.Fatalf("%s elected; want %s", c.id, cands[i].id)
		}
		switch how {
		case "resign":
			if err := c.e.Resign(context.Background()); err != nil {
				t.Fatalf("Resign() = %v; want nil", err)
			}
			// c is queued again, behind the others; stop it so it is not
			// elected again.
			c.stop(t)
		case "expire":
			m.ExpireSession(c.l)
			if err := c.wait(t); !errors.Is(err, lock.ErrLost) {
				t.Errorf("Run() = %v; want an error wrapping ErrLost", err)
			}
		case "stop":
			c.stop(t)
		}
	}

	mu.Lock()
	want := slices.Clone(elected)
	mu.Unlock()
	want = append(want, lock.Holder{}) // the last one left
	var got []lock.Holder
	for len(got) < len(want) {
		h, ok := <-ch
		if !ok {
			t.Fatalf("observation ended after %+v: %v; want %+v", got, errf(), want)
		}
		got = append(got, h)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Observe() sent %+v; want %+v", got, want)
	}
	cancel()
	for range ch {
	}
	if err := errf(); !errors.Is(err, context.Canceled) {
		t.Errorf("observation error = %v; want an error wrapping context.Canceled", err)
	}

	// c0 left first; what its OnNewLeader saw before must be a prefix of
	// the sequence (starting with itself, after at most one "no leader").
	mu.Lock()
	defer mu.Unlock()
	seen := slices.DeleteFunc(slices.Clone(newLeader), func(h lock.Holder) bool { return h == lock.Holder{} })
	if len(seen) == 0 || seen[0] != want[0] || !slices.Equal(seen, want[:len(seen)]) {
		t.Errorf("OnNewLeader saw %+v; want a prefix of %+v starting with c0", newLeader, want)
	}
}

func TestElectionObserveNeedsObserver(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	e, err := lock.NewElection(struct{ lock.Locker }{l}, uniqueName(t), lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	if err != nil {
		t.Fatalf("NewElection() = %v; want nil", err)
	}
	ch, errf, err := e.Observe(context.Background())
	if !errors.Is(err, lock.ErrInvalidConfig) || ch != nil || errf != nil {
		t.Errorf("Observe() = %v, %v; want an error wrapping ErrInvalidConfig", ch, err)
	}
}

func TestElectionLeaderWhenNone(t *testing.T) {
	m := locktest.NewMemory()
	c := newCandidate(t, m, "a", uniqueName(t), lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	if h, err := c.e.Leader(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Leader() = %+v, %v; want an error wrapping ErrNotHeld", h, err)
	}
}

func ExampleElection() {
	mem := locktest.NewMemory()
	l := mem.NewLocker("scheduler-1")
	defer l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	e, err := lock.NewElection(l, "jobs/scheduler", lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			fmt.Println("leading in term", term)
			cancel() // a real leader works until ctx is done
			<-ctx.Done()
		},
		OnStopped: func(term fencing.Token, err error) {
			fmt.Printf("term %v over: %v\n", term, err)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = e.Run(ctx)
	fmt.Println("Run:", errors.Is(err, context.Canceled))
	// Output:
	// leading in term 1
	// term 1 over: <nil>
	// Run: true
}

func ExampleElection_Resign() {
	mem := locktest.NewMemory()
	a, b := mem.NewLocker("a"), mem.NewLocker("b")
	defer a.Close()
	defer b.Close()

	elected := make(chan string, 1)
	candidate := func(l lock.Locker, id string) *lock.Election {
		e, _ := lock.NewElection(l, "jobs/scheduler", lock.ElectionConfig{
			OnStarted: func(ctx context.Context, term fencing.Token) {
				elected <- fmt.Sprintf("%s leads in term %v", id, term)
				<-ctx.Done()
			},
		})
		return e
	}
	ea, eb := candidate(a, "a"), candidate(b, "b")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = ea.Run(ctx) })
	fmt.Println(<-elected)
	wg.Go(func() { _ = eb.Run(ctx) })
	// Wait until b is queued behind a.
	for len(mem.Records("jobs/scheduler")) < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := ea.Resign(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println(<-elected)
	cancel()
	wg.Wait()
	// Output:
	// a leads in term 1
	// b leads in term 2
}
