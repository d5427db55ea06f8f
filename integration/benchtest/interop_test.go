package benchtest

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/zklock"
)

// interopRecipes returns, for the "interop" measurement, the backend's
// reference recipe (ref: concurrency.Mutex or zk.Lock), fencelock in the
// layout that contends with it, on the reference's records, and the mixed
// fleet: every other client is fencelock.
func interopRecipes(kind cluster.Kind, ref recipe) []recipe {
	fl := recipe{role: roleFencelock}
	if kind == cluster.Etcd {
		fl.name = "etcdlock layout=concurrency"
		fl.dial = etcdlockDial(etcdlock.WithPrefix(mutexPrefix), etcdlock.WithLayout(etcdlock.LayoutConcurrency))
	} else {
		fl.name = "zklock layout=curator"
		fl.dial = zklockDial(zklock.WithRoot(zkLockRoot), zklock.WithLayout(zklock.LayoutCurator))
	}
	var n atomic.Int64
	mixed := recipe{name: "mixed: half " + ref.name + ", half " + fl.name, role: roleFencelock, mixed: true,
		dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
			if n.Add(1)%2 == 0 {
				return fl.dial(endpoints, ctr, ttl)
			}
			return ref.dial(endpoints, ctr, ttl)
		}}
	return []recipe{ref, fl, mixed}
}

// runInterop measures contended grants (measureContended, every client
// count of the run, an empty critical section) of the reference alone,
// fencelock alone in the reference's layout, and the mixed fleet, in
// alternating order in the same run. Each fencelock row's ratio is to the
// reference, window by window; the mixed row also has slower: its
// grants/s over the slower of the two others', window by window.
func runInterop(t *testing.T, kind cluster.Kind, ref recipe, at placement, cfg config) []contendedResult {
	rs := interopRecipes(kind, ref)
	var out []contendedResult
	for _, n := range cfg.Clients {
		runs := make([][]contendedRun, len(rs))
		for rep := range cfg.Repeats {
			for _, i := range orderOf(rep, len(rs)) {
				t.Run(fmt.Sprintf("%s/%d", rs[i].name, n), func(t *testing.T) {
					runs[i] = append(runs[i], measureContended(t, rs[i], n, 0, at, cfg))
				})
			}
		}
		if slices.ContainsFunc(runs, func(r []contendedRun) bool { return len(r) != cfg.Repeats }) {
			continue
		}
		var rows []contendedResult
		for i, r := range rs {
			rows = append(rows, combine(r, n, 0, runs[i]))
		}
		rows = withRefRatios(rows)
		rows[2].Slower = slowerRatio(rows)
		t.Logf("interop, %d clients: %s %.0f, %s %.0f, mixed %.0f grants/s; mixed vs the slower %s", n,
			rows[0].Recipe, rows[0].GrantsPerSec, rows[1].Recipe, rows[1].GrantsPerSec, rows[2].GrantsPerSec, rows[2].Slower.spread())
		out = append(out, rows...)
	}
	return out
}

// slowerRatio is the mixed row's (rows[2]) grants/s over the slower of
// rows[0] and rows[1], window by window.
func slowerRatio(rows []contendedResult) *windowRatio {
	a, b := rows[0].figure("grants_per_sec"), rows[1].figure("grants_per_sec")
	slow := make([]float64, len(a))
	seq := make([]int64, len(a))
	for i := range a {
		slow[i], seq[i] = a[i], rows[0].seq[i]
		if b[i] < a[i] {
			slow[i], seq[i] = b[i], rows[1].seq[i]
		}
	}
	return pairRatio("grants_per_sec", higher, rows[2].figure("grants_per_sec"), slow, rows[2].seq, seq)
}

// interopTargets is the target "a mixed fleet is not slower than the
// slower of its two recipes", per client count.
func interopTargets(rows []contendedResult) []target {
	var out []target
	for _, r := range rows {
		if r.Slower != nil {
			out = append(out, target{fmt.Sprintf("interop with %d clients: the mixed fleet's grants/s at least the slower recipe's", r.Clients),
				"median " + r.Slower.spread(), r.Slower.Median >= 1})
		}
	}
	return out
}

// printInterop prints the "interop" rows.
func printInterop(w io.Writer, rows []contendedResult, cfg config) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nInterop: the reference, fencelock in its layout and a mixed fleet on the same records, %d windows of %.1fs per row (alternating order; ratios: median (min–max) over the windows):\n", cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\t recipe\t grants/s\t wait p50 ms\t handoff p50 ms\t requests/grant\t vs reference\t vs the slower\t")
	for _, c := range rows {
		fmt.Fprintf(tw, "%d\t %s\t %.0f\t %.1f\t %.1f\t %.1f\t %s\t %s\t\n", c.Clients, c.Recipe, c.GrantsPerSec, c.Wait.P50, c.Handoff.P50, c.RequestsPerGrant, c.Ratio.spread(), c.Slower.spread())
	}
	tw.Flush()
}
