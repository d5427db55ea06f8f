package benchtest

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// contendedHolds are how long the clients of the contended rows hold each
// grant, in the order the rows run. An empty critical section is what
// the recipes' own benchmarks measure, so those rows compare with them;
// but a lock guards some work, and during a hold the waiters' watches and
// the servers settle, which an empty section never lets happen. The 1ms
// rows are the headline table (defaultHold); the 10ms rows show a hold
// that dwarfs the handoff.
var contendedHolds = []time.Duration{0, time.Millisecond, longHold}

const (
	defaultHold = time.Millisecond
	// longHold's rows run only at holdClients' counts: at 10ms a grant
	// costs several handoffs, and every client count of the run at every
	// hold would make the contended part 3 times as long.
	longHold = 10 * time.Millisecond
)

// holdClients returns the client counts of the rows holding hold: every
// count of the run, or for longHold the fewest, the middle and the most
// (2, 8 and 32 by default).
func holdClients(hold time.Duration, cfg config) []int {
	cs := cfg.Clients
	if hold < longHold || len(cs) < 3 {
		return cs
	}
	return []int{cs[0], cs[len(cs)/2], cs[len(cs)-1]}
}

// filterRows narrows the contended rows to the client counts of
// FENCELOCK_BENCH_CLIENTS and the holds of FENCELOCK_BENCH_HOLDS (both
// comma-separated, as "2,8,32" and "0,1ms"; empty: every row), and records
// the holds in cfg. A value that names no row is an error.
func filterRows(cfg *config) error {
	if v := os.Getenv("FENCELOCK_BENCH_CLIENTS"); v != "" {
		cs, err := parseClients(v)
		if err != nil {
			return fmt.Errorf("FENCELOCK_BENCH_CLIENTS: %w", err)
		}
		cfg.Clients = cs
	}
	holds := contendedHolds
	if v := os.Getenv("FENCELOCK_BENCH_HOLDS"); v != "" {
		var err error
		if holds, err = parseHolds(v); err != nil {
			return fmt.Errorf("FENCELOCK_BENCH_HOLDS: %w", err)
		}
	}
	cfg.Holds = nil
	for _, h := range holds {
		cfg.Holds = append(cfg.Holds, ms(h))
	}
	return nil
}

// parseClients parses a comma-separated list of client counts, each at
// least 2, in rising order.
func parseClients(s string) ([]int, error) {
	var cs []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("%q is not a client count of at least 2", f)
		}
		if len(cs) > 0 && n <= cs[len(cs)-1] {
			return nil, fmt.Errorf("%q: client counts must rise", s)
		}
		cs = append(cs, n)
	}
	return cs, nil
}

// parseHolds parses a comma-separated list of holds, each one of
// contendedHolds ("0", "1ms", "10ms"), and returns them in the order the
// rows run.
func parseHolds(s string) ([]time.Duration, error) {
	var hs []time.Duration
	for _, f := range strings.Split(s, ",") {
		h, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || !slices.Contains(contendedHolds, h) {
			return nil, fmt.Errorf("%q is not one of the holds %v", f, contendedHolds)
		}
		hs = append(hs, h)
	}
	return slices.DeleteFunc(slices.Clone(contendedHolds), func(h time.Duration) bool { return !slices.Contains(hs, h) }), nil
}

// holds returns the contended rows' holds (see filterRows).
func (c config) holds() []time.Duration {
	if c.Holds == nil {
		return contendedHolds
	}
	var hs []time.Duration
	for _, h := range c.Holds {
		hs = append(hs, time.Duration(h*float64(time.Millisecond)))
	}
	return hs
}

// holdLabel names a hold in subtest names and tables.
func holdLabel(hold time.Duration) string {
	if hold == 0 {
		return "hold0"
	}
	return "hold" + hold.String()
}

// runContended measures the contended rows of rs at every hold and client
// count. Each recipe's window is cut into cfg.Repeats parts, run in
// alternating order (A B C, C B A, ...), so that a change in the
// machine's load does not favour one recipe; the fencelock row's ratio to
// the reference is taken part by part.
func runContended(t *testing.T, rs []recipe, at placement, cfg config) []contendedResult {
	var out []contendedResult
	for _, hold := range cfg.holds() {
		for _, n := range holdClients(hold, cfg) {
			runs := make([][]contendedRun, len(rs))
			for rep := range cfg.Repeats {
				for _, i := range orderOf(rep, len(rs)) {
					r := rs[i]
					t.Run(fmt.Sprintf("%s/%d/%s", r.name, n, holdLabel(hold)), func(t *testing.T) {
						runs[i] = append(runs[i], measureContended(t, r, n, hold, at, cfg))
					})
				}
			}
			var rows []contendedResult
			for i, r := range rs {
				if len(runs[i]) == cfg.Repeats {
					res := combine(r, n, hold, runs[i])
					t.Logf("%s, %d clients, hold %v: %d grants/s, %.1f requests and %.2f watch events per grant", r.name, n, hold, int(res.GrantsPerSec), res.RequestsPerGrant, res.EventsPerGrant)
					rows = append(rows, res)
				}
			}
			out = append(out, withRefRatios(rows)...)
		}
	}
	return out
}

// withRefRatios sets the grants_per_sec ratio of the fencelock rows of
// one hold and client count to the reference's, and returns the rows.
func withRefRatios(rows []contendedResult) []contendedResult {
	ref, ok := find(rows, func(c contendedResult) bool { return c.Role == roleReference })
	for i, c := range rows {
		if ok && c.Role == roleFencelock {
			rows[i].Ratio = c.ratioTo(ref, "grants_per_sec", higher)
		}
	}
	return rows
}

// printContended prints the contended rows, one table per hold: the
// default hold's first, then the others in the order they ran.
func printContended(w io.Writer, br *backendReport, cfg config) {
	holds := append([]time.Duration{defaultHold}, slices.DeleteFunc(slices.Clone(contendedHolds), func(h time.Duration) bool { return h == defaultHold })...)
	for _, hold := range holds {
		rows := slices.DeleteFunc(slices.Clone(br.Contended), func(c contendedResult) bool { return c.HoldMs != ms(hold) })
		if len(rows) > 0 {
			printContendedTable(w, br.Backend, rows, hold, cfg)
		}
	}
}

// holdTitle says what the rows holding hold stand for.
func holdTitle(hold time.Duration) string {
	switch hold {
	case 0:
		return "empty critical section (each client releases as soon as it is granted, as in the recipes' own benchmarks)"
	case defaultHold:
		return fmt.Sprintf("each grant held %v (the default table: a lock guards some work)", hold)
	}
	return fmt.Sprintf("each grant held %v", hold)
}

// printContendedTable prints the contended rows of one hold, each
// fencelock row with its ratios to the reference of the same hold and
// client count.
func printContendedTable(w io.Writer, kind cluster.Kind, rows []contendedResult, hold time.Duration, cfg config) {
	var counts []string
	for _, c := range rows {
		if s := fmt.Sprint(c.Clients); !slices.Contains(counts, s) {
			counts = append(counts, s)
		}
	}
	fmt.Fprintf(w, "\nContended handoff, %s; one lock, %s clients, each client its own connection and session, %d windows of %.1fs per row (recipes in alternating order; ratios: median (min–max) over the windows); every grant checked exclusive for the whole hold; requests and watch events counted on every client's connection (herd check):\n",
		holdTitle(hold), strings.Join(counts, ", "), cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\t recipe\t grants/s\t wait p50 ms\t wait p99 ms\t handoff p50 ms\t handoff p99 ms\t requests/grant\t events/grant\t late watches/grant\t client CPU µs/grant\t grants/s vs ref\t requests/grant vs ref\t")
	for _, c := range rows {
		vs, vsReq := "", ""
		if c.Role == roleFencelock {
			if r, ok := find(rows, func(x contendedResult) bool { return x.Role == roleReference && x.Clients == c.Clients }); ok {
				vs, vsReq = c.Ratio.spread(), c.ratioTo(r, "requests_per_grant", lower).spread()
			}
		}
		late := "-" // ZooKeeper has no watch start revision
		if kind == cluster.Etcd {
			late = fmt.Sprintf("%.2f", c.LateWatchesPerGrant)
		}
		fmt.Fprintf(tw, "%d\t %s\t %.0f\t %.1f\t %.1f\t %.1f\t %.1f\t %.1f\t %.2f\t %s\t %.0f\t %s\t %s\t\n", c.Clients, c.Recipe, c.GrantsPerSec, c.Wait.P50, c.Wait.P99, c.Handoff.P50, c.Handoff.P99, c.RequestsPerGrant, c.EventsPerGrant, late, c.ClientCPUUs, vs, vsReq)
	}
	tw.Flush()
}
