package testutil

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// ObsBackend is what the backend-neutral observability checks need from a
// backend's test package.
type ObsBackend struct {
	// Name is the value of the fencelock.backend attribute.
	Name string
	// NewLocker returns a Locker on a real cluster that records metrics
	// on mp and spans on tp (tp may be nil), with names mapped by
	// nameAttr (may be nil); it is closed when t ends.
	NewLocker func(t *testing.T, mp metric.MeterProvider, tp trace.TracerProvider, nameAttr func(string) string) lock.Locker
	// ExpireSession ends l's session from the server side, as its expiry
	// does.
	ExpireSession func(t *testing.T, l lock.Locker)
}

// Spans returns a tracer provider that records ended spans, shut down
// when t ends, and the recorder.
func Spans(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// SpanAttr returns the value of key on span s, as a string ("" if absent).
func SpanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// RunObservability runs the backend-neutral metric and span checks on b.
func RunObservability(t *testing.T, b ObsBackend) {
	t.Run("GrantsAndHolds", func(t *testing.T) { obsGrants(t, b) })
	t.Run("LostBySessionExpiry", func(t *testing.T) { obsLost(t, b) })
	t.Run("NameAttribute", func(t *testing.T) { obsNameAttribute(t, b) })
	t.Run("LeaderFailover", func(t *testing.T) { obsFailover(t, b) })
}

func obsContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// obsGrants checks the acquire and hold histograms, the up-down counters,
// the session counter and the spans over grants, a refused TryAcquire and
// a wait that times out.
func obsGrants(t *testing.T, b ObsBackend) {
	ctx := obsContext(t)
	m := NewMetrics(t)
	tp, spans := Spans(t)
	l := b.NewLocker(t, m.Provider, tp, nil)
	other := b.NewLocker(t, NewMetrics(t).Provider, nil, nil)
	name := UniqueName(t)
	backend := map[string]string{"fencelock.backend": b.Name}

	const grants = 3
	var tokens []fencing.Token
	for range grants {
		le, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		tokens = append(tokens, le.Token())
		if got := m.Sum(t, "fencelock.leases.held", backend); got != 1 {
			t.Errorf("fencelock.leases.held while holding = %d; want 1", got)
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	}

	held, err := other.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("other Acquire() = %v", err)
	}
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire() of a held lock = %v; want an error wrapping %v", err, lock.ErrLocked)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = l.Acquire(wctx, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire() with a deadline on a held lock = %v; want an error wrapping %v", err, context.DeadlineExceeded)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("other Release() = %v", err)
	}

	for _, c := range []struct {
		outcome string
		want    uint64
	}{{"granted", grants}, {"locked", 1}, {"cancelled", 1}, {"lost", 0}, {"error", 0}} {
		if got := m.HistogramCount(t, "fencelock.acquire.duration", map[string]string{"fencelock.backend": b.Name, "fencelock.kind": "exclusive", "fencelock.outcome": c.outcome}); got != c.want {
			t.Errorf("fencelock.acquire.duration count, outcome %s = %d; want %d\n%s", c.outcome, got, c.want, m.Dump(t))
		}
	}
	if got := m.HistogramCount(t, "fencelock.hold.duration", backend); got != grants {
		t.Errorf("fencelock.hold.duration count = %d; want %d (one per grant)", got, grants)
	}
	for _, name := range []string{"fencelock.acquire.duration", "fencelock.hold.duration"} {
		if u := m.Unit(t, name); u != "s" {
			t.Errorf("unit of %s = %q; want \"s\"", name, u)
		}
	}
	if got := m.Sum(t, "fencelock.leases.held", backend); got != 0 {
		t.Errorf("fencelock.leases.held after every release = %d; want 0", got)
	}
	if got := m.Sum(t, "fencelock.acquisitions.waiting", backend); got != 0 {
		t.Errorf("fencelock.acquisitions.waiting after every call = %d; want 0", got)
	}
	if got := m.Sum(t, "fencelock.leases.lost", backend); got != 0 {
		t.Errorf("fencelock.leases.lost without a loss = %d; want 0", got)
	}
	if got := m.Sum(t, "fencelock.session.starts", backend); got != 1 {
		t.Errorf("fencelock.session.starts = %d; want 1", got)
	}
	if dump := m.Dump(t); strings.Contains(dump, "fencelock.lock") {
		t.Errorf("a metric carries the lock name without WithNameAttribute:\n%s", dump)
	}

	var acquires, releases []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		switch s.Name() {
		case "fencelock.acquire":
			if SpanAttr(s, "fencelock.outcome") == "granted" {
				acquires = append(acquires, s)
			}
		case "fencelock.release":
			releases = append(releases, s)
		}
	}
	if len(acquires) != grants || len(releases) != grants {
		t.Fatalf("spans: %d granted acquires, %d releases; want %d each", len(acquires), len(releases), grants)
	}
	for i, tok := range tokens {
		if got := SpanAttr(acquires[i], "fencelock.token"); got != strconv.FormatUint(uint64(tok), 10) {
			t.Errorf("acquire span %d: fencelock.token = %q; want %d", i, got, tok)
		}
		if got := SpanAttr(releases[i], "fencelock.token"); got != strconv.FormatUint(uint64(tok), 10) {
			t.Errorf("release span %d: fencelock.token = %q; want %d", i, got, tok)
		}
	}
}

// obsLost checks that a lease lost by session expiry is counted with its
// reason, and its session's end too.
func obsLost(t *testing.T, b ObsBackend) {
	ctx := obsContext(t)
	m := NewMetrics(t)
	l := b.NewLocker(t, m.Provider, nil, nil)
	le, err := l.Acquire(ctx, UniqueName(t))
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	b.ExpireSession(t, l)
	select {
	case <-le.Done():
	case <-ctx.Done():
		t.Fatalf("lease not ended after its session expired")
	}
	if err := le.Err(); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Err() after session expiry = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	lost := map[string]string{"fencelock.backend": b.Name, "fencelock.reason": "expired"}
	// A backend may count the reason just after Done closes (etcd looks
	// up the session lease behind a deleted record).
	Eventually(t, 10*time.Second, "loss counted with reason expired", func() bool {
		return m.Sum(t, "fencelock.leases.lost", lost) == 1
	})
	if got := m.Sum(t, "fencelock.leases.lost", map[string]string{"fencelock.backend": b.Name}); got != 1 {
		t.Errorf("fencelock.leases.lost, every reason = %d; want 1", got)
	}
	Eventually(t, 10*time.Second, "session end counted", func() bool {
		return m.Sum(t, "fencelock.session.ends", lost) == 1
	})
	if got := m.Sum(t, "fencelock.leases.held", nil); got != 0 {
		t.Errorf("fencelock.leases.held after the loss = %d; want 0", got)
	}
	if got := m.HistogramCount(t, "fencelock.hold.duration", nil); got != 1 {
		t.Errorf("fencelock.hold.duration count after the loss = %d; want 1", got)
	}
}

// obsNameAttribute checks that a mapped lock name becomes the attribute
// fencelock.lock, as mapped.
func obsNameAttribute(t *testing.T, b ObsBackend) {
	ctx := obsContext(t)
	m := NewMetrics(t)
	tp, spans := Spans(t)
	var mu sync.Mutex
	var seen []string
	l := b.NewLocker(t, m.Provider, tp, func(name string) string {
		mu.Lock()
		seen = append(seen, name)
		mu.Unlock()
		return "tenant-locks"
	})
	name := UniqueName(t)
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	mapped := map[string]string{"fencelock.lock": "tenant-locks", "fencelock.outcome": "granted"}
	if got := m.HistogramCount(t, "fencelock.acquire.duration", mapped); got != 1 {
		t.Errorf("fencelock.acquire.duration{lock=tenant-locks} count = %d; want 1\n%s", got, m.Dump(t))
	}
	if got := m.HistogramCount(t, "fencelock.hold.duration", map[string]string{"fencelock.lock": "tenant-locks"}); got != 1 {
		t.Errorf("fencelock.hold.duration{lock=tenant-locks} count = %d; want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0] != name {
		t.Errorf("name mapping called with %q; want the lock name %q", seen, name)
	}
	for _, s := range spans.Ended() {
		if got := SpanAttr(s, "fencelock.lock"); got != "tenant-locks" {
			t.Errorf("span %s: fencelock.lock = %q; want the mapped name", s.Name(), got)
		}
	}
}

// obsFailover checks that the leader counter of two candidates follows a
// failover: the leader's session expires, and the other takes over.
func obsFailover(t *testing.T, b ObsBackend) {
	ctx := obsContext(t)
	name := UniqueName(t)
	type cand struct {
		l       lock.Locker
		m       *Metrics
		started chan fencing.Token
		done    chan error
	}
	newCand := func() *cand {
		c := &cand{m: NewMetrics(t), started: make(chan fencing.Token, 4), done: make(chan error, 1)}
		c.l = b.NewLocker(t, c.m.Provider, nil, nil)
		e, err := lock.NewElection(c.l, name, lock.ElectionConfig{
			OnStarted:     func(ctx context.Context, term fencing.Token) { c.started <- term },
			MeterProvider: c.m.Provider,
			NameAttribute: func(string) string { return "failover" },
			MinBackoff:    10 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("NewElection() = %v", err)
		}
		rctx, cancel := context.WithCancel(ctx)
		go func() { c.done <- e.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-c.done })
		return c
	}
	leader := func(c *cand) int64 {
		return c.m.Sum(t, "fencelock.election.leader", map[string]string{"fencelock.election": "failover"})
	}
	changes := func(c *cand, change string) int64 {
		return c.m.Sum(t, "fencelock.election.changes", map[string]string{"fencelock.election": "failover", "fencelock.change": change})
	}

	a := newCand()
	select {
	case <-a.started:
	case <-ctx.Done():
		t.Fatal("first candidate not elected")
	}
	bc := newCand()
	if got := leader(a); got != 1 {
		t.Errorf("leader counter of the leader = %d; want 1", got)
	}
	if got := leader(bc); got != 0 {
		t.Errorf("leader counter of the waiting candidate = %d; want 0", got)
	}

	b.ExpireSession(t, a.l)
	select {
	case <-bc.started:
	case <-ctx.Done():
		t.Fatal("second candidate not elected after the leader's session expired")
	}
	Eventually(t, 10*time.Second, "old leader's counter back to 0", func() bool { return leader(a) == 0 })
	if got := leader(bc); got != 1 {
		t.Errorf("leader counter of the new leader = %d; want 1", got)
	}
	if got := changes(a, "ended"); got < 1 {
		t.Errorf("old leader's changes{ended} = %d; want at least 1", got)
	}
	if got := changes(bc, "elected"); got != 1 {
		t.Errorf("new leader's changes{elected} = %d; want 1", got)
	}
	Eventually(t, 10*time.Second, "old leader's loss counted with reason expired", func() bool {
		return a.m.Sum(t, "fencelock.leases.lost", map[string]string{"fencelock.reason": "expired"}) == 1
	})
}

// CheckGuardedWrites fails the test unless the guarded write helper
// counted one accepted write and one rejected, and recorded a span for
// each with token.
func CheckGuardedWrites(t *testing.T, m *Metrics, spans *tracetest.SpanRecorder, helper string, token fencing.Token) {
	t.Helper()
	for decision, want := range map[string]int64{"accepted": 1, "rejected": 1} {
		attrs := map[string]string{"fencelock.helper": helper, "fencelock.decision": decision}
		if got := m.Sum(t, "fencelock.fencing.decisions", attrs); got != want {
			t.Errorf("fencelock.fencing.decisions{%s} = %d; want %d\n%s", decision, got, want, m.Dump(t))
		}
	}
	var writes int
	for _, s := range spans.Ended() {
		if s.Name() == "fencelock.fenced_write" {
			writes++
			if got := SpanAttr(s, "fencelock.token"); got != token.String() {
				t.Errorf("fenced_write span: fencelock.token = %q; want %v", got, token)
			}
		}
	}
	if writes != 2 {
		t.Errorf("fenced_write spans = %d; want 2", writes)
	}
}
