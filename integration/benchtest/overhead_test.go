package benchtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/zklock"
)

// The overheads: what metrics, tracing and TLS cost an uncontended
// acquire+release by one client, resolved to ±1%.
//
// Two clients on the same follower, one with the feature off (A in the
// blocks below) and one with it on (B), run blocks of cfg.OverheadBlock
// cycles in the order A B B A, then B A A B, and so on, so that a drift
// of the machine's load cancels out within each four blocks. Each two
// adjacent blocks are a pair, whose ratio is B's mean cycle time over A's.
// The overhead is the geometric mean of the pairs' ratios, and its 95%
// confidence interval a Student t-interval on their logarithms (see
// logRatioCI), exponentiated. The measurement goes on, window after
// window, until the interval lies within ±1% of the ratio (and at least
// cfg.Repeats windows and minOverheadPairs pairs are in) or
// cfg.OverheadCapSec has passed; the interval is reported either way.

// minOverheadPairs is the fewest block pairs an interval is taken from.
const minOverheadPairs = 20

// quadsPerWindow is how many four-block sequences make one window of the
// overhead rows.
const quadsPerWindow = 4

// overheadResult is one overhead of a backend.
type overheadResult struct {
	What        string  `json:"what"`   // "control", "metrics", "tracing" or "tls"
	Metric      string  `json:"metric"` // the figure compared: mean_ms, the mean cycle time
	Ratio       float64 `json:"ratio"`  // on ÷ off
	Low         float64 `json:"ci95_low"`
	High        float64 `json:"ci95_high"`
	Pairs       int     `json:"pairs"`
	Met         bool    `json:"met_1pct"` // the interval lies within ±1% of the ratio
	BlockCycles int     `json:"block_cycles"`
	Sec         float64 `json:"sec"`         // how long the measurement ran
	CapReached  bool    `json:"cap_reached"` // it stopped at cfg.OverheadCapSec
	// The same from the blocks' median cycle times, which the tail of
	// the cycle times (a loaded machine's scheduling delays) moves less:
	// for reading next to the mean's, not a stopping rule.
	P50Ratio float64 `json:"p50_ratio"`
	P50Low   float64 `json:"p50_ci95_low"`
	P50High  float64 `json:"p50_ci95_high"`
	// Rows are the off and on sides, in windows of quadsPerWindow
	// four-block sequences; the on row's ratio is taken window by window.
	Rows []uncontendedResult `json:"rows"`
}

// overheadSide is one side of an overhead comparison: the recipe and,
// for the side with the feature on, what a scrape or export does between
// blocks (nil for none).
type overheadSide struct {
	r       recipe
	between func()
}

// abSide is one side of a running overhead measurement.
type abSide struct {
	overheadSide
	cl   client
	name string
	lat  []time.Duration // every cycle
	win  []time.Duration // this window's cycles
	wins []uncontendedWindow
	cpu  time.Duration // this process's CPU time during the side's blocks
}

// cycle acquires and releases s's lock once and returns how long it took.
func (s *abSide) cycle(t *testing.T) time.Duration {
	ctx := context.Background()
	start := time.Now()
	rel, err := s.cl.acquire(ctx, s.name)
	if err != nil {
		t.Fatalf("%s: acquire(%q) = %v; want nil", s.r.name, s.name, err)
	}
	if err := rel(ctx); err != nil {
		t.Fatalf("%s: release(%q) = %v; want nil", s.r.name, s.name, err)
	}
	return time.Since(start)
}

// block runs n cycles of s and returns their total and median time.
func (s *abSide) block(t *testing.T, n int) (time.Duration, float64) {
	var sum time.Duration
	cpu0 := processCPU()
	for range n {
		d := s.cycle(t)
		s.lat, s.win = append(s.lat, d), append(s.win, d)
		sum += d
	}
	s.cpu += processCPU() - cpu0
	return sum, summarize(s.win[len(s.win)-n:]).P50
}

// abRun is a running overhead measurement: sides[0] is off, sides[1] on.
type abRun struct {
	sides                      [2]*abSide
	pairs, p50Pairs, perWindow []float64
}

// quad runs four blocks, A B B A for an even q and B A A B for an odd
// one, and adds their two pairs.
func (a *abRun) quad(t *testing.T, q, cycles int) {
	seq := []int{0, 1, 1, 0}
	if q%2 == 1 {
		seq = []int{1, 0, 0, 1}
	}
	var d [4]time.Duration
	var p50 [4]float64
	for k, i := range seq {
		d[k], p50[k] = a.sides[i].block(t, cycles)
	}
	for k := 0; k < 4; k += 2 {
		off, on := k, k+1
		if seq[k] == 1 {
			off, on = on, off
		}
		a.pairs = append(a.pairs, float64(d[on])/float64(d[off]))
		a.p50Pairs = append(a.p50Pairs, p50[on]/p50[off])
	}
	for _, s := range a.sides {
		if s.between != nil {
			s.between()
		}
	}
}

// endWindow closes a window of both rows.
func (a *abRun) endWindow() {
	for _, s := range a.sides {
		sum := summarize(s.win)
		s.wins = append(s.wins, uncontendedWindow{Cycles: len(s.win), P50: sum.P50, Mean: sum.Mean, CyclesPerSec: 1000 / sum.Mean})
		s.win = s.win[:0]
	}
	off, on := a.sides[0].wins, a.sides[1].wins
	a.perWindow = append(a.perWindow, on[len(on)-1].Mean/off[len(off)-1].Mean)
}

// rows returns the off and on rows, the on row with its ratio per window.
func (a *abRun) rows() []uncontendedResult {
	var rows []uncontendedResult
	for _, s := range a.sides {
		sum := summarize(s.lat)
		rows = append(rows, uncontendedResult{Recipe: s.r.name, Role: s.r.role, Latency: sum, CyclesPerSec: 1000 / sum.Mean,
			ClientCPUUs: float64(s.cpu/time.Microsecond) / float64(len(s.lat)), Windows: s.wins})
	}
	pw := a.perWindow
	rows[1].Ratio = &windowRatio{Metric: "mean_ms", Better: lower, PerWindow: pw, Order: slices.Repeat([]string{"ABBA"}, len(pw)),
		Median: median(pw), Min: slices.Min(pw), Max: slices.Max(pw)}
	return rows
}

// measureOverhead measures the overhead what of on against off, as the
// comment at the top of this file says.
func measureOverhead(t *testing.T, what string, off, on overheadSide, at placement, cfg config) overheadResult {
	a := &abRun{sides: [2]*abSide{{overheadSide: off}, {overheadSide: on}}}
	for _, s := range a.sides {
		s.cl = newClient(t, s.r, dial(t, s.r, at.follower, nil, cfg.ttl()))
		s.name = uniqueName("overhead-" + what)
	}
	for range cfg.WarmCycles {
		for _, s := range a.sides {
			s.cycle(t)
		}
	}
	res := overheadResult{What: what, Metric: "mean_ms", BlockCycles: cfg.OverheadBlock}
	start := time.Now()
	for q := 0; ; {
		for range quadsPerWindow {
			a.quad(t, q, cfg.OverheadBlock)
			q++
		}
		a.endWindow()
		r, lo, hi, ok := logRatioCI(a.pairs)
		if !ok {
			t.Fatalf("%s overhead: no interval from %d block pairs", what, len(a.pairs))
		}
		res.Ratio, res.Low, res.High, res.Pairs = r, lo, hi, len(a.pairs)
		res.Met = within1pct(r, lo, hi)
		if len(a.perWindow) < cfg.Repeats || len(a.pairs) < minOverheadPairs {
			continue
		}
		if res.Met {
			break
		}
		if time.Since(start) >= secs(cfg.OverheadCapSec) {
			res.CapReached = true
			break
		}
	}
	res.Sec = time.Since(start).Seconds()
	res.P50Ratio, res.P50Low, res.P50High, _ = logRatioCI(a.p50Pairs)
	res.Rows = a.rows()
	t.Logf("%s overhead: %.4f× [%.4f, %.4f] from %d block pairs in %.0fs (%s); block medians %.4f× [%.4f, %.4f]",
		what, res.Ratio, res.Low, res.High, res.Pairs, res.Sec, verdict1pct(res.Met), res.P50Ratio, res.P50Low, res.P50High)
	return res
}

func verdict1pct(met bool) string {
	if met {
		return "within ±1%"
	}
	return "NOT within ±1%: the cap was reached"
}

// runObservabilityOverheads measures the metrics and tracing overheads of
// the backend's fencelock recipe fl, after a control of fl against
// itself: off is fl as it is, on is fl with a
// MeterProvider of the OpenTelemetry SDK (a manual reader, collected
// after every four blocks, as a scrape would) or a TracerProvider of the
// SDK (every span sampled, batched and exported to an exporter that
// counts and drops them).
func runObservabilityOverheads(t *testing.T, kind cluster.Kind, fl recipe, at placement, cfg config) []overheadResult {
	var out []overheadResult
	// The control measures fl against itself: its interval shows what the
	// method reads into two identical sides (connection, member, order).
	t.Run("control", func(t *testing.T) {
		same := fl
		same.name = fl.name + ", again"
		out = append(out, measureOverhead(t, "control", overheadSide{r: fl}, overheadSide{r: same}, at, cfg))
	})
	t.Run("metrics", func(t *testing.T) {
		m := testutil.NewMetrics(t)
		on := fl
		on.name = fl.name + ", metrics (SDK)"
		if kind == cluster.Etcd {
			on.dial = etcdlockDial(etcdlock.WithMeterProvider(m.Provider))
		} else {
			on.dial = zklockDial(zklock.WithMeterProvider(m.Provider))
		}
		res := measureOverhead(t, "metrics", overheadSide{r: fl}, overheadSide{r: on, between: func() { m.Sum(t, "fencelock.leases.held", nil) }}, at, cfg)
		cycles := uint64(res.Rows[1].Latency.N)
		if got := m.HistogramCount(t, "fencelock.acquire.duration", map[string]string{"fencelock.outcome": "granted"}); got < cycles {
			t.Errorf("fencelock.acquire.duration count = %d; want at least the %d cycles measured", got, cycles)
		}
		out = append(out, res)
	})
	t.Run("tracing", func(t *testing.T) {
		exp := &countingExporter{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		on := fl
		on.name = fl.name + ", tracing (SDK)"
		if kind == cluster.Etcd {
			on.dial = etcdlockDial(etcdlock.WithTracerProvider(tp))
		} else {
			on.dial = zklockDial(zklock.WithTracerProvider(tp))
		}
		res := measureOverhead(t, "tracing", overheadSide{r: fl}, overheadSide{r: on}, at, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tp.ForceFlush(ctx); err != nil {
			t.Fatalf("ForceFlush() = %v", err)
		}
		// An acquire span and a release span per cycle.
		if got, cycles := exp.spans.Load(), int64(res.Rows[1].Latency.N); got < 2*cycles {
			t.Errorf("%d spans exported; want at least 2 for each of the %d cycles measured", got, cycles)
		}
		out = append(out, res)
	})
	return out
}

// countingExporter is a span exporter that counts the spans and drops
// them.
type countingExporter struct{ spans atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(spans)))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }

// printOverheads prints the overheads of a backend.
func printOverheads(w io.Writer, rows []overheadResult) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nOverheads: uncontended acquire+release, 1 client per side on the same follower, blocks of %d cycles in A B B A / B A A B order until the 95%% interval is within ±1%% (or the cap); ratio of mean cycle time on/off, geometric mean over adjacent block pairs, Student t-interval on their logarithms:\n", rows[0].BlockCycles)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "what\t off\t on\t off mean ms\t on mean ms\t client CPU µs/cycle off → on\t ratio\t 95% interval\t ±%\t pairs\t s\t per window\t within ±1%\t block medians: ratio\t 95% interval\t")
	for _, o := range rows {
		half := 100 * overheadHalfWidth(o)
		met := "yes"
		if !o.Met {
			met = "NO (cap)"
		}
		fmt.Fprintf(tw, "%s\t %s\t %s\t %.3f\t %.3f\t %.0f → %.0f\t %.4f×\t %.4f–%.4f\t %.2f\t %d\t %.0f\t %s\t %s\t %.4f×\t %.4f–%.4f\t\n", o.What, o.Rows[0].Recipe, o.Rows[1].Recipe,
			o.Rows[0].Latency.Mean, o.Rows[1].Latency.Mean, o.Rows[0].ClientCPUUs, o.Rows[1].ClientCPUUs, o.Ratio, o.Low, o.High, half, o.Pairs, o.Sec, o.Rows[1].Ratio.spread(), met, o.P50Ratio, o.P50Low, o.P50High)
	}
	tw.Flush()
	for _, o := range rows {
		if o.What == "metrics" && o.Low > 1.02 {
			fmt.Fprintf(w, "  metrics cost more than 2%% on this backend: the whole interval (%.4f–%.4f) is above 1.02\n", o.Low, o.High)
		}
	}
}

// overheadHalfWidth is the larger side of o's interval, as a fraction of
// its ratio.
func overheadHalfWidth(o overheadResult) float64 {
	if o.Ratio == 0 {
		return math.Inf(1)
	}
	return max(o.High/o.Ratio-1, 1-o.Low/o.Ratio)
}
