package faulttest

import (
	"context"
	"fmt"
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
	inject         fault
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

// TestFault runs one short pass of every fault on both backends, with
// fencing on: no violation may be found, and every fault must be
// confirmed to have happened.
func TestFault(t *testing.T) {
	for _, kind := range backends {
		var total stats
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					o := runScenario(t, b, sc, defaultRun(), 1)
					total.add(o.stats)
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
		})
		// The excused cases are counted apart and printed, so that a
		// run's output shows how often the excuse was used.
		summary := fmt.Sprintf("faulttest %s: %d overlaps excused (etcd issues 12528/15247: resumed former leader; fenced), %d overlaps with the older holder's client frozen (fenced), %d violations",
			kind, total.Excused, total.FrozenClient, total.Violations)
		t.Log(summary)
		fmt.Println(summary)
	}
}

// TestFaultControl runs the process-pause fault with the register's token
// check switched off. The frozen holder's write then lands on a set that
// newer holders have appended to since its read, and erases their
// appends: the checkers must say so. This shows they can catch what
// TestFault claims never happens.
func TestFaultControl(t *testing.T) {
	for _, kind := range backends {
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind)
			cfg := defaultRun()
			cfg.fenced = false
			o := runScenario(t, b, scenario{name: "pause-holder", inject: faultPauseHolder}, cfg, 1)
			t.Logf("%s", o.stats.line())
			if o.faultErr != nil {
				t.Fatalf("fault not confirmed: %v", o.faultErr)
			}
			if len(o.violations) == 0 {
				t.Fatalf("checkers found no violation with fencing off; want a lost update")
			}
			var lin, lost bool
			for _, v := range o.violations {
				t.Logf("expected violation: %s", v)
				lin = lin || strings.Contains(v, "not linearizable")
				lost = lost || strings.Contains(v, "acknowledged appends are missing")
			}
			if !lin {
				t.Errorf("linearizability checker passed the unfenced history; want it to fail")
			}
			if !lost {
				t.Errorf("lost-append checker passed the unfenced history; want it to fail")
			}
		})
	}
}

// line summarizes a run's counts.
func (s stats) line() string {
	return fmt.Sprintf("ops=%d grants=%d lost=%d faults=%d writes: ok=%d stale=%d unknown=%d failed=%d overlaps: frozen-client(fenced)=%d excused-etcd-12528/15247(fenced)=%d violations=%d in %v",
		s.Ops, s.Grants, s.Lost, s.Faults, s.WritesOK, s.WritesStale, s.WritesUnknown, s.WritesFailed, s.FrozenClient, s.Excused, s.Violations, s.Elapsed.Round(time.Millisecond))
}
