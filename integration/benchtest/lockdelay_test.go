package benchtest

import (
	"fmt"
	"io"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/zklock"
)

// benchLockDelay is the lock-delay of the "lockdelay" measurement: far
// above any handoff, so that a grant that waited it out stands out.
const benchLockDelay = time.Second

// lockDelayRecipe returns the backend's fencelock recipe, fl, with a
// lock-delay on every Locker.
func lockDelayRecipe(kind cluster.Kind, fl recipe) recipe {
	r := fl
	r.name = fl.name + " lock_delay=" + benchLockDelay.String()
	if kind == cluster.Etcd {
		r.dial = etcdlockDial(etcdlock.WithLockDelay(benchLockDelay))
	} else {
		r.dial = zklockDial(zklock.WithLockDelay(benchLockDelay))
	}
	return r
}

// markerListing is the requests per contended grant that a lock-delay
// adds on the backend: on ZooKeeper, the listing after the release that
// shows whether the holder left a marker, which zklock without a
// lock-delay does without (it grants on the release mark: see the
// "Lock-delay" in docs/design/zookeeper.md); none on etcd.
func markerListing(kind cluster.Kind) float64 {
	if kind == cluster.ZooKeeper {
		return 1
	}
	return 0
}

// runLockDelay measures contended handoff (measureContended, every
// client count of the run, an empty critical section) for the backend's
// fencelock recipe without
// and with a lock-delay, in alternating order in the same run. Every
// release is clean, so no grant may wait out the lock-delay; the markers
// ride on requests the grant sends anyway (but for markerListing), so
// the rows should differ only by noise and that request.
func runLockDelay(t *testing.T, kind cluster.Kind, fl recipe, at placement, cfg config) []contendedResult {
	rs := []recipe{fl, lockDelayRecipe(kind, fl)}
	var out []contendedResult
	for _, n := range cfg.Clients {
		runs := make([][]contendedRun, len(rs))
		for rep := range cfg.Repeats {
			for _, i := range orderOf(rep, len(rs)) {
				r := rs[i]
				t.Run(fmt.Sprintf("%s/%d", r.name, n), func(t *testing.T) {
					runs[i] = append(runs[i], measureContended(t, r, n, 0, at, cfg))
				})
			}
		}
		for i, r := range rs {
			if len(runs[i]) == cfg.Repeats {
				res := combine(r, n, 0, runs[i])
				t.Logf("%s, %d clients: %d grants/s, handoff p50 %.1f ms, max %.1f ms", r.name, n, int(res.GrantsPerSec), res.Handoff.P50, res.Handoff.Max)
				if i == 1 && res.Handoff.Max >= float64(benchLockDelay.Milliseconds()) {
					t.Errorf("%s, %d clients: a handoff after a clean release took %.0f ms; want every one under the lock-delay (%v)", r.name, n, res.Handoff.Max, benchLockDelay)
				}
				// The package docs promise no extra round trip per
				// grant but, on ZooKeeper, the listing after the
				// release that reads the markers, which a grant on a
				// release mark (no lock-delay) spares; the pings
				// counted with the requests vary by a few tenths.
				if i == 1 && len(out) > 0 && res.RequestsPerGrant > out[len(out)-1].RequestsPerGrant+markerListing(kind)+0.5 {
					t.Errorf("%s, %d clients: %.1f requests per grant against %.1f without the lock-delay; want at most %.0f more", r.name, n, res.RequestsPerGrant, out[len(out)-1].RequestsPerGrant, markerListing(kind))
				}
				if i == 1 && len(out) > 0 && out[len(out)-1].Clients == n {
					res.Ratio = res.ratioTo(out[len(out)-1], "grants_per_sec", higher)
				}
				out = append(out, res)
			}
		}
	}
	return out
}

// printLockDelay prints the "lockdelay" rows: each client count without
// and with the lock-delay, and the second's ratios to the first.
func printLockDelay(w io.Writer, rows []contendedResult, cfg config) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLock-delay (%v), clean releases: contended handoff without and with it, %d windows of %.1fs per row (alternating order; ratios: median (min–max) over the windows):\n", benchLockDelay, cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\t recipe\t grants/s\t wait p50 ms\t handoff p50 ms\t handoff p99 ms\t handoff max ms\t requests/grant\t handoff p50 vs none\t grants/s vs none\t")
	for i, c := range rows {
		vsP50, vsRate := "", ""
		if i%2 == 1 {
			vsP50, vsRate = c.ratioTo(rows[i-1], "handoff_p50_ms", lower).spread(), c.Ratio.spread()
		}
		fmt.Fprintf(tw, "%d\t %s\t %.0f\t %.1f\t %.1f\t %.1f\t %.1f\t %.1f\t %s\t %s\t\n", c.Clients, c.Recipe, c.GrantsPerSec, c.Wait.P50, c.Handoff.P50, c.Handoff.P99, c.Handoff.Max, c.RequestsPerGrant, vsP50, vsRate)
	}
	tw.Flush()
}
