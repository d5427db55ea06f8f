package benchtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// The scale measurement (FENCELOCK_BENCH_ONLY=scale, never part of the
// default run: it takes several minutes per backend) runs on a cluster of
// its own, started for it, so that the servers' memory and CPU figures
// start from a fresh cluster:
//
//   - many leases through one Locker: cfg.ScaleLeases distinct names held
//     through one connection, per recipe; goroutines at 0, 10% and 100%,
//     live heap per lease, the time to acquire them all and the time to
//     Close the connection that holds them (which ends them all);
//   - many Lockers: cfg.ScaleLockers connections, each with its own
//     session, each looping acquire and release on a name drawn at random
//     from cfg.ScaleNames, for a fixed window per recipe: grants per
//     second, the CPU time and resident memory of every server process
//     over the window, and keepalives or pings per second counted on every
//     connection.
//
// The many-Lockers part runs first, so that the records the many-leases
// part leaves behind (zk.Lock keeps its lock znodes' parents) are not in
// the servers' memory during it.

type scaleReport struct {
	Leases   []scaleLeasesResult    `json:"leases"`
	Lockers  []scaleLockersResult   `json:"lockers"`
	Provider string                 `json:"provider"`
	Notes    []string               `json:"notes,omitempty"`
	Servers  map[string]serverUsage `json:"servers_after,omitempty"` // each member once both parts are over
}

type scaleLeasesResult struct {
	Recipe            string           `json:"recipe"`
	Role              role             `json:"role"`
	Leases            int              `json:"leases"`
	Parallel          int              `json:"parallel"`
	Points            []goroutinePoint `json:"points"` // 0, 10% and 100% of the leases
	HeapBytesPerLease float64          `json:"heap_bytes_per_lease"`
	AcquireSec        float64          `json:"acquire_sec"` // all of them, Parallel at a time
	AcquirePerSec     float64          `json:"acquire_per_sec"`
	CloseSec          float64          `json:"close_sec"` // closing the connection that holds them
	// Ratio compares heap_bytes_per_lease with the reference's: one
	// window, the memory held is not a rate the machine's load moves.
	Ratio *windowRatio `json:"ratio,omitempty"`
	seq   int64
}

// serverUsage is what one server process used: CPU time over a window and
// its resident memory.
type serverUsage struct {
	Member   string  `json:"member"`
	CPUSec   float64 `json:"cpu_sec"` // user + system over the window
	RSSMiB   float64 `json:"rss_mib"` // at the end of the window
	RSSMax   float64 `json:"rss_max_mib"`
	RSSStart float64 `json:"rss_start_mib"`
}

type scaleLockersResult struct {
	Recipe           string        `json:"recipe"`
	Role             role          `json:"role"`
	Lockers          int           `json:"lockers"`
	Names            int           `json:"names"`
	WindowSec        float64       `json:"window_sec"`
	Grants           int64         `json:"grants"`
	GrantsPerSec     float64       `json:"grants_per_sec"`
	Wait             stats         `json:"wait"` // from the acquire call to the grant
	KeepalivesPerSec float64       `json:"keepalives_per_sec"`
	RequestsPerGrant float64       `json:"requests_per_grant"`
	EventsPerGrant   float64       `json:"events_per_grant"`
	ClientCPUSec     float64       `json:"client_cpu_sec"` // this process over the window
	Servers          []serverUsage `json:"servers"`        // nil when the provider runs no local processes
	Windows          []scaleWindow `json:"windows"`
	// Ratio compares grants_per_sec with the reference's, window by
	// window.
	Ratio *windowRatio `json:"ratio,omitempty"`
	waits []time.Duration
	cnt   countSnapshot
	seq   []int64
}

// scaleWindow is what one window of the many-Lockers part measured.
type scaleWindow struct {
	WindowSec        float64 `json:"window_sec"`
	Grants           int64   `json:"grants"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	KeepalivesPerSec float64 `json:"keepalives_per_sec"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
}

// combineScaleLockers sums the windows of one recipe: the server CPU
// times add up, and the resident memory runs from the first window's
// start to the last one's end.
func combineScaleLockers(ws []scaleLockersResult) scaleLockersResult {
	res := ws[0]
	res.Windows, res.seq, res.waits = nil, nil, nil
	res.WindowSec, res.Grants, res.ClientCPUSec, res.cnt = 0, 0, 0, countSnapshot{}
	res.Servers = slices.Clone(ws[0].Servers)
	for k, w := range ws {
		res.Windows = append(res.Windows, scaleWindow{WindowSec: w.WindowSec, Grants: w.Grants, GrantsPerSec: w.GrantsPerSec,
			KeepalivesPerSec: w.KeepalivesPerSec, RequestsPerGrant: w.RequestsPerGrant})
		res.seq = append(res.seq, w.seq...)
		res.waits = append(res.waits, w.waits...)
		res.WindowSec += w.WindowSec
		res.Grants += w.Grants
		res.ClientCPUSec += w.ClientCPUSec
		res.cnt.requests += w.cnt.requests
		res.cnt.events += w.cnt.events
		res.cnt.keepalives += w.cnt.keepalives
		for i := range res.Servers {
			if k == 0 || i >= len(w.Servers) || w.Servers[i].Member != res.Servers[i].Member {
				continue
			}
			u := &res.Servers[i]
			u.CPUSec += w.Servers[i].CPUSec
			u.RSSMiB = w.Servers[i].RSSMiB
			u.RSSMax = max(u.RSSMax, w.Servers[i].RSSMax)
		}
	}
	res.GrantsPerSec = float64(res.Grants) / res.WindowSec
	res.Wait = summarize(res.waits)
	res.KeepalivesPerSec = float64(res.cnt.keepalives) / res.WindowSec
	res.RequestsPerGrant = float64(res.cnt.requests) / float64(res.Grants)
	res.EventsPerGrant = float64(res.cnt.events) / float64(res.Grants)
	return res
}

// grantsPerSec returns the per-window grants/s of x.
func (x scaleLockersResult) grantsPerSec() []float64 {
	out := make([]float64, len(x.Windows))
	for k, w := range x.Windows {
		out[k] = w.GrantsPerSec
	}
	return out
}

// skipUnlessListed skips the measurement what unless FENCELOCK_BENCH_ONLY
// lists it: unlike skipUnlessSelected, an empty list does not select it.
func skipUnlessListed(t *testing.T, what string) {
	t.Helper()
	for _, w := range strings.Split(os.Getenv("FENCELOCK_BENCH_ONLY"), ",") {
		if strings.TrimSpace(w) == what {
			return
		}
	}
	t.Skipf("not requested: %s runs only when FENCELOCK_BENCH_ONLY lists it (several minutes per backend)", what)
}

// runScale starts a cluster for the scale measurement and runs both parts
// on it for the fencelock recipe and the reference.
func runScale(t *testing.T, kind cluster.Kind, cfg config) *scaleReport {
	// Every connection of a test comes from 127.0.0.1, and ZooKeeper
	// accepts 60 per client address and server by default: the
	// many-Lockers part opens cfg.ScaleLockers/3 and more to each. And
	// ZooKeeper 3.8 lists a session's ephemeral znodes in the transaction
	// that closes it: with 100,000 of them (about 10 MB of paths) that
	// transaction exceeds the default jute.maxbuffer of 1 MiB, and closing
	// the session breaks the ensemble (see cluster.WithJuteMaxBuffer).
	c := cluster.FromEnv(t).Start(t, kind, cluster.WithMaxClientConns(0), cluster.WithJuteMaxBuffer(juteMaxBuffer(cfg)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	at := placement{all: c.Endpoints(), follower: []string{c.Endpoints()[(leader+1)%len(c.Members)]}}
	var rs []recipe
	if kind == cluster.Etcd {
		rs = etcdRecipes(nil)
	} else {
		rs = zkRecipes(nil)
	}
	rep := &scaleReport{Provider: cfg.Provider}
	if kind == cluster.ZooKeeper {
		// zk.Conn.Close waits at most 1s for the answer to its close
		// request (go-zookeeper v1.0.4), and both ZooKeeper recipes close
		// that way: a close time of 1s means no answer came in that time.
		rep.Notes = append(rep.Notes, "close s: go-zookeeper's Close waits at most 1s for the server's answer to the session close, so 1.00 means the server had not answered within 1s")
	}
	if cluster.PID(c.Members[0]) == 0 {
		rep.Notes = append(rep.Notes, "server CPU and memory not measured: the provider runs no local processes")
	}
	locks := slices.DeleteFunc(slices.Clone(rs), func(r recipe) bool { return r.role != roleFencelock && r.role != roleReference })
	wins := make([][]scaleLockersResult, len(locks))
	for round := range cfg.Repeats {
		for _, i := range orderOf(round, len(locks)) {
			r := locks[i]
			t.Run("lockers/"+r.name, func(t *testing.T) {
				wins[i] = append(wins[i], measureScaleLockers(t, r, c, at, cfg))
			})
		}
	}
	for i := range locks {
		if len(wins[i]) == cfg.Repeats {
			rep.Lockers = append(rep.Lockers, combineScaleLockers(wins[i]))
		}
	}
	if ref, ok := find(rep.Lockers, func(x scaleLockersResult) bool { return x.Role == roleReference }); ok {
		for i, x := range rep.Lockers {
			if x.Role == roleFencelock {
				rep.Lockers[i].Ratio = pairRatio("grants_per_sec", higher, x.grantsPerSec(), ref.grantsPerSec(), x.seq, ref.seq)
			}
		}
	}
	for _, r := range rs {
		if r.role != roleFencelock && r.role != roleReference {
			continue
		}
		t.Run("leases/"+r.name, func(t *testing.T) {
			rep.Leases = append(rep.Leases, measureScaleLeases(t, r, at, cfg))
		})
	}
	if ref, ok := find(rep.Leases, func(x scaleLeasesResult) bool { return x.Role == roleReference }); ok {
		for i, x := range rep.Leases {
			if x.Role == roleFencelock {
				rep.Leases[i].Ratio = pairRatio("heap_bytes_per_lease", lower, []float64{x.HeapBytesPerLease}, []float64{ref.HeapBytesPerLease}, []int64{x.seq}, []int64{ref.seq})
			}
		}
	}
	rep.Servers = map[string]serverUsage{}
	for _, m := range c.Members {
		if u, ok := readProc(cluster.PID(m)); ok {
			rep.Servers[m.Name()] = serverUsage{Member: m.Name(), RSSMiB: u.rssMiB}
		}
	}
	return rep
}

// juteMaxBuffer is the jute.maxbuffer the scale cluster needs to close a
// session holding cfg.ScaleLeases ephemeral znodes: room for 256 bytes of
// path per znode, and never below ZooKeeper's default.
func juteMaxBuffer(cfg config) int { return max(256*cfg.ScaleLeases, 1<<20) }

// measureScaleLeases holds cfg.ScaleLeases leases of distinct names
// through one connection of r, then closes it.
func measureScaleLeases(t *testing.T, r recipe, at placement, cfg config) scaleLeasesResult {
	seq := nextWindow()
	n := cfg.ScaleLeases
	c, err := r.dial(at.follower, nil, cfg.ttl())
	if err != nil {
		t.Fatalf("%s: dial() = %v; want nil", r.name, err)
	}
	var closeOnce sync.Once
	closeConn := func() error {
		err := errors.New("already closed")
		closeOnce.Do(func() { err = c.close() })
		return err
	}
	t.Cleanup(func() { _ = closeConn() })
	cl := newClient(t, r, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	prefix := uniqueName("scale")
	warmUp(ctx, t, r, cl, prefix+"/warm")
	// The release functions are kept, as a user keeps the leases.
	rels := make([]func(context.Context) error, n)
	points := []goroutinePoint{leasePoint(0)}
	var busy time.Duration
	held := 0
	for _, upTo := range []int{n / 10, n} {
		start := time.Now()
		if err := inParallel(cfg.ScaleParallel, held, upTo, func(i int) error {
			rel, err := cl.acquire(ctx, fmt.Sprintf("%s/%d", prefix, i))
			if err != nil {
				return fmt.Errorf("acquire(%d) = %w; want nil", i, err)
			}
			rels[i] = rel
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		busy += time.Since(start)
		held = upTo
		points = append(points, leasePoint(held))
		t.Logf("%s: %d leases held, %d goroutines, %.0f bytes of heap per lease", r.name, held, points[len(points)-1].Goroutines,
			(points[len(points)-1].HeapBytes-points[0].HeapBytes)/float64(held))
	}
	start := time.Now()
	if err := closeConn(); err != nil {
		t.Fatalf("%s: close() = %v; want nil", r.name, err)
	}
	closed := time.Since(start)
	last := points[len(points)-1]
	return scaleLeasesResult{
		Recipe:            r.name,
		Role:              r.role,
		Leases:            n,
		Parallel:          cfg.ScaleParallel,
		Points:            points,
		HeapBytesPerLease: (last.HeapBytes - points[0].HeapBytes) / float64(n),
		AcquireSec:        busy.Seconds(),
		AcquirePerSec:     float64(n) / busy.Seconds(),
		CloseSec:          closed.Seconds(),
		seq:               seq,
	}
}

// inParallel calls f for every i in [from, to), workers at a time, and
// returns the first error.
func inParallel(workers, from, to int, f func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var errOnce sync.Once
	var first error
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { first = err })
					next.Store(int64(to))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// measureScaleLockers runs cfg.ScaleLockers connections of r, each with
// its own session and one client looping acquire then release on a name
// drawn at random from cfg.ScaleNames, and measures one window (a
// cfg.Repeats-th of cfg.ScaleWindowSec) after a warm-up. Every grant enters a register (see
// register) until its release starts: two grants of one name at once, or
// a stale token, fail the run.
func measureScaleLockers(t *testing.T, r recipe, c *cluster.Cluster, at placement, cfg config) scaleLockersResult {
	seq := nextWindow()
	n := cfg.ScaleLockers
	ctr := &counters{}
	conns := make([]conn, n)
	var mu sync.Mutex
	t.Cleanup(func() {
		// Closed in parallel: a session's close is a round trip.
		_ = inParallel(16, 0, n, func(i int) error {
			mu.Lock()
			cn := conns[i]
			mu.Unlock()
			if cn != nil {
				_ = cn.close()
			}
			return nil
		})
	})
	clients := make([]client, n)
	if err := inParallel(16, 0, n, func(i int) error {
		cn, err := r.dial(at.spread(i), ctr, cfg.ttl())
		if err != nil {
			return fmt.Errorf("dial(%d) = %w", i, err)
		}
		mu.Lock()
		conns[i] = cn
		mu.Unlock()
		cl, err := cn.client()
		if err != nil {
			return fmt.Errorf("client(%d) = %w", i, err)
		}
		clients[i] = cl
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	prefix := uniqueName("lockers")
	names := make([]string, cfg.ScaleNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%d", prefix, i)
	}
	reg := newRegister(fmt.Sprintf("%s, %d Lockers on %d names", r.name, n, len(names)), 0)
	var (
		stop      atomic.Bool
		measuring atomic.Bool
		grants    atomic.Int64
		waitsMu   sync.Mutex
		waits     []time.Duration
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i, cl := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			var mine []time.Duration
			defer func() {
				waitsMu.Lock()
				waits = append(waits, mine...)
				waitsMu.Unlock()
			}()
			for !stop.Load() {
				k := rng.IntN(len(names))
				start := time.Now()
				tok, rel, err := acquireGrant(ctx, cl, names[k])
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("locker %d: acquire(%q) = %w; want nil", i, names[k], err) })
					return
				}
				reg.enter(names[k], i, exclusive, tok)
				if measuring.Load() {
					grants.Add(1)
					mine = append(mine, time.Since(start))
				}
				reg.leave(names[k], i)
				if err := rel(ctx); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("locker %d: release(%q) = %w; want nil", i, names[k], err) })
					return
				}
			}
		})
	}
	time.Sleep(cfg.warm())
	window := secs(cfg.ScaleWindowSec / float64(cfg.Repeats))
	pids := make([]int, len(c.Members))
	for i, m := range c.Members {
		pids[i] = cluster.PID(m)
	}
	before := readProcs(pids)
	rssMax := make([]float64, len(pids))
	cnt0, cpu0 := ctr.snapshot(), processCPU()
	measuring.Store(true)
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	for time.Since(start) < window {
		<-tick.C
		for i, u := range readProcs(pids) {
			rssMax[i] = max(rssMax[i], u.rssMiB)
		}
	}
	tick.Stop()
	measuring.Store(false)
	elapsed := time.Since(start)
	cnt, cpu := ctr.snapshot().sub(cnt0), processCPU()-cpu0
	after := readProcs(pids)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("%s: %v", r.name, firstErr)
	}
	if err := reg.err(); err != nil {
		t.Fatal(err)
	}
	g := grants.Load()
	if g == 0 {
		t.Fatalf("%s: no grant in %v", r.name, elapsed)
	}
	res := scaleLockersResult{
		Recipe:           r.name,
		Role:             r.role,
		Lockers:          n,
		Names:            len(names),
		WindowSec:        elapsed.Seconds(),
		Grants:           g,
		GrantsPerSec:     float64(g) / elapsed.Seconds(),
		Wait:             summarize(waits),
		KeepalivesPerSec: float64(cnt.keepalives) / elapsed.Seconds(),
		RequestsPerGrant: float64(cnt.requests) / float64(g),
		EventsPerGrant:   float64(cnt.events) / float64(g),
		ClientCPUSec:     cpu.Seconds(),
		waits:            waits,
		cnt:              cnt,
		seq:              []int64{seq},
	}
	for i, m := range c.Members {
		if pids[i] == 0 || !before[i].ok || !after[i].ok {
			continue
		}
		res.Servers = append(res.Servers, serverUsage{
			Member:   m.Name(),
			CPUSec:   after[i].cpuSec - before[i].cpuSec,
			RSSMiB:   after[i].rssMiB,
			RSSMax:   max(rssMax[i], after[i].rssMiB),
			RSSStart: before[i].rssMiB,
		})
	}
	t.Logf("%s: %d Lockers, %.0f grants/s, %.1f keepalives/s", r.name, n, res.GrantsPerSec, res.KeepalivesPerSec)
	return res
}

// procUsage is one reading of a process: CPU time used so far and
// resident memory.
type procUsage struct {
	cpuSec float64
	rssMiB float64
	ok     bool
}

// clockTicks is Linux's USER_HZ, the unit of the CPU times in
// /proc/<pid>/stat: 100 on every architecture Go supports.
const clockTicks = 100

// readProc reads the CPU time (utime + stime, fields 14 and 15 of
// /proc/<pid>/stat) and VmRSS (/proc/<pid>/status) of process pid.
func readProc(pid int) (procUsage, bool) {
	if pid <= 0 {
		return procUsage{}, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, false
	}
	u, ok := parseStat(string(b))
	if !ok {
		return procUsage{}, false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, false
	}
	rss, ok := parseRSS(string(st))
	if !ok {
		return procUsage{}, false
	}
	u.rssMiB = rss
	return u, true
}

// parseStat reads utime and stime from the text of /proc/<pid>/stat. The
// command name, in parentheses, may hold spaces: fields count from after
// its closing parenthesis, where field 3 (the state) starts.
func parseStat(s string) (procUsage, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procUsage{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3; utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procUsage{}, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return procUsage{}, false
	}
	return procUsage{cpuSec: float64(ut+st) / clockTicks, ok: true}, true
}

// parseRSS reads VmRSS, in MiB, from the text of /proc/<pid>/status.
func parseRSS(s string) (float64, bool) {
	for _, line := range strings.Split(s, "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return float64(kb) / 1024, true
	}
	return 0, false
}

func readProcs(pids []int) []procUsage {
	us := make([]procUsage, len(pids))
	for i, pid := range pids {
		us[i], _ = readProc(pid)
	}
	return us
}

// printScale prints the scale measurement, when it ran.
func printScale(w io.Writer, s *scaleReport) {
	if s == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(s.Lockers) > 0 {
		l0 := s.Lockers[0]
		fmt.Fprintf(w, "\nScale: %d Lockers, each its own connection and session, spread over the members, looping acquire and release on a random one of %d names, %d windows of %.1fs per recipe in alternating order (ratio: median (min–max) over the windows):\n", l0.Lockers, l0.Names, len(l0.Windows), l0.WindowSec/float64(max(len(l0.Windows), 1)))
		fmt.Fprintln(tw, "recipe\t grants/s\t wait p50 ms\t wait p99 ms\t keepalives/s\t requests/grant\t events/grant\t client CPU s\t server CPU s (each member)\t server RSS MiB start → end (max)\t grants/s vs ref\t")
		for _, x := range s.Lockers {
			vs := ""
			if x.Role == roleFencelock {
				vs = x.Ratio.spread()
			}
			var cpu, rss []string
			for _, u := range x.Servers {
				cpu = append(cpu, fmt.Sprintf("%.1f", u.CPUSec))
				rss = append(rss, fmt.Sprintf("%.0f→%.0f (%.0f)", u.RSSStart, u.RSSMiB, u.RSSMax))
			}
			fmt.Fprintf(tw, "%s\t %.0f\t %.1f\t %.1f\t %.1f\t %.1f\t %.2f\t %.1f\t %s\t %s\t %s\t\n", x.Recipe, x.GrantsPerSec, x.Wait.P50, x.Wait.P99, x.KeepalivesPerSec,
				x.RequestsPerGrant, x.EventsPerGrant, x.ClientCPUSec, orDash(strings.Join(cpu, " / ")), orDash(strings.Join(rss, ", ")), vs)
		}
		tw.Flush()
	}
	if len(s.Leases) > 0 {
		fmt.Fprintf(w, "\nScale: %d leases held through one connection (distinct names, %d acquiring at a time), then the connection closed:\n", s.Leases[0].Leases, s.Leases[0].Parallel)
		fmt.Fprintln(tw, "recipe\t goroutines at 0 / n/10 / n leases\t heap KiB/lease\t acquire all s\t acquire/s\t close s\t heap/lease vs ref\t close vs ref\t")
		ref, _ := find(s.Leases, func(x scaleLeasesResult) bool { return x.Role == roleReference })
		for _, x := range s.Leases {
			vsHeap, vsClose := "", ""
			if x.Role == roleFencelock {
				vsHeap, vsClose = ratio(x.HeapBytesPerLease, ref.HeapBytesPerLease), ratio(x.CloseSec, ref.CloseSec)
			}
			var gs []string
			for _, p := range x.Points {
				gs = append(gs, fmt.Sprint(p.Goroutines))
			}
			fmt.Fprintf(tw, "%s\t %s\t %.2f\t %.1f\t %.0f\t %.2f\t %s\t %s\t\n", x.Recipe, strings.Join(gs, " / "), x.HeapBytesPerLease/1024, x.AcquireSec, x.AcquirePerSec, x.CloseSec, vsHeap, vsClose)
		}
		tw.Flush()
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "  (%s)\n", n)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scaleTargets checks the many-leases part against the targets of held
// leases: no goroutine per lease, and heap per lease at most 1.5× the
// reference.
func scaleTargets(s *scaleReport) []target {
	if s == nil {
		return nil
	}
	var out []target
	l, ok := find(s.Leases, func(x scaleLeasesResult) bool { return x.Role == roleFencelock })
	if !ok || len(l.Points) < 3 {
		return nil
	}
	first, last := l.Points[1], l.Points[len(l.Points)-1]
	perLease := float64(last.Goroutines-first.Goroutines) / float64(last.Leases-first.Leases)
	out = append(out, target{fmt.Sprintf("goroutines do not grow with held leases (%d → %d leases)", first.Leases, last.Leases),
		fmt.Sprintf("%d → %d goroutines, %.4f per lease", first.Goroutines, last.Goroutines, perLease), perLease < 0.001})
	if ref, ok := find(s.Leases, func(x scaleLeasesResult) bool { return x.Role == roleReference }); ok {
		out = append(out, heapTarget(l.Leases, l.HeapBytesPerLease, ref.HeapBytesPerLease)...)
	}
	return out
}

func TestParseProc(t *testing.T) {
	stat := "4242 (java me (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 40 0 100 1000 200 18446744073709551615"
	u, ok := parseStat(stat)
	if !ok || u.cpuSec != 18.01 {
		t.Errorf("parseStat() = %+v, %v; want 18.01 s (1234 + 567 ticks), true", u, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "no parenthesis at all", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 12"} {
		if u, ok := parseStat(bad); ok {
			t.Errorf("parseStat(%q) = %+v, true; want false", bad, u)
		}
	}
	status := "Name:\tjava\nVmPeak:\t 9000 kB\nVmRSS:\t  204800 kB\nThreads:\t40\n"
	if rss, ok := parseRSS(status); !ok || rss != 200 {
		t.Errorf("parseRSS() = %v, %v; want 200 MiB, true", rss, ok)
	}
	for _, bad := range []string{"", "Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if rss, ok := parseRSS(bad); ok {
			t.Errorf("parseRSS(%q) = %v, true; want false", bad, rss)
		}
	}
	// This process is one the reader must understand.
	if u, ok := readProc(os.Getpid()); !ok || u.rssMiB <= 0 {
		t.Errorf("readProc(self) = %+v, %v; want a positive RSS, true", u, ok)
	}
	if _, ok := readProc(0); ok {
		t.Error("readProc(0) = ok; want false")
	}
}
