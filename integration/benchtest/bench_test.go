package benchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// config sizes the run. Every field is in the JSON output.
type config struct {
	TTLSec         float64 `json:"ttl_sec"`          // session TTL / timeout everywhere but failover
	FailoverTTLSec float64 `json:"failover_ttl_sec"` // the same for every recipe in the failover measurement
	Rounds         int     `json:"uncontended_rounds"`
	Cycles         int     `json:"uncontended_cycles_per_round"`
	WarmCycles     int     `json:"uncontended_warmup_cycles"`
	Clients        []int   `json:"contended_clients"`
	// Holds are the contended rows' holds, in ms (contendedHolds unless
	// FENCELOCK_BENCH_HOLDS names some).
	Holds     []float64 `json:"contended_holds_ms"`
	WarmSec   float64   `json:"contended_warmup_sec"`
	WindowSec float64   `json:"contended_window_sec"` // per recipe and row, in Repeats windows (contended, lock-delay, read-write, semaphore)
	// Repeats is the number of windows of every compared row, run in
	// alternating order; the uncontended and TLS rows have Rounds.
	Repeats        int `json:"contended_repeats"`
	FailoverTrials int `json:"failover_trials"`
	Leases         int `json:"leases"`
	LeaseParallel  int `json:"lease_parallel"`
	Waiters        int `json:"waiters"`
	WaiterConns    int `json:"waiter_connections"`
	// The scale measurement (scale_test.go), run only when asked for.
	ScaleLeases    int     `json:"scale_leases"`
	ScaleParallel  int     `json:"scale_lease_parallel"`
	ScaleLockers   int     `json:"scale_lockers"`
	ScaleNames     int     `json:"scale_names"`
	ScaleWindowSec float64 `json:"scale_window_sec"` // per recipe, in Repeats windows
	// The overheads (overhead_test.go): cycles per block, and how long
	// one overhead may run before it is reported unresolved.
	OverheadBlock  int     `json:"overhead_block_cycles"`
	OverheadCapSec float64 `json:"overhead_cap_sec"`
	Quick          bool    `json:"quick"`
	Provider       string  `json:"provider"`
}

func (c config) ttl() time.Duration         { return secs(c.TTLSec) }
func (c config) failoverTTL() time.Duration { return secs(c.FailoverTTLSec) }
func (c config) warm() time.Duration        { return secs(c.WarmSec) }
func (c config) window() time.Duration      { return secs(c.WindowSec) }

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func loadConfig() config {
	c := config{
		TTLSec:         10,
		FailoverTTLSec: 2,
		Rounds:         6,
		Cycles:         200,
		WarmCycles:     100,
		Clients:        []int{2, 4, 8, 16, 32},
		WarmSec:        0.5,
		WindowSec:      6,
		Repeats:        3,
		FailoverTrials: 3,
		Leases:         10000,
		LeaseParallel:  32,
		Waiters:        1000,
		// ZooKeeper accepts 60 connections per client address and server
		// by default; 10 connections of 100 waiters stay far below.
		WaiterConns:    10,
		ScaleLeases:    100000,
		ScaleParallel:  64,
		ScaleLockers:   200,
		ScaleNames:     1000,
		ScaleWindowSec: 21,
		OverheadBlock:  10,
		OverheadCapSec: 60,
		Provider:       providerName(),
	}
	if os.Getenv("FENCELOCK_BENCH_QUICK") == "1" {
		c.Quick = true
		c.Rounds, c.Cycles, c.WarmCycles = 3, 30, 20
		c.Clients = []int{2, 8}
		c.WarmSec, c.WindowSec, c.Repeats = 0.5, 1.5, 3
		c.FailoverTrials = 1
		c.Leases, c.Waiters = 500, 100
		c.ScaleLeases, c.ScaleLockers, c.ScaleNames, c.ScaleWindowSec = 5000, 20, 100, 3
		c.OverheadCapSec = 3
	}
	if v := os.Getenv("FENCELOCK_BENCH_OVERHEAD_CAP"); v != "" {
		if sec, err := strconv.ParseFloat(v, 64); err == nil && sec > 0 {
			c.OverheadCapSec = sec
		}
	}
	return c
}

// report is the JSON written at the end of the run.
type report struct {
	Started  time.Time         `json:"started"`
	Command  string            `json:"command"`
	Machine  machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Config   config            `json:"config"`
	Backends []*backendReport  `json:"backends"`
}

type machine struct {
	CPU          string `json:"cpu"`
	NumCPU       int    `json:"num_cpu"`
	GOOS         string `json:"goos"`
	GOARCH       string `json:"goarch"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

type backendReport struct {
	Backend       cluster.Kind        `json:"backend"`
	ServerVersion string              `json:"server_version"`
	Members       int                 `json:"members"`
	Uncontended   []uncontendedResult `json:"uncontended"`
	Contended     []contendedResult   `json:"contended"`
	Failover      []failoverResult    `json:"failover"`
	Leases        []leasesResult      `json:"leases"`
	Waiters       []waitersResult     `json:"waiters"`
	Shared        []sharedResult      `json:"shared"`
	Semaphore     []sharedResult      `json:"semaphore"`
	TLS           []uncontendedResult `json:"tls,omitempty"`       // plain vs TLS (tls_test.go)
	LockDelay     []contendedResult   `json:"lockdelay,omitempty"` // without and with a lock-delay (lockdelay_test.go)
	Interop       []contendedResult   `json:"interop,omitempty"`   // the reference, fencelock in its layout, mixed (interop_test.go)
	Multi         []multiResult       `json:"multi,omitempty"`     // AcquireAll against sorted Acquire (multi_test.go)
	Overheads     []overheadResult    `json:"overheads,omitempty"` // metrics, tracing and TLS on/off (overhead_test.go)
	Targets       []target            `json:"targets"`
	Scale         *scaleReport        `json:"scale,omitempty"` // scale_test.go
}

// target is one of the targets, checked against this run.
type target struct {
	What   string `json:"what"`
	Figure string `json:"figure"`
	Met    bool   `json:"met"`
}

// TestBench is the side-by-side benchmark run. It starts real clusters, so
// it runs only when FENCELOCK_BENCH=1 (see the package doc).
func TestBench(t *testing.T) {
	if os.Getenv("FENCELOCK_BENCH") != "1" {
		t.Skip("set FENCELOCK_BENCH=1 to run the side-by-side benchmarks (real clusters, several minutes)")
	}
	cfg := loadConfig()
	if err := filterRows(&cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("contended rows: %v clients, holds %v ms (FENCELOCK_BENCH_CLIENTS, FENCELOCK_BENCH_HOLDS)", cfg.Clients, cfg.Holds)
	rep := &report{
		Started:  time.Now().UTC(),
		Command:  "cd integration && FENCELOCK_BENCH=1 go test -run '^TestBench$' -timeout 60m -v ./benchtest",
		Machine:  machineFacts(),
		Versions: moduleVersions(),
		Config:   cfg,
	}
	kinds := []cluster.Kind{cluster.Etcd, cluster.ZooKeeper}
	if only := os.Getenv("FENCELOCK_BENCH_BACKENDS"); only != "" {
		kinds = nil
		for _, k := range strings.Split(only, ",") {
			kinds = append(kinds, cluster.Kind(strings.TrimSpace(k)))
		}
	}
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			rep.Backends = append(rep.Backends, runBackend(t, kind, cfg))
		})
	}
	rep.Machine.LoadAvgEnd = loadAvg()
	// The tables are printed once every subtest is over, so that the
	// test's own output does not cut through them.
	var tables strings.Builder
	fmt.Fprintf(&tables, "fencelock side-by-side benchmarks, %s\n%s, %d CPUs, load average %s at start, %s at end; %s\n",
		rep.Started.Format(time.RFC3339), rep.Machine.CPU, rep.Machine.NumCPU, rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd, formatVersions(rep.Versions))
	for _, br := range rep.Backends {
		printBackend(&tables, br, cfg)
	}
	fmt.Print("\n", tables.String())
	if t.Failed() || len(rep.Backends) == 0 {
		// Keep the results of the last complete run.
		t.Logf("results not written: the run failed or measured nothing")
		return
	}
	out := os.Getenv("FENCELOCK_BENCH_OUT")
	if out == "" {
		out = "bench-results.json"
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join("..", out) // the test runs in integration/benchtest
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatalf("json.MarshalIndent() = %v", err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		t.Fatalf("write %s: %v", out, err)
	}
	txt := strings.TrimSuffix(out, ".json") + ".txt"
	if err := os.WriteFile(txt, []byte(tables.String()), 0o644); err != nil {
		t.Fatalf("write %s: %v", txt, err)
	}
	abs, _ := filepath.Abs(out)
	fmt.Printf("\nresults written to %s and %s\n", abs, filepath.Base(txt))
}

func runBackend(t *testing.T, kind cluster.Kind, cfg config) *backendReport {
	c := cluster.FromEnv(t).Start(t, kind)
	br := &backendReport{Backend: kind, Members: len(c.Members)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rs []recipe
	switch kind {
	case cluster.Etcd:
		admin, err := etcdClient(c.Endpoints(), nil)
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		t.Cleanup(func() { admin.Close() })
		st, err := admin.Status(ctx, c.Endpoints()[0])
		if err != nil {
			t.Fatalf("Status(%s) = %v", c.Endpoints()[0], err)
		}
		br.ServerVersion = "etcd " + st.Version
		rs = etcdRecipes(admin)
	case cluster.ZooKeeper:
		admin, err := zkConnect(c.Endpoints(), cfg.ttl(), nil)
		if err != nil {
			t.Fatalf("zk connect: %v", err)
		}
		t.Cleanup(admin.Close)
		srvr, err := cluster.FourLetterWord(ctx, c.Endpoints()[0], "srvr")
		if err != nil {
			t.Fatalf("srvr: %v", err)
		}
		br.ServerVersion = zkVersion(srvr)
		rs = zkRecipes(admin)
	default:
		t.Fatalf("unknown backend %q; want %q or %q", kind, cluster.Etcd, cluster.ZooKeeper)
	}
	byRole := func(roles ...role) []recipe {
		var out []recipe
		for _, r := range rs {
			if slices.Contains(roles, r.role) {
				out = append(out, r)
			}
		}
		return out
	}
	locks := byRole(roleFencelock, roleReference)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	at := placement{all: c.Endpoints(), follower: []string{c.Endpoints()[(leader+1)%len(c.Members)]}}

	t.Run("uncontended", func(t *testing.T) {
		skipUnlessSelected(t, "uncontended")
		br.Uncontended = measureUncontended(t, byRole(roleFencelock, roleReference, roleFloor), at, cfg)
		uncontendedRatios(br.Uncontended)
	})
	// The TLS rows and the TLS overhead share the secured cluster.
	t.Run("tls", func(t *testing.T) {
		skipUnlessSelected(t, "tls", "overheads")
		var rs []recipe
		if kind == cluster.Etcd {
			rs = etcdTLSRecipes(t)
		} else {
			rs = zkTLSRecipes(t)
		}
		if selected("tls") {
			br.TLS = tlsRows(t, rs, at, cfg)
		}
		if selected("overheads") {
			br.Overheads = append(br.Overheads, measureOverhead(t, "tls", overheadSide{r: rs[0]}, overheadSide{r: rs[1]}, at, cfg))
		}
	})
	t.Run("overheads", func(t *testing.T) {
		skipUnlessSelected(t, "overheads")
		br.Overheads = append(br.Overheads, runObservabilityOverheads(t, kind, byRole(roleFencelock)[0], at, cfg)...)
	})
	t.Run("contended", func(t *testing.T) {
		skipUnlessSelected(t, "contended")
		br.Contended = runContended(t, byRole(roleFencelock, roleReference, roleNaive), at, cfg)
	})
	t.Run("lockdelay", func(t *testing.T) {
		skipUnlessSelected(t, "lockdelay")
		br.LockDelay = runLockDelay(t, kind, byRole(roleFencelock)[0], at, cfg)
	})
	t.Run("interop", func(t *testing.T) {
		skipUnlessSelected(t, "interop")
		br.Interop = runInterop(t, kind, byRole(roleReference)[0], at, cfg)
	})
	t.Run("multi", func(t *testing.T) {
		skipUnlessSelected(t, "multi")
		br.Multi = runMulti(t, byRole(roleFencelock)[0], at, cfg)
	})
	t.Run("failover", func(t *testing.T) {
		skipUnlessSelected(t, "failover")
		for _, r := range locks {
			t.Run(r.name, func(t *testing.T) {
				br.Failover = append(br.Failover, measureFailover(t, kind, at, r, cfg))
			})
		}
	})
	t.Run("leases", func(t *testing.T) {
		skipUnlessSelected(t, "leases")
		for _, r := range locks {
			t.Run(r.name, func(t *testing.T) {
				br.Leases = append(br.Leases, measureLeases(t, r, at, cfg))
			})
		}
	})
	t.Run("waiters", func(t *testing.T) {
		skipUnlessSelected(t, "waiters")
		for _, r := range locks {
			t.Run(r.name, func(t *testing.T) {
				br.Waiters = append(br.Waiters, measureWaiters(t, r, at, cfg))
			})
		}
	})
	t.Run("shared", func(t *testing.T) {
		skipUnlessSelected(t, "shared")
		br.Shared = runShared(t, kind, locks, at, cfg)
	})
	t.Run("semaphore", func(t *testing.T) {
		skipUnlessSelected(t, "semaphore")
		br.Semaphore = runSemaphore(t, kind, locks, at, cfg)
	})
	t.Run("scale", func(t *testing.T) {
		skipUnlessListed(t, "scale")
		br.Scale = runScale(t, kind, cfg)
	})
	singleRatios(br)
	br.Targets = checkTargets(br, cfg)
	return br
}

// ---- output ----

func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func find[T any](xs []T, f func(T) bool) (T, bool) {
	i := slices.IndexFunc(xs, f)
	if i < 0 {
		var zero T
		return zero, false
	}
	return xs[i], true
}

func printBackend(w io.Writer, br *backendReport, cfg config) {
	fmt.Fprintf(w, "\n=== %s (%s, %d members) ===\n", br.Backend, br.ServerVersion, br.Members)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	ref := func(role role) func(uncontendedResult) bool {
		return func(u uncontendedResult) bool { return u.Role == role }
	}

	fmt.Fprintf(w, "\nUncontended acquire+release, 1 client connected to a follower, %d cycles each (%d rounds, recipes in alternating order; ratios: median (min–max) over the rounds):\n", cfg.Rounds*cfg.Cycles, cfg.Rounds)
	fmt.Fprintln(tw, "recipe\t role\t p50 ms\t p99 ms\t cycles/s\t requests/cycle\t client CPU µs/cycle\t p50 vs ref\t p50 vs floor\t cycles/s vs ref\t")
	refU, okRef := find(br.Uncontended, ref(roleReference))
	for _, u := range br.Uncontended {
		vsRef, vsFloor, cyc := "", "", ""
		if u.Role == roleFencelock {
			vsRef, vsFloor = u.Ratio.spread(), u.RatioFloor.spread()
			if okRef {
				cyc = u.ratioTo(refU, "cycles_per_sec", higher).spread()
			}
		}
		fmt.Fprintf(tw, "%s\t %s\t %.2f\t %.2f\t %.0f\t %.1f\t %.0f\t %s\t %s\t %s\t\n", u.Recipe, u.Role, u.Latency.P50, u.Latency.P99, u.CyclesPerSec, u.RequestsPerCycle, u.ClientCPUUs, vsRef, vsFloor, cyc)
	}
	tw.Flush()
	printTLS(w, br.Backend, br.TLS, cfg)
	printOverheads(w, br.Overheads)

	printContended(w, br, cfg)
	printLockDelay(w, br.LockDelay, cfg)
	printInterop(w, br.Interop, cfg)
	printMulti(w, br.Multi, cfg)

	fmt.Fprintf(w, "\nFailover: holder in a child process killed with SIGKILL, TTL/session timeout %.0fs for every recipe, time from kill to the next grant:\n", cfg.FailoverTTLSec)
	fmt.Fprintln(tw, "recipe\t trials ms\t median ms\t median vs ref\t")
	refF, _ := find(br.Failover, func(f failoverResult) bool { return f.Role == roleReference })
	for _, f := range br.Failover {
		vs := ""
		if f.Role == roleFencelock {
			vs = ratio(f.MedianMs, refF.MedianMs)
		}
		var trials []string
		for _, x := range f.TrialsMs {
			trials = append(trials, fmt.Sprintf("%.0f", x))
		}
		fmt.Fprintf(tw, "%s\t %s\t %.0f\t %s\t\n", f.Recipe, strings.Join(trials, " "), f.MedianMs, vs)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n%d leases held through one client (distinct names, %d acquiring at a time): goroutines, live heap and goroutine stacks of this process:\n", cfg.Leases, cfg.LeaseParallel)
	fmt.Fprintln(tw, "recipe\t acquire/s\t goroutines at 0 / n/10 / n leases\t goroutines/lease\t heap KiB/lease\t stacks KiB/lease\t heap/lease vs ref\t")
	refL, _ := find(br.Leases, func(l leasesResult) bool { return l.Role == roleReference })
	for _, l := range br.Leases {
		vs := ""
		if l.Role == roleFencelock {
			vs = ratio(l.HeapBytesPerLease, refL.HeapBytesPerLease)
		}
		var gs []string
		for _, p := range l.Points {
			gs = append(gs, fmt.Sprint(p.Goroutines))
		}
		fmt.Fprintf(tw, "%s\t %.0f\t %s\t %.2f\t %.1f\t %.1f\t %s\t\n", l.Recipe, l.AcquirePerSec, strings.Join(gs, " / "), l.GoroutinesPerLease, l.HeapBytesPerLease/1024, max(l.StackBytesPerLease, 0)/1024, vs)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n%d waiters on one lock over %d connections, each releasing at once: time to serve them all:\n", cfg.Waiters, cfg.WaiterConns)
	fmt.Fprintln(tw, "recipe\t queue s\t serve s\t grants/s\t serve vs ref\t")
	refW, _ := find(br.Waiters, func(x waitersResult) bool { return x.Role == roleReference })
	for _, x := range br.Waiters {
		vs := ""
		if x.Role == roleFencelock {
			vs = ratio(x.ServeSec, refW.ServeSec)
		}
		fmt.Fprintf(tw, "%s\t %.2f\t %.2f\t %.0f\t %s\t\n", x.Recipe, x.QueueSec, x.ServeSec, x.GrantsPerSec, vs)
	}
	tw.Flush()

	printShared(w, tw, br, cfg)
	printScale(w, br.Scale)

	fmt.Fprintf(w, "\nTargets (the contended lines are checked on the rows with an empty critical section, as the targets were set):\n")
	for _, tg := range br.Targets {
		verdict := "met"
		if !tg.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  %-6s  %s: %s\n", verdict, tg.What, tg.Figure)
	}
}

// trunc2 truncates q to two decimals, so that a figure printed next to a
// missed "at least" target never rounds up to the target itself.
func trunc2(q float64) float64 { return math.Floor(q*100) / 100 }

// checkTargets compares this run's figures with the targets. The
// contended targets are checked on the rows with an empty critical
// section, on which they were set: their absolute figures (300 grants/s
// on etcd) only mean something there, since a 1ms hold alone takes a
// third of that budget. The rows that hold each grant are printed next to
// them, with their own ratios to the reference.
func checkTargets(br *backendReport, cfg config) []target {
	var out []target
	u := func(r role) (uncontendedResult, bool) {
		return find(br.Uncontended, func(x uncontendedResult) bool { return x.Role == r })
	}
	if fl, ok := u(roleFencelock); ok {
		if ref, ok := u(roleReference); ok {
			q := fl.Latency.P50 / ref.Latency.P50
			out = append(out, target{"uncontended p50 within 5% of the reference", fmt.Sprintf("%.2f ms vs %.2f ms = %.2f×", fl.Latency.P50, ref.Latency.P50, q), q <= 1.05})
		}
		if fl0, ok := u(roleFloor); ok {
			q := fl.Latency.P50 / fl0.Latency.P50
			out = append(out, target{"uncontended p50 within 10% of the floor", fmt.Sprintf("%.2f ms vs %.2f ms = %.2f× (%.1f vs %.1f requests/cycle)", fl.Latency.P50, fl0.Latency.P50, q, fl.RequestsPerCycle, fl0.RequestsPerCycle), q <= 1.10})
		}
	}
	c := func(r role, n int) (contendedResult, bool) {
		return find(br.Contended, func(x contendedResult) bool { return x.Role == r && x.Clients == n && x.HoldMs == 0 })
	}
	for _, n := range []int{2, 32} {
		fl, ok1 := c(roleFencelock, n)
		ref, ok2 := c(roleReference, n)
		if !ok1 || !ok2 {
			continue
		}
		want := 1.0
		if br.Backend == cluster.Etcd && n == 2 {
			want = 10
		}
		q := fl.GrantsPerSec / ref.GrantsPerSec
		out = append(out, target{fmt.Sprintf("contended grants/s with %d clients at least %.0f× the reference", n, want), fmt.Sprintf("%.0f vs %.0f = %.2f×", fl.GrantsPerSec, ref.GrantsPerSec, trunc2(q)), q >= want})
	}
	// No stall at any contention: on etcd, handoff p99 at most 10ms and at
	// least 300 grants/s at every client count; on ZooKeeper, at least the
	// reference's grants/s at every client count.
	for _, n := range cfg.Clients {
		fl, ok := c(roleFencelock, n)
		if !ok {
			continue
		}
		if br.Backend == cluster.Etcd {
			out = append(out, target{fmt.Sprintf("contended with %d clients: handoff p99 at most 10ms and at least 300 grants/s", n),
				fmt.Sprintf("handoff p99 %.1f ms, %.0f grants/s, %.2f late watches per grant", fl.Handoff.P99, fl.GrantsPerSec, fl.LateWatchesPerGrant), fl.Handoff.P99 <= 10 && fl.GrantsPerSec >= 300})
			continue
		}
		if ref, ok := c(roleReference, n); ok && n != 2 && n != 32 {
			q := fl.GrantsPerSec / ref.GrantsPerSec
			out = append(out, target{fmt.Sprintf("contended grants/s with %d clients at least 1× the reference", n), fmt.Sprintf("%.0f vs %.0f = %.2f×", fl.GrantsPerSec, ref.GrantsPerSec, trunc2(q)), q >= 1})
		}
	}
	if lo, ok := c(roleFencelock, cfg.Clients[0]); ok {
		if hi, ok := c(roleFencelock, cfg.Clients[len(cfg.Clients)-1]); ok {
			met := hi.EventsPerGrant <= 2 && hi.RequestsPerGrant <= 1.5*lo.RequestsPerGrant+0.5
			out = append(out, target{fmt.Sprintf("requests and watch events per release constant from %d to %d clients", lo.Clients, hi.Clients),
				fmt.Sprintf("requests/grant %.1f → %.1f, events/grant %.2f → %.2f", lo.RequestsPerGrant, hi.RequestsPerGrant, lo.EventsPerGrant, hi.EventsPerGrant), met})
		}
	}
	out = append(out, sharedTargets(br)...)
	out = append(out, interopTargets(br.Interop)...)
	if o, ok := find(br.Overheads, func(x overheadResult) bool { return x.What == "metrics" }); ok {
		out = append(out, target{"metrics cost at most 2% of an uncontended acquire+release (upper end of the 95% interval)",
			fmt.Sprintf("%.4f× [%.4f, %.4f], %d block pairs", o.Ratio, o.Low, o.High, o.Pairs), o.High <= 1.02})
	}
	if l, ok := find(br.Leases, func(x leasesResult) bool { return x.Role == roleFencelock }); ok {
		first, last := l.Points[1], l.Points[len(l.Points)-1]
		out = append(out, target{fmt.Sprintf("goroutines do not grow with held leases (%d → %d leases)", first.Leases, last.Leases),
			fmt.Sprintf("%d → %d goroutines, %.2f per lease", first.Goroutines, last.Goroutines, l.GoroutinesPerLease), l.GoroutinesPerLease < 0.01})
		if ref, ok := find(br.Leases, func(x leasesResult) bool { return x.Role == roleReference }); ok {
			out = append(out, heapTarget(l.Leases, l.HeapBytesPerLease, ref.HeapBytesPerLease)...)
		}
	}
	out = append(out, scaleTargets(br.Scale)...)
	return out
}

// heapTarget is the target "heap per held lease at most 1.5× the
// reference" for n leases, fencelock's fl bytes per lease against the
// reference's ref (none when ref was not measured). The ratio is rounded
// up, so a miss never prints as the target itself.
func heapTarget(n int, fl, ref float64) []target {
	if ref <= 0 {
		return nil
	}
	q := fl / ref
	return []target{{fmt.Sprintf("heap per held lease at most 1.5× the reference (%d leases)", n),
		fmt.Sprintf("%.0f vs %.0f bytes = %.2f×", fl, ref, math.Ceil(q*100)/100), q <= 1.5}}
}

// ---- machine and versions ----

func machineFacts() machine {
	m := machine{NumCPU: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// moduleVersions returns the Go version and the versions of the client
// libraries this package is built with, as required by the integration
// module's go.mod (the test runs in integration/benchtest).
func moduleVersions() map[string]string {
	v := map[string]string{"go": runtime.Version()}
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		return v
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "go.etcd.io/etcd/client/v3", "github.com/go-zookeeper/zk", "google.golang.org/grpc":
			v[f[0]] = f[1]
		}
	}
	return v
}

func formatVersions(v map[string]string) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+v[k])
	}
	return strings.Join(parts, ", ")
}

// skipUnlessSelected skips a measurement unless one of whats is selected.
func skipUnlessSelected(t *testing.T, whats ...string) {
	t.Helper()
	if slices.ContainsFunc(whats, selected) {
		return
	}
	t.Skipf("not requested: FENCELOCK_BENCH_ONLY=%s lists none of %s", os.Getenv("FENCELOCK_BENCH_ONLY"), strings.Join(whats, ", "))
}

// selected reports whether the measurement what runs: whether
// FENCELOCK_BENCH_ONLY is empty or lists it (comma-separated).
func selected(what string) bool {
	only := os.Getenv("FENCELOCK_BENCH_ONLY")
	if only == "" {
		return true
	}
	for _, w := range strings.Split(only, ",") {
		if strings.TrimSpace(w) == what {
			return true
		}
	}
	return false
}

// zkVersion picks the release out of the first line of "srvr", such as
// "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on ...".
func zkVersion(srvr string) string {
	line, _, _ := strings.Cut(srvr, "\n")
	_, v, ok := strings.Cut(line, "version: ")
	if !ok {
		return strings.TrimSpace(line)
	}
	v, _, _ = strings.Cut(v, ",")
	v, _, _ = strings.Cut(v, "-")
	return "ZooKeeper " + strings.TrimSpace(v)
}

func providerName() string {
	if p := strings.TrimSpace(os.Getenv("FENCELOCK_PROVIDER")); p != "" {
		return p
	}
	return "process"
}
