package benchtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// stats summarizes durations, in milliseconds. The quartiles and the 10th
// and 90th percentiles are there for the charts (integration/benchtest/charts),
// which draw the distribution rather than two points of it.
type stats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Max  float64 `json:"max_ms"`
	P10  float64 `json:"p10_ms"`
	P25  float64 `json:"p25_ms"`
	P75  float64 `json:"p75_ms"`
	P90  float64 `json:"p90_ms"`
}

func summarize(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return ms(s[max(i, 0)])
	}
	return stats{
		N: len(s), P50: pct(0.50), P99: pct(0.99), Mean: ms(sum / time.Duration(len(s))), Max: ms(s[len(s)-1]),
		P10: pct(0.10), P25: pct(0.25), P75: pct(0.75), P90: pct(0.90),
	}
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var nameSeq atomic.Int64

// uniqueName returns a lock name no other measurement of this run uses
// (and no earlier run, should a cluster be reused).
func uniqueName(what string) string {
	return fmt.Sprintf("%s-%x-%d", what, time.Now().UnixNano(), nameSeq.Add(1))
}

// placement says which members a measurement's connections go to. A
// ZooKeeper client sends its writes through the one server it is connected
// to, and a write through a follower takes one hop more than through the
// leader, so recipes are compared on the same servers: single-client
// measurements on one follower, many clients spread over the members in
// the same order for every recipe.
type placement struct {
	all      []string // every member
	follower []string // one follower
}

// spread returns the member that the i-th client of a measurement uses.
func (p placement) spread(i int) []string { return []string{p.all[i%len(p.all)]} }

// dial opens a connection of r to endpoints and closes it in t.Cleanup.
func dial(t testing.TB, r recipe, endpoints []string, ctr *counters, ttl time.Duration) conn {
	t.Helper()
	c, err := r.dial(endpoints, ctr, ttl)
	if err != nil {
		t.Fatalf("%s: dial() = %v; want nil", r.name, err)
	}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Logf("%s: close() = %v", r.name, err)
		}
	})
	return c
}

func newClient(t testing.TB, r recipe, c conn) client {
	t.Helper()
	cl, err := c.client()
	if err != nil {
		t.Fatalf("%s: client() = %v; want nil", r.name, err)
	}
	return cl
}

// waitRecords polls r.records until name has want records.
func waitRecords(t testing.TB, r recipe, name string, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last, lastErr := -1, error(nil)
	for {
		n, err := r.records(ctx, name)
		if err == nil && n == want {
			return
		}
		last, lastErr = n, err
		if ctx.Err() != nil {
			t.Fatalf("%s: %d records on %q after %v (last error %v); want %d", r.name, last, name, timeout, lastErr, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- uncontended ----

type uncontendedResult struct {
	Recipe           string  `json:"recipe"`
	Role             role    `json:"role"`
	Latency          stats   `json:"latency"`
	CyclesPerSec     float64 `json:"cycles_per_sec"`
	RequestsPerCycle float64 `json:"requests_per_cycle"`
	ClientCPUUs      float64 `json:"client_cpu_us_per_cycle"` // CPU time of this process (all goroutines)
	// Windows are the rounds, one figure set each.
	Windows []uncontendedWindow `json:"windows"`
	// Ratio compares the row with the reference's p50_ms, a TLS row with
	// the plain row's, or an overhead's on row with its off row's
	// mean_ms; RatioFloor compares a row with the floor's p50_ms.
	Ratio      *windowRatio `json:"ratio,omitempty"`
	RatioFloor *windowRatio `json:"ratio_floor,omitempty"`
	seq        []int64      // when each window started (windowSeq)
}

// uncontendedWindow is what one round measured of one recipe.
type uncontendedWindow struct {
	Cycles           int     `json:"cycles"`
	P50              float64 `json:"p50_ms"`
	Mean             float64 `json:"mean_ms"`
	CyclesPerSec     float64 `json:"cycles_per_sec"`
	RequestsPerCycle float64 `json:"requests_per_cycle,omitempty"` // when counted
}

// figure returns the per-window values of metric, one of the JSON fields
// of uncontendedWindow.
func (u uncontendedResult) figure(metric string) []float64 {
	out := make([]float64, len(u.Windows))
	for k, w := range u.Windows {
		switch metric {
		case "p50_ms":
			out[k] = w.P50
		case "mean_ms":
			out[k] = w.Mean
		case "cycles_per_sec":
			out[k] = w.CyclesPerSec
		case "requests_per_cycle":
			out[k] = w.RequestsPerCycle
		}
	}
	return out
}

// ratioTo returns u's ratio to b on metric, window by window.
func (u uncontendedResult) ratioTo(b uncontendedResult, metric, better string) *windowRatio {
	return pairRatio(metric, better, u.figure(metric), b.figure(metric), u.seq, b.seq)
}

// measureUncontended runs acquire and release of a free lock by one client
// per recipe, in rounds that visit the recipes in turn, forward in even
// rounds and backward in odd ones, so that a change in the machine's load
// hits every recipe alike and any two recipes take turns going first.
// Each round is a window of the rows' ratios.
func measureUncontended(t *testing.T, rs []recipe, at placement, cfg config) []uncontendedResult {
	ctx := context.Background()
	type state struct {
		cl   client
		ctr  *counters
		name string
		lat  []time.Duration
		busy time.Duration
		reqs int64
		cpu  time.Duration
		wins []uncontendedWindow
		seq  []int64
	}
	st := make([]*state, len(rs))
	cycle := func(r recipe, s *state) time.Duration {
		start := time.Now()
		rel, err := s.cl.acquire(ctx, s.name)
		if err != nil {
			t.Fatalf("%s: acquire(%q) = %v; want nil", r.name, s.name, err)
		}
		if err := rel(ctx); err != nil {
			t.Fatalf("%s: release(%q) = %v; want nil", r.name, s.name, err)
		}
		return time.Since(start)
	}
	for i, r := range rs {
		s := &state{ctr: &counters{}, name: uniqueName("uncontended")}
		s.cl = newClient(t, r, dial(t, r, at.follower, s.ctr, cfg.ttl()))
		for range cfg.WarmCycles {
			cycle(r, s)
		}
		st[i] = s
	}
	for round := range cfg.Rounds {
		for _, i := range orderOf(round, len(rs)) {
			r, s := rs[i], st[i]
			s.seq = append(s.seq, nextWindow())
			before, cpu0 := s.ctr.snapshot(), processCPU()
			lat := make([]time.Duration, 0, cfg.Cycles)
			var busy time.Duration
			for range cfg.Cycles {
				d := cycle(r, s)
				lat = append(lat, d)
				busy += d
			}
			s.cpu += processCPU() - cpu0
			reqs := s.ctr.snapshot().sub(before).requests
			sum := summarize(lat)
			s.wins = append(s.wins, uncontendedWindow{Cycles: len(lat), P50: sum.P50, Mean: sum.Mean,
				CyclesPerSec: float64(len(lat)) / busy.Seconds(), RequestsPerCycle: float64(reqs) / float64(len(lat))})
			s.lat, s.busy, s.reqs = append(s.lat, lat...), s.busy+busy, s.reqs+reqs
		}
	}
	out := make([]uncontendedResult, len(rs))
	for i, r := range rs {
		s := st[i]
		out[i] = uncontendedResult{
			Recipe:           r.name,
			Role:             r.role,
			Latency:          summarize(s.lat),
			CyclesPerSec:     float64(len(s.lat)) / s.busy.Seconds(),
			RequestsPerCycle: float64(s.reqs) / float64(len(s.lat)),
			ClientCPUUs:      float64(s.cpu/time.Microsecond) / float64(len(s.lat)),
			Windows:          s.wins,
			seq:              s.seq,
		}
	}
	return out
}

// uncontendedRatios sets the ratios of the fencelock rows of rows: to the
// reference's p50 and to the floor's.
func uncontendedRatios(rows []uncontendedResult) {
	ref, okRef := find(rows, func(u uncontendedResult) bool { return u.Role == roleReference })
	floor, okFloor := find(rows, func(u uncontendedResult) bool { return u.Role == roleFloor })
	for i, u := range rows {
		if u.Role != roleFencelock {
			continue
		}
		if okRef {
			rows[i].Ratio = u.ratioTo(ref, "p50_ms", lower)
		}
		if okFloor {
			rows[i].RatioFloor = u.ratioTo(floor, "p50_ms", lower)
		}
	}
}

// ---- contended handoff ----

type contendedResult struct {
	Recipe           string  `json:"recipe"`
	Role             role    `json:"role"`
	Clients          int     `json:"clients"`
	HoldMs           float64 `json:"hold_ms"` // how long each grant is held: 0 is an empty critical section
	Grants           int     `json:"grants"`
	WindowSec        float64 `json:"window_sec"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	Wait             stats   `json:"wait"`
	Handoff          stats   `json:"handoff"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	EventsPerGrant   float64 `json:"watch_events_per_grant"`
	// LateWatchesPerGrant counts etcd watches created behind the server's
	// current revision (see counters.lateWatches), per grant.
	LateWatchesPerGrant float64           `json:"late_watches_per_grant"`
	KeepalivesPerSec    float64           `json:"keepalives_per_sec"`
	ClientCPUUs         float64           `json:"client_cpu_us_per_grant"` // CPU time of this process (every client) per grant
	Windows             []contendedWindow `json:"windows"`
	// Ratio compares the row's grants_per_sec with the reference's of
	// the same hold and client count (or, for a lock-delay row, with the
	// same recipe without it), window by window.
	Ratio *windowRatio `json:"ratio,omitempty"`
	// Slower compares a mixed fleet's grants_per_sec with the slower of
	// its two recipes' (interop_test.go).
	Slower *windowRatio `json:"slower,omitempty"`
	seq    []int64
}

// contendedWindow is what one window of a contended row measured.
type contendedWindow struct {
	WindowSec        float64 `json:"window_sec"`
	Grants           int     `json:"grants"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	WaitP50          float64 `json:"wait_p50_ms"`
	HandoffP50       float64 `json:"handoff_p50_ms"`
	HandoffP99       float64 `json:"handoff_p99_ms"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	EventsPerGrant   float64 `json:"watch_events_per_grant"`
}

// figure returns the per-window values of metric, one of the JSON fields
// of contendedWindow.
func (c contendedResult) figure(metric string) []float64 {
	out := make([]float64, len(c.Windows))
	for k, w := range c.Windows {
		switch metric {
		case "grants_per_sec":
			out[k] = w.GrantsPerSec
		case "handoff_p50_ms":
			out[k] = w.HandoffP50
		case "requests_per_grant":
			out[k] = w.RequestsPerGrant
		}
	}
	return out
}

// ratioTo returns c's ratio to b on metric, window by window.
func (c contendedResult) ratioTo(b contendedResult, metric, better string) *windowRatio {
	return pairRatio(metric, better, c.figure(metric), b.figure(metric), c.seq, b.seq)
}

// measureContended has clients clients, each with its own connection and
// session, loop acquire, hold the grant for hold, release, on one lock.
// Only grants inside the measurement window (cfg.WindowSec / cfg.Repeats,
// after a warm-up) count; the requests and watch events of every client
// are counted over the same window. Every grant enters the row's register
// for the whole hold, so a grant while another client holds the lock, or
// with a stale token, fails the row.
func measureContended(t *testing.T, r recipe, clients int, hold time.Duration, at placement, cfg config) contendedRun {
	seq := nextWindow()
	ctr := &counters{}
	name := uniqueName(fmt.Sprintf("contended%d", clients))
	cls := make([]client, clients)
	for i := range cls {
		cls[i] = newClient(t, r, dial(t, r, at.spread(i), ctr, cfg.ttl()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.window()+cfg.warm()+5*time.Minute)
	defer cancel()
	row := fmt.Sprintf("%s, %d clients, hold %v", r.name, clients, hold)
	reg, win := newRegister(row, 0), newRowWindow()
	reg.mixed = r.mixed
	var (
		mu              sync.Mutex
		lastRelease     time.Time
		waits, handoffs []time.Duration
	)
	cycle := func(i int) error {
		asked := time.Now()
		tok, rel, err := acquireGrant(ctx, cls[i], name)
		if err != nil {
			return fmt.Errorf("client %d: acquire(%q) = %w; want nil", i, name, err)
		}
		got := time.Now()
		reg.enter(name, i, exclusive, tok)
		mu.Lock()
		if win.contains(got) {
			waits = append(waits, got.Sub(asked))
			if !lastRelease.IsZero() {
				handoffs = append(handoffs, got.Sub(lastRelease))
			}
		}
		mu.Unlock()
		time.Sleep(hold) // the critical section
		reg.leave(name, i)
		mu.Lock()
		lastRelease = time.Now()
		mu.Unlock()
		if err := rel(ctx); err != nil {
			return fmt.Errorf("client %d: release(%q) = %w; want nil", i, name, err)
		}
		return nil
	}
	w := win.run(t, row, clients, ctr, cfg.warm(), cfg.window()/time.Duration(cfg.Repeats), cancel, cycle)
	// The floor excludes nobody: its overlaps are expected.
	if err := reg.err(); err != nil && r.role != roleFloor {
		t.Error(err)
	}
	return contendedRun{grants: len(waits), window: w.length, waits: waits, handoffs: handoffs, counts: w.counts, cpu: w.cpu, seq: seq}
}

// rowWindow is the measurement window of a row of many clients: each
// client loops until the window is over, and only what happens inside it
// counts.
type rowWindow struct {
	start, end atomic.Int64 // UnixNano; the window is [start, end)
	stop       atomic.Bool
	errOnce    sync.Once
	err        error // the first error of a cycle
}

func newRowWindow() *rowWindow {
	w := &rowWindow{}
	w.start.Store(math.MaxInt64)
	w.end.Store(math.MaxInt64)
	return w
}

// contains reports whether at is inside the window (false before it has
// started).
func (w *rowWindow) contains(at time.Time) bool {
	n := at.UnixNano()
	return n >= w.start.Load() && n < w.end.Load()
}

// windowRun is what the window measured for the whole row: its length,
// the requests and events counted in it, and this process's CPU time.
type windowRun struct {
	length time.Duration
	counts countSnapshot
	cpu    time.Duration
}

// run calls cycle(i) in a loop of its own for every client i: after warm,
// during which the clients' first grants and queueing settle, it measures
// for length; then each client stops once its cycle is over, so the queue
// drains. A cycle's error stops its client and, once every client has
// stopped, fails the row what; a queue that has not drained 3 minutes
// after the window is cancelled (cancel is the cycles' context's) and
// fails it too.
func (w *rowWindow) run(t *testing.T, what string, clients int, ctr *counters, warm, length time.Duration, cancel context.CancelFunc, cycle func(i int) error) windowRun {
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for !w.stop.Load() {
				if err := cycle(i); err != nil {
					w.errOnce.Do(func() { w.err = err })
					return
				}
			}
		})
	}
	time.Sleep(warm)
	start := time.Now()
	w.start.Store(start.UnixNano())
	c0, cpu0 := ctr.snapshot(), processCPU()
	time.Sleep(length)
	end := time.Now()
	w.end.Store(end.UnixNano())
	c1, cpu1 := ctr.snapshot(), processCPU()
	w.stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cancel()
		<-done
		t.Fatalf("%s: the queue did not drain within 3m after the window", what)
	}
	if w.err != nil {
		t.Fatalf("%s: %v", what, w.err)
	}
	return windowRun{length: end.Sub(start), counts: c1.sub(c0), cpu: cpu1 - cpu0}
}

// contendedRun is the raw outcome of one window of measureContended.
type contendedRun struct {
	grants          int
	window          time.Duration
	waits, handoffs []time.Duration
	counts          countSnapshot
	cpu             time.Duration // CPU time of this process in the window
	seq             int64         // when the window started (windowSeq)
}

// figures returns what the window measured.
func (x contendedRun) figures() contendedWindow {
	w := contendedWindow{WindowSec: x.window.Seconds(), Grants: x.grants, GrantsPerSec: float64(x.grants) / x.window.Seconds(),
		WaitP50: summarize(x.waits).P50}
	h := summarize(x.handoffs)
	w.HandoffP50, w.HandoffP99 = h.P50, h.P99
	if x.grants > 0 {
		w.RequestsPerGrant = float64(x.counts.requests) / float64(x.grants)
		w.EventsPerGrant = float64(x.counts.events) / float64(x.grants)
	}
	return w
}

// combine sums the windows of one recipe, client count and hold.
func combine(r recipe, clients int, hold time.Duration, runs []contendedRun) contendedResult {
	var all contendedRun
	var wins []contendedWindow
	var seq []int64
	for _, x := range runs {
		wins = append(wins, x.figures())
		seq = append(seq, x.seq)
		all.grants += x.grants
		all.window += x.window
		all.waits = append(all.waits, x.waits...)
		all.handoffs = append(all.handoffs, x.handoffs...)
		all.counts.requests += x.counts.requests
		all.counts.events += x.counts.events
		all.counts.keepalives += x.counts.keepalives
		all.counts.lateWatches += x.counts.lateWatches
		all.cpu += x.cpu
	}
	win := all.window.Seconds()
	res := contendedResult{
		Recipe:           r.name,
		Role:             r.role,
		Clients:          clients,
		HoldMs:           ms(hold),
		Grants:           all.grants,
		WindowSec:        win,
		GrantsPerSec:     float64(all.grants) / win,
		Wait:             summarize(all.waits),
		Handoff:          summarize(all.handoffs),
		KeepalivesPerSec: float64(all.counts.keepalives) / win,
		Windows:          wins,
		seq:              seq,
	}
	if all.grants > 0 {
		res.RequestsPerGrant = float64(all.counts.requests) / float64(all.grants)
		res.EventsPerGrant = float64(all.counts.events) / float64(all.grants)
		res.LateWatchesPerGrant = float64(all.counts.lateWatches) / float64(all.grants)
		res.ClientCPUUs = float64(all.cpu/time.Microsecond) / float64(all.grants)
	}
	return res
}

// ---- failover ----

type failoverResult struct {
	Recipe    string    `json:"recipe"`
	Role      role      `json:"role"`
	TTLSec    float64   `json:"ttl_sec"`
	TrialsMs  []float64 `json:"trials_ms"`
	MedianMs  float64   `json:"median_ms"`
	MinMs     float64   `json:"min_ms"`
	MaxMs     float64   `json:"max_ms"`
	ChildKill string    `json:"child_killed_by"`
	// Ratio compares the trials with the reference's, trial by trial
	// (median_ms; each recipe's trials run one after another).
	Ratio *windowRatio `json:"ratio,omitempty"`
	// Slower compares a mixed fleet's grants_per_sec with the slower of
	// its two recipes' (interop_test.go).
	Slower *windowRatio `json:"slower,omitempty"`
	seq    []int64
}

// holderEnv carries a holderSpec to the child process that holds the lock
// in the failover measurement.
const holderEnv = "FENCELOCK_BENCH_HOLDER"

type holderSpec struct {
	Kind      cluster.Kind  `json:"kind"`
	Recipe    string        `json:"recipe"`
	Endpoints []string      `json:"endpoints"`
	Name      string        `json:"name"`
	TTL       time.Duration `json:"ttl"`
}

func recipesFor(kind cluster.Kind) []recipe {
	if kind == cluster.Etcd {
		return etcdRecipes(nil)
	}
	return zkRecipes(nil)
}

// runHolder is the child process: it acquires the lock, says "held" on
// stdout and holds the lock until stdin closes or it is killed.
func runHolder(specJSON string) int {
	var spec holderSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "holder: %s=%q: %v\n", holderEnv, specJSON, err)
		return 2
	}
	rs := recipesFor(spec.Kind)
	i := slices.IndexFunc(rs, func(r recipe) bool { return r.name == spec.Recipe })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "holder: no recipe %q on %s\n", spec.Recipe, spec.Kind)
		return 2
	}
	r := rs[i]
	c, err := r.dial(spec.Endpoints, nil, spec.TTL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: dial: %v\n", err)
		return 1
	}
	defer c.close()
	cl, err := c.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: client: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rel, err := cl.acquire(ctx, spec.Name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: acquire: %v\n", err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = rel(context.Background())
	return 0
}

// measureFailover runs trials in which a child process holds the lock,
// a client of this process waits for it, and the child is killed with
// SIGKILL; each trial's figure is the time from the kill to the grant.
func measureFailover(t *testing.T, kind cluster.Kind, at placement, r recipe, cfg config) failoverResult {
	ttl := cfg.failoverTTL()
	res := failoverResult{Recipe: r.name, Role: r.role, TTLSec: ttl.Seconds()}
	var trials []time.Duration
	for trial := range cfg.FailoverTrials {
		name := uniqueName("failover")
		res.seq = append(res.seq, nextWindow())
		d, how := failoverTrial(t, kind, at.all, r, name, ttl)
		t.Logf("%s: failover trial %d: %v from kill to grant (%s)", r.name, trial+1, d.Round(time.Millisecond), how)
		trials = append(trials, d)
		res.TrialsMs = append(res.TrialsMs, ms(d))
		res.ChildKill = how
	}
	s := summarize(trials)
	res.MedianMs, res.MaxMs = s.P50, s.Max
	res.MinMs = ms(slices.Min(trials))
	return res
}

func failoverTrial(t *testing.T, kind cluster.Kind, endpoints []string, r recipe, name string, ttl time.Duration) (time.Duration, string) {
	t.Helper()
	spec, err := json.Marshal(holderSpec{Kind: kind, Recipe: r.name, Endpoints: endpoints, Name: name, TTL: ttl})
	if err != nil {
		t.Fatalf("json.Marshal() = %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("StdinPipe() = %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe() = %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder: %v", err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	held := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() && sc.Text() == "held" {
			held <- nil
		} else {
			held <- fmt.Errorf("holder said %q (%v)", sc.Text(), sc.Err())
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("%s: holder process: %v; stderr: %s", r.name, err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: holder process did not acquire %q within 1m", r.name, name)
	}

	cl := newClient(t, r, dial(t, r, endpoints, nil, ttl))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type grant struct {
		rel func(context.Context) error
		at  time.Time
		err error
	}
	granted := make(chan grant, 1)
	go func() {
		rel, err := cl.acquire(ctx, name)
		granted <- grant{rel, time.Now(), err}
	}()
	waitRecords(t, r, name, 2, time.Minute)

	killedAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill holder: %v", err)
	}
	werr := cmd.Wait()
	waited = true
	_ = stdin.Close()
	var exitErr *exec.ExitError
	how := fmt.Sprint(werr)
	if !errors.As(werr, &exitErr) {
		t.Fatalf("holder Wait() = %v; want it killed by SIGKILL", werr)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("holder Wait() = %v; want it killed by SIGKILL", werr)
	}
	select {
	case g := <-granted:
		if g.err != nil {
			t.Fatalf("%s: acquire(%q) after the kill = %v; want nil", r.name, name, g.err)
		}
		if err := g.rel(context.Background()); err != nil {
			t.Fatalf("%s: release(%q) = %v; want nil", r.name, name, err)
		}
		return g.at.Sub(killedAt), how
	case <-time.After(time.Minute):
		t.Fatalf("%s: no grant within 1m of killing the holder (TTL %v)", r.name, ttl)
		return 0, how
	}
}

// ---- many leases held by one client ----

type goroutinePoint struct {
	Leases     int     `json:"leases"`
	Goroutines int     `json:"goroutines"`
	HeapBytes  float64 `json:"heap_bytes"`  // live heap after a GC
	StackBytes float64 `json:"stack_bytes"` // goroutine stacks in use
}

type leasesResult struct {
	Recipe             string           `json:"recipe"`
	Role               role             `json:"role"`
	Leases             int              `json:"leases"`
	Parallel           int              `json:"parallel"`
	AcquirePerSec      float64          `json:"acquire_per_sec"`
	Points             []goroutinePoint `json:"points"`
	HeapBytesPerLease  float64          `json:"heap_bytes_per_lease"`
	StackBytesPerLease float64          `json:"stack_bytes_per_lease"`
	GoroutinesPerLease float64          `json:"goroutines_per_lease"`
	// Ratio compares heap_bytes_per_lease with the reference's: one
	// window, the memory held is not a rate the machine's load moves.
	Ratio *windowRatio `json:"ratio,omitempty"`
	seq   int64
}

// measureLeases acquires cfg.Leases locks of distinct names through one
// client (cfg.LeaseParallel at a time) and records, at a few points on
// the way, how many goroutines the process runs and how much heap is
// live.
func measureLeases(t *testing.T, r recipe, at placement, cfg config) leasesResult {
	seq := nextWindow()
	n := cfg.Leases
	c := dial(t, r, at.follower, nil, cfg.ttl())
	cl := newClient(t, r, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := uniqueName("leases")
	rels := make([]func(context.Context) error, n)
	warmUp(ctx, t, r, cl, prefix+"/warm")
	points := []goroutinePoint{leasePoint(0)}
	parallel := func(from, to int, f func(i int) error) {
		if err := inParallel(cfg.LeaseParallel, from, to, f); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	var busy time.Duration
	held := 0
	for _, upTo := range []int{n / 10, n} {
		start := time.Now()
		parallel(held, upTo, func(i int) error {
			rel, err := cl.acquire(ctx, fmt.Sprintf("%s/%d", prefix, i))
			if err != nil {
				return fmt.Errorf("acquire(%d) = %w; want nil", i, err)
			}
			rels[i] = rel
			return nil
		})
		busy += time.Since(start)
		held = upTo
		points = append(points, leasePoint(held))
	}
	parallel(0, n, func(i int) error { return rels[i](ctx) })
	first, last := points[1], points[len(points)-1]
	return leasesResult{
		Recipe:             r.name,
		Role:               r.role,
		Leases:             n,
		Parallel:           cfg.LeaseParallel,
		AcquirePerSec:      float64(n) / busy.Seconds(),
		Points:             points,
		HeapBytesPerLease:  (last.HeapBytes - points[0].HeapBytes) / float64(n),
		StackBytesPerLease: (last.StackBytes - points[0].StackBytes) / float64(n),
		GoroutinesPerLease: float64(last.Goroutines-first.Goroutines) / float64(last.Leases-first.Leases),
		seq:                seq,
	}
}

// warmUp acquires and releases name once through cl: the first grant
// starts the session.
func warmUp(ctx context.Context, t *testing.T, r recipe, cl client, name string) {
	t.Helper()
	rel, err := cl.acquire(ctx, name)
	if err != nil {
		t.Fatalf("%s: acquire() = %v; want nil", r.name, err)
	}
	if err := rel(ctx); err != nil {
		t.Fatalf("%s: release() = %v; want nil", r.name, err)
	}
}

// leasePoint reads the goroutines (once settled), live heap and stacks of
// this process with held leases held.
func leasePoint(held int) goroutinePoint {
	g := settledGoroutines()
	heap, stack := liveMemory()
	return goroutinePoint{Leases: held, Goroutines: g, HeapBytes: float64(heap), StackBytes: float64(stack)}
}

// settledGoroutines returns the number of goroutines once it has stayed
// the same for half a second (or after 20s).
func settledGoroutines() int {
	deadline := time.Now().Add(20 * time.Second)
	last, same := runtime.NumGoroutine(), 0
	for same < 5 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// liveMemory returns the live heap after a collection, less what holds
// the output of the servers this process started (cluster.HeldLogBytes:
// it grows with how much the servers log, not with what is measured), and
// the memory held by goroutine stacks, which the heap figure does not
// include.
func liveMemory() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	heap = m.HeapAlloc
	if logs := uint64(cluster.HeldLogBytes()); logs < heap {
		heap -= logs
	}
	return heap, m.StackInuse
}

// ---- many waiters on one lock ----

type waitersResult struct {
	Recipe       string  `json:"recipe"`
	Role         role    `json:"role"`
	Waiters      int     `json:"waiters"`
	Conns        int     `json:"connections"`
	QueueSec     float64 `json:"queue_sec"`
	ServeSec     float64 `json:"serve_sec"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// Ratio compares serve_sec with the reference's: one window.
	Ratio *windowRatio `json:"ratio,omitempty"`
	seq   int64
}

// measureWaiters queues cfg.Waiters waiters on one held lock, spread over
// cfg.WaiterConns connections, then releases it and measures the time
// until every waiter has been granted the lock (each releases at once).
func measureWaiters(t *testing.T, r recipe, at placement, cfg config) waitersResult {
	seq := nextWindow()
	n := cfg.Waiters
	conns := make([]conn, cfg.WaiterConns)
	for i := range conns {
		conns[i] = dial(t, r, at.spread(i), nil, cfg.ttl())
	}
	name := uniqueName("waiters")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	holder := newClient(t, r, conns[0])
	tok, release, err := acquireGrant(ctx, holder, name)
	if err != nil {
		t.Fatalf("%s: acquire(%q) = %v; want nil", r.name, name, err)
	}
	// The holder is client n of the register, the waiters 0 to n-1.
	reg := newRegister(fmt.Sprintf("%s, %d waiters", r.name, n), 0)
	reg.enter(name, n, exclusive, tok)
	var (
		mu       sync.Mutex
		lastAt   time.Time
		served   int
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	queueStart := time.Now()
	for i := range n {
		wg.Go(func() {
			cl, err := conns[i%len(conns)].client()
			if err != nil {
				fail(fmt.Errorf("waiter %d: client() = %w", i, err))
				return
			}
			tok, rel, err := acquireGrant(ctx, cl, name)
			if err != nil {
				fail(fmt.Errorf("waiter %d: acquire(%q) = %w; want nil", i, name, err))
				return
			}
			reg.enter(name, i, exclusive, tok)
			mu.Lock()
			served++
			lastAt = time.Now()
			mu.Unlock()
			reg.leave(name, i)
			if err := rel(ctx); err != nil {
				fail(fmt.Errorf("waiter %d: release(%q) = %w; want nil", i, name, err))
			}
		})
	}
	waitRecords(t, r, name, n+1, 10*time.Minute)
	queued := time.Since(queueStart)
	start := time.Now()
	reg.leave(name, n)
	if err := release(ctx); err != nil {
		t.Fatalf("%s: release(%q) = %v; want nil", r.name, name, err)
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("%s: %v", r.name, firstErr)
	}
	if err := reg.err(); err != nil {
		t.Fatal(err)
	}
	if served != n {
		t.Fatalf("%s: %d waiters served; want %d", r.name, served, n)
	}
	serve := lastAt.Sub(start)
	return waitersResult{
		Recipe:       r.name,
		Role:         r.role,
		Waiters:      n,
		Conns:        len(conns),
		QueueSec:     queued.Seconds(),
		ServeSec:     serve.Seconds(),
		GrantsPerSec: float64(n) / serve.Seconds(),
		seq:          seq,
	}
}

// singleRatios sets the ratios of the fencelock rows of the failover,
// leases and waiters measurements to the reference's.
func singleRatios(br *backendReport) {
	isRef := func(r role) bool { return r == roleReference }
	if ref, ok := find(br.Failover, func(x failoverResult) bool { return isRef(x.Role) }); ok {
		for i, x := range br.Failover {
			if x.Role == roleFencelock {
				br.Failover[i].Ratio = pairRatio("median_ms", lower, x.TrialsMs, ref.TrialsMs, x.seq, ref.seq)
			}
		}
	}
	if ref, ok := find(br.Leases, func(x leasesResult) bool { return isRef(x.Role) }); ok {
		for i, x := range br.Leases {
			if x.Role == roleFencelock {
				br.Leases[i].Ratio = pairRatio("heap_bytes_per_lease", lower, []float64{x.HeapBytesPerLease}, []float64{ref.HeapBytesPerLease}, []int64{x.seq}, []int64{ref.seq})
			}
		}
	}
	if ref, ok := find(br.Waiters, func(x waitersResult) bool { return isRef(x.Role) }); ok {
		for i, x := range br.Waiters {
			if x.Role == roleFencelock {
				br.Waiters[i].Ratio = pairRatio("serve_sec", lower, []float64{x.ServeSec}, []float64{ref.ServeSec}, []int64{x.seq}, []int64{ref.seq})
			}
		}
	}
}
