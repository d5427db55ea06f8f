package faulttest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// scenario is one fault, run on both backends.
type scenario struct {
	name string
	// singleEndpoint gives client i member i as its only server, so that
	// the test knows which server a client depends on.
	singleEndpoint bool
	// peerCut marks a partition fault, which needs a cluster started
	// WithPeerCuts (see runnable).
	peerCut bool
	inject  fault
}

// scenarios are the faults of TestFault, in the order they run. Each
// leaves the cluster healthy.
var scenarios = []scenario{
	{name: "pause-holder", inject: faultPauseHolder},
	{name: "pause-server", singleEndpoint: true, inject: faultPauseServer},
	{name: "kill-leader", inject: faultKillLeader},
	{name: "blackhole-holder", inject: faultBlackholeHolder},
	{name: "acquire-reply-lost", inject: faultReplyLost("acq")},
	{name: "release-reply-lost", inject: faultReplyLost("rel")},
	{name: "waiter-expires", inject: faultWaiterExpires},
	{name: "kill-holder", inject: faultKillHolder},
	{name: "revoke-holder", inject: faultRevokeHolder},
	{name: "partition-follower", singleEndpoint: true, peerCut: true, inject: faultCutPeers(false, cluster.CutBoth)},
	{name: "partition-leader", singleEndpoint: true, peerCut: true, inject: faultCutPeers(true, cluster.CutBoth)},
	{name: "partition-follower-send", singleEndpoint: true, peerCut: true, inject: faultCutPeers(false, cluster.CutSend)},
}

// backends are the kinds every scenario runs on.
var backends = []cluster.Kind{cluster.Etcd, cluster.ZooKeeper}

// outcome is what one run of a scenario found.
type outcome struct {
	stats      stats
	violations []string
	// faultErr says why the fault could not be confirmed, if it could
	// not; the run's safety checks still count.
	faultErr error
}

// runScenario runs the workload on b, injects sc's fault once it has made
// progress (repeat times, with progress in between), and checks the run.
func runScenario(t testing.TB, b *backend, sc scenario, cfg runConfig, repeat int) outcome {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() before %s = %v", sc.name, err)
	}
	cfg.singleEndpoint = sc.singleEndpoint
	r := newRun(t, b, cfg)
	for range cfg.clients {
		if _, err := r.addClient(); err != nil {
			t.Fatal(err)
		}
	}
	var o outcome
	if err := r.waitWrites(0, cfg.warmup, 2); err != nil {
		r.violation("before the fault: %v; %s", err, r.recordsText())
	} else {
		for i := range max(repeat, 1) {
			if i > 0 {
				if err := r.waitWrites(r.now(), 5, 1); err != nil {
					r.violation("between faults: %v; %s", err, r.recordsText())
					break
				}
			}
			if err := sc.inject(r); err != nil {
				o.faultErr = err
				r.mu.Lock()
				r.missed = append(r.missed, err.Error())
				r.mu.Unlock()
				break
			}
		}
	}
	o.stats, o.violations = r.finish()
	o.stats.Elapsed = time.Since(began)
	return o
}

// workload is one of the clients' workloads (see runClient), run across
// every scenario.
type workload struct {
	name     string // "" for the mutex, which keeps the scenarios' own names
	workload string
	limit    int
}

var workloads = []workload{
	{},
	{name: "rw", workload: workloadRW},
	{name: "semaphore", workload: workloadSemaphore, limit: 2},
	{name: "multi", workload: workloadMulti},
}

// faultWorkloads returns the workloads TestFault runs: all of them, or
// those FENCELOCK_FAULT_WORKLOADS lists (comma-separated: mutex, rw,
// semaphore, multi), which is printed. make test's containers stage runs the
// mutex only: the workloads differ in what the clients ask the backend,
// not in how its servers were started, and the process stage runs them
// all.
func faultWorkloads(t *testing.T) []workload {
	env := os.Getenv("FENCELOCK_FAULT_WORKLOADS")
	if env == "" {
		return workloads
	}
	var out []workload
	for _, n := range strings.Split(env, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, w := range workloads {
			if n == w.label() {
				out, found = append(out, w), true
			}
		}
		if !found {
			t.Fatalf("FENCELOCK_FAULT_WORKLOADS=%q: unknown workload %q (known: mutex, rw, semaphore, multi)", env, n)
		}
	}
	msg := fmt.Sprintf("faulttest: FENCELOCK_FAULT_WORKLOADS=%s: running only these workloads", env)
	t.Log(msg)
	fmt.Println(msg)
	return out
}

// label is the workload's name, "mutex" for the mutex.
func (w workload) label() string {
	if w.name == "" {
		return "mutex"
	}
	return w.name
}

// key names sc run with w: the scenario's own name for the mutex,
// "workload/scenario" for the others.
func (w workload) key(sc scenario) string {
	if w.name == "" {
		return sc.name
	}
	return w.name + "/" + sc.name
}

// config returns the run's configuration for w.
func (w workload) config() runConfig {
	cfg := defaultRun()
	cfg.workload, cfg.limit = w.workload, w.limit
	return cfg
}

// TestFault runs one short pass of every fault on both backends, with
// fencing on, for every workload (see runClient; "multi" is checked name
// by name and as a whole, see checkMulti): no violation may be found, and every
// fault must be confirmed to have happened. Across each workload's runs,
// the readers must have shared the lock at least once and the semaphore's
// permits must have reached the limit, or the workload did not test what
// it claims to.
func TestFault(t *testing.T) {
	for _, kind := range backends {
		var total stats
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind, peerCutOptions(t)...)
			pool := runnable(t, b, scenarios)
			for _, w := range faultWorkloads(t) {
				var wtotal stats
				for _, sc := range pool {
					t.Run(w.key(sc), func(t *testing.T) {
						o := runScenario(t, b, sc, w.config(), 1)
						wtotal.add(o.stats)
						t.Logf("%s", o.stats.line())
						for _, v := range o.violations {
							t.Errorf("violation: %s", v)
						}
						if o.faultErr != nil {
							t.Errorf("fault not confirmed: %v", o.faultErr)
						}
						if o.stats.WritesOK == 0 {
							t.Errorf("no write succeeded; want progress")
						}
					})
				}
				switch {
				case wtotal.Runs == 0: // not selected by -run
				case w.workload == workloadRW && wtotal.SharedOverlaps == 0:
					t.Errorf("rw: no two read locks were ever held at once in %d runs; the readers did not share", wtotal.Runs)
				case w.workload == workloadSemaphore && wtotal.MaxPermits < w.limit:
					t.Errorf("semaphore: at most %d permits were held at once in %d runs; want the limit, %d", wtotal.MaxPermits, wtotal.Runs, w.limit)
				}
				total.add(wtotal)
			}
		})
		// The excused cases are counted apart and printed, so that a
		// run's output shows how often the excuse was used.
		summary := fmt.Sprintf("faulttest %s: %d overlaps excused (etcd issues 12528/15247: resumed former leader; fenced), %d overlaps with the older holder's client frozen (fenced), %d with a revoked holder that had not heard yet (fenced), %d permit excesses with a holder frozen, %d excused by the etcd issues; %d reader overlaps, at most %d permits at once; %d violations",
			kind, total.Excused, total.FrozenClient, total.Revoked, total.PermitsFrozen, total.PermitsExcused, total.SharedOverlaps, total.MaxPermits, total.Violations)
		t.Log(summary)
		fmt.Println(summary)
	}
}

// TestFaultControl shows that the checkers can catch what TestFault
// claims never happens, one control run per workload:
//
//   - the mutex: the process-pause fault with the register's token check
//     switched off. The frozen holder's write then lands on a set that
//     newer holders have appended to since its read, and erases their
//     appends.
//   - "rw": every client takes a read lock where it should take the
//     write lock, and writes under it while others hold read locks.
//   - "semaphore": client 1 asks for its permits with a limit one higher
//     than the others' (on a name of its own, or the backend would
//     refuse the disagreement), so more than the limit hold permits.
//
// The rw and semaphore runs inject no fault, so that no frozen client or
// server can excuse what the broken client does.
func TestFaultControl(t *testing.T) {
	noFault := scenario{name: "no-fault", inject: func(r *run) error { return r.waitWrites(r.now(), 30, 1) }}
	controls := []struct {
		workload workload
		sc       scenario
		broken   bool
		fenced   bool
		want     []string // substrings, each of which some violation must contain
	}{
		{sc: scenario{name: "pause-holder", inject: faultPauseHolder}, want: []string{"not linearizable", "acknowledged appends are missing"}},
		{workload: workloads[1], sc: noFault, broken: true, fenced: true, want: []string{"believed it held the lock"}},
		{workload: workloads[2], sc: noFault, broken: true, fenced: true, want: []string{"permits of a semaphore of limit 2"}},
	}
	for _, kind := range backends {
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind)
			for _, c := range controls {
				t.Run(c.workload.key(c.sc), func(t *testing.T) {
					cfg := c.workload.config()
					cfg.fenced, cfg.broken = c.fenced, c.broken
					o := runScenario(t, b, c.sc, cfg, 1)
					t.Logf("%s", o.stats.line())
					if o.faultErr != nil {
						t.Fatalf("fault not confirmed: %v", o.faultErr)
					}
					if len(o.violations) == 0 {
						t.Fatalf("checkers found no violation in the control run; want %q", c.want)
					}
					for _, v := range o.violations {
						t.Logf("expected violation: %s", v)
					}
					for _, w := range c.want {
						found := false
						for _, v := range o.violations {
							found = found || strings.Contains(v, w)
						}
						if !found {
							t.Errorf("no violation contains %q; the checker passed the broken history", w)
						}
					}
				})
			}
		})
	}
}

// line summarizes a run's counts.
func (s stats) line() string {
	delay := ""
	if s.DelayedGrants > 0 {
		delay = fmt.Sprintf(" lock-delay: grants=%d least wait after the record vanished in [%v, %v]",
			s.DelayedGrants, s.DelayLow.Round(time.Millisecond), s.DelayHigh.Round(time.Millisecond))
	}
	return fmt.Sprintf("ops=%d grants=%d lost=%d faults=%d writes: ok=%d stale=%d unknown=%d failed=%d overlaps: frozen-client(fenced)=%d revoked(fenced)=%d excused-etcd-12528/15247(fenced)=%d readers=%d permits: grants=%d max=%d frozen-holder=%d excused=%d%s violations=%d in %v",
		s.Ops, s.Grants, s.Lost, s.Faults, s.WritesOK, s.WritesStale, s.WritesUnknown, s.WritesFailed, s.FrozenClient, s.Revoked, s.Excused, s.SharedOverlaps,
		s.Permits, s.MaxPermits, s.PermitsFrozen, s.PermitsExcused, delay, s.Violations, s.Elapsed.Round(time.Millisecond))
}
