package faulttest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// chaosEnabled reports whether TestChaos should run.
func chaosEnabled() bool { return *chaosFlag || os.Getenv("FENCELOCK_CHAOS") == "1" }

// chaosDuration is how long TestChaos runs per backend:
// FENCELOCK_CHAOS_DURATION, default 10m.
func chaosDuration(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("FENCELOCK_CHAOS_DURATION")
	if s == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("FENCELOCK_CHAOS_DURATION=%q: want a positive duration such as 10m", s)
	}
	return d
}

// chaosSeed is FENCELOCK_CHAOS_SEED, or the time.
func chaosSeed(t *testing.T) int64 {
	t.Helper()
	s := os.Getenv("FENCELOCK_CHAOS_SEED")
	if s == "" {
		return time.Now().UnixNano()
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("FENCELOCK_CHAOS_SEED=%q: want an integer", s)
	}
	return n
}

// chaosRun draws a random run configuration and repeat count.
func chaosRun(rng *rand.Rand) (runConfig, int) {
	cfg := defaultRun()
	cfg.clients = 3 + rng.IntN(3)
	cfg.warmup = 10 + rng.IntN(150)
	cfg.after = 10 + rng.IntN(40)
	cfg.rmws = 1 + rng.IntN(4)
	cfg.think = time.Duration(rng.IntN(30)) * time.Millisecond
	cfg.hold = time.Duration(rng.IntN(100)) * time.Millisecond
	cfg.rounds = 1 + rng.IntN(3)
	cfg.jitter = 1500 * time.Millisecond
	cfg.seed = rng.Int64()
	return cfg, 1 + rng.IntN(3)
}

// chaosScenarios returns the scenarios TestChaos draws from: all of them,
// or those FENCELOCK_CHAOS_SCENARIOS (a regular expression) matches.
func chaosScenarios(t *testing.T) []scenario {
	t.Helper()
	pat := os.Getenv("FENCELOCK_CHAOS_SCENARIOS")
	if pat == "" {
		return scenarios
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		t.Fatalf("FENCELOCK_CHAOS_SCENARIOS=%q: %v", pat, err)
	}
	var pool []scenario
	for _, sc := range scenarios {
		if re.MatchString(sc.name) {
			pool = append(pool, sc)
		}
	}
	if len(pool) == 0 {
		t.Fatalf("FENCELOCK_CHAOS_SCENARIOS=%q matches no scenario", pat)
	}
	return pool
}

// TestChaos runs random faults with random timings and workloads (the
// mutex, read-write, semaphore and multi workloads of TestFault), on each
// backend for FENCELOCK_CHAOS_DURATION, and prints a summary table. Only
// with FENCELOCK_CHAOS=1 or -chaos ("make chaos"). Set FENCELOCK_CHAOS_SEED
// to replay a sequence of runs, FENCELOCK_CHAOS_SCENARIOS (a regular
// expression) to draw only some faults, FENCELOCK_CHAOS_BACKENDS
// ("etcd,zookeeper") to pick backends.
func TestChaos(t *testing.T) {
	if !chaosEnabled() {
		t.Skip("chaos runs only with FENCELOCK_CHAOS=1 or -chaos (make chaos)")
	}
	dur := chaosDuration(t)
	seed := chaosSeed(t)
	t.Logf("chaos: %v per backend, seed %d", dur, seed)
	pool := chaosScenarios(t)
	kinds := backends
	if k := os.Getenv("FENCELOCK_CHAOS_BACKENDS"); k != "" {
		kinds = nil
		for _, name := range strings.Split(k, ",") {
			kinds = append(kinds, cluster.Kind(strings.TrimSpace(name)))
		}
	}
	totals := map[cluster.Kind]*stats{}
	perScenario := map[cluster.Kind]map[string]*stats{}
	for _, kind := range kinds {
		totals[kind] = &stats{}
		perScenario[kind] = map[string]*stats{}
		t.Run(string(kind), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(len(kind))))
			b := startBackend(t, kind, peerCutOptions(t)...)
			pool := runnable(t, b, pool)
			if len(pool) == 0 {
				t.Logf("chaos %s: no scenario left to draw", kind)
				return
			}
			deadline := time.Now().Add(dur)
			for i := 0; time.Now().Before(deadline); i++ {
				sc := pool[rng.IntN(len(pool))]
				cfg, repeat := chaosRun(rng)
				w := workloads[rng.IntN(len(workloads))]
				cfg.workload, cfg.limit = w.workload, w.limit
				key := w.key(sc)
				name := fmt.Sprintf("%03d-%s", i, key)
				t.Run(name, func(t *testing.T) {
					t.Logf("seed %d, %d clients, %d repeats, config %+v", cfg.seed, cfg.clients, repeat, cfg)
					o := runScenario(t, b, sc, cfg, repeat)
					t.Logf("%s", o.stats.line())
					for _, v := range o.violations {
						t.Errorf("violation (run seed %d): %s", cfg.seed, v)
					}
					if o.faultErr != nil {
						t.Logf("fault not confirmed: %v", o.faultErr)
					}
					totals[kind].add(o.stats)
					if perScenario[kind][key] == nil {
						perScenario[kind][key] = &stats{}
					}
					perScenario[kind][key].add(o.stats)
				})
			}
		})
	}
	table := chaosTable(seed, dur, totals, perScenario)
	t.Logf("chaos summary:\n%s", table)
	fmt.Println(table)
}

// chaosTable formats the summary as a Markdown table.
func chaosTable(seed int64, dur time.Duration, totals map[cluster.Kind]*stats, per map[cluster.Kind]map[string]*stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run: %v per backend, seed %d\n\n", dur, seed)
	b.WriteString("| backend | workload/scenario | runs | operations | grants | faults injected | not confirmed | writes accepted | rejected as stale | unknown | failed | leases/waits lost | overlaps, frozen holder client (fenced) | overlaps, revoked holder not yet told (fenced) | overlaps excused: etcd 12528/15247 resumed leader (fenced) | reader overlaps | permits granted | most permits at once | permit excess, holder frozen | permit excess excused | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(kind cluster.Kind, name string, s *stats) {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			kind, name, s.Runs, s.Ops, s.Grants, s.Faults, s.Missed, s.WritesOK, s.WritesStale, s.WritesUnknown, s.WritesFailed, s.Lost, s.FrozenClient, s.Revoked, s.Excused,
			s.SharedOverlaps, s.Permits, s.MaxPermits, s.PermitsFrozen, s.PermitsExcused, s.Violations)
	}
	for _, kind := range backends {
		s := totals[kind]
		if s == nil {
			continue
		}
		for _, w := range workloads {
			for _, sc := range scenarios {
				if ps := per[kind][w.key(sc)]; ps != nil {
					row(kind, w.key(sc), ps)
				}
			}
		}
		row(kind, "**all**", s)
	}
	b.WriteString("\nend of chaos summary\n")
	return b.String()
}
