package benchtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// multiSpec is the workload of one "multi" row: Clients clients, each
// acquiring again and again a set of SetMin to SetMax names drawn at
// random out of Pool names, holding it for an empty critical section and
// releasing it.
type multiSpec struct {
	Clients int `json:"clients"`
	Pool    int `json:"pool"`
	SetMin  int `json:"set_min"`
	SetMax  int `json:"set_max"`
}

func (s multiSpec) String() string {
	sizes := fmt.Sprint(s.SetMin)
	if s.SetMax != s.SetMin {
		sizes += fmt.Sprintf("-%d", s.SetMax)
	}
	who := fmt.Sprintf("%d clients", s.Clients)
	if s.Clients == 1 {
		who = "1 client"
	}
	return fmt.Sprintf("%s, %s of %d names", who, sizes, s.Pool)
}

// multiPool is the pool of the contended "multi" rows, and multiSetMin
// and multiSetMax the sizes of their sets: those of the deadlock-freedom
// run of issue 34. Two such sets overlap 19 times in 20 for sets of 3, so
// nearly every set waits for another.
const (
	multiPool   = 6
	multiSetMin = 2
	multiSetMax = 4
)

// multiSpecs returns the "multi" rows: one client always taking the same
// 3 names (nothing to wait for: the cost of the requests alone), then
// every client count of the run on multiPool names.
func multiSpecs(cfg config) []multiSpec {
	out := []multiSpec{{Clients: 1, Pool: 3, SetMin: 3, SetMax: 3}}
	for _, n := range cfg.Clients {
		out = append(out, multiSpec{Clients: n, Pool: multiPool, SetMin: multiSetMin, SetMax: multiSetMax})
	}
	return out
}

// draw returns a set of s's sizes out of pool, in random order.
func (s multiSpec) draw(rng *rand.Rand, pool []string) []string {
	k := s.SetMin + rng.IntN(s.SetMax-s.SetMin+1)
	names := make([]string, 0, k)
	for _, p := range rng.Perm(len(pool))[:k] {
		names = append(names, pool[p])
	}
	return names
}

// multiWay is one way to hold several names: it returns the leases of
// names, sorted by name, and the function that releases them all.
type multiWay struct {
	name string
	take func(ctx context.Context, l lock.Locker, names []string) ([]lock.Lease, func(context.Context) error, error)
}

// multiWays are lock.AcquireAll and, against it, the names taken one by
// one in sorted order with plain Acquire and released one by one in the
// same order: what AcquireAll does on a Locker without a native
// lock.MultiLocker.
var multiWays = []multiWay{
	{"AcquireAll", func(ctx context.Context, l lock.Locker, names []string) ([]lock.Lease, func(context.Context) error, error) {
		m, err := lock.AcquireAll(ctx, l, names...)
		if err != nil {
			return nil, nil, err
		}
		return m.Leases(), m.Release, nil
	}},
	{"sorted Acquire", func(ctx context.Context, l lock.Locker, names []string) ([]lock.Lease, func(context.Context) error, error) {
		var held []lock.Lease
		release := func(ctx context.Context) error {
			var errs []error
			for _, le := range held {
				errs = append(errs, le.Release(ctx))
			}
			return errors.Join(errs...)
		}
		for _, name := range slices.Sorted(slices.Values(names)) {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				return nil, nil, errors.Join(err, release(ctx))
			}
			held = append(held, le)
		}
		return held, release, nil
	}},
}

// multiResult is one way's figures on one "multi" row.
type multiResult struct {
	Recipe string `json:"recipe"` // the fencelock recipe and the way
	Way    string `json:"way"`
	multiSpec
	Sets       int     `json:"sets"` // sets acquired in the windows
	WindowSec  float64 `json:"window_sec"`
	SetsPerSec float64 `json:"sets_per_sec"`
	Acquire    stats   `json:"acquire"` // from asking for the set to holding all of it
	Release    stats   `json:"release"` // of the whole set
	multiRequests
	Windows []multiWindow `json:"windows"`
	// Ratio is AcquireAll's sets_per_sec over sorted Acquire's, window
	// by window (on the AcquireAll row).
	Ratio *windowRatio `json:"ratio,omitempty"`
	seq   []int64
}

// multiRequests is what a set costs on the clients' connections (see
// counters): requests, and among them reads and watches created.
type multiRequests struct {
	RequestsPerSet float64 `json:"requests_per_set"`
	ReadsPerSet    float64 `json:"reads_per_set"`
	WatchesPerSet  float64 `json:"watches_per_set"`
}

// multiWindow is what one window of a "multi" row measured.
type multiWindow struct {
	WindowSec      float64 `json:"window_sec"`
	Sets           int     `json:"sets"`
	SetsPerSec     float64 `json:"sets_per_sec"`
	AcquireP50     float64 `json:"acquire_p50_ms"`
	AcquireP99     float64 `json:"acquire_p99_ms"`
	RequestsPerSet float64 `json:"requests_per_set"`
}

// multiRun is the raw outcome of one window of measureMulti.
type multiRun struct {
	window            time.Duration
	acquires, release []time.Duration // of the sets acquired in the window
	counts            countSnapshot
	seq               int64
}

func (x multiRun) figures() multiWindow {
	a := summarize(x.acquires)
	w := multiWindow{WindowSec: x.window.Seconds(), Sets: len(x.acquires), AcquireP50: a.P50, AcquireP99: a.P99}
	w.SetsPerSec = float64(w.Sets) / w.WindowSec
	if w.Sets > 0 {
		w.RequestsPerSet = float64(x.counts.requests) / float64(w.Sets)
	}
	return w
}

// runMulti measures the "multi" rows (multiSpecs) on the backend's
// fencelock recipe fl, both ways in alternating windows in the same run,
// and gives the AcquireAll row its ratio to the sorted one.
func runMulti(t *testing.T, fl recipe, at placement, cfg config) []multiResult {
	var out []multiResult
	for _, spec := range multiSpecs(cfg) {
		runs := make([][]multiRun, len(multiWays))
		for rep := range cfg.Repeats {
			for _, i := range orderOf(rep, len(multiWays)) {
				t.Run(fmt.Sprintf("%s/%d", multiWays[i].name, spec.Clients), func(t *testing.T) {
					runs[i] = append(runs[i], measureMulti(t, fl, multiWays[i], spec, at, cfg))
				})
			}
		}
		if slices.ContainsFunc(runs, func(r []multiRun) bool { return len(r) != cfg.Repeats }) {
			continue
		}
		all, sorted := combineMulti(fl, multiWays[0], spec, runs[0]), combineMulti(fl, multiWays[1], spec, runs[1])
		all.Ratio = pairRatio("sets_per_sec", higher, all.figure(), sorted.figure(), all.seq, sorted.seq)
		t.Logf("multi, %s: AcquireAll %.0f sets/s (acquire p50 %.2f ms), sorted Acquire %.0f sets/s (p50 %.2f ms); AcquireAll ÷ sorted %s",
			spec, all.SetsPerSec, all.Acquire.P50, sorted.SetsPerSec, sorted.Acquire.P50, all.Ratio.spread())
		out = append(out, all, sorted)
	}
	return out
}

func (m multiResult) figure() []float64 {
	out := make([]float64, len(m.Windows))
	for k, w := range m.Windows {
		out[k] = w.SetsPerSec
	}
	return out
}

// combineMulti sums the windows of one way on one row.
func combineMulti(fl recipe, way multiWay, spec multiSpec, runs []multiRun) multiResult {
	res := multiResult{Recipe: fl.name + " " + way.name, Way: way.name, multiSpec: spec}
	var acquires, releases []time.Duration
	var counts countSnapshot
	for _, x := range runs {
		res.Windows = append(res.Windows, x.figures())
		res.seq = append(res.seq, x.seq)
		res.WindowSec += x.window.Seconds()
		acquires, releases = append(acquires, x.acquires...), append(releases, x.release...)
		counts.requests += x.counts.requests
		counts.reads += x.counts.reads
		counts.watches += x.counts.watches
	}
	res.Sets = len(acquires)
	res.SetsPerSec = float64(res.Sets) / res.WindowSec
	res.Acquire, res.Release = summarize(acquires), summarize(releases)
	if n := float64(res.Sets); n > 0 {
		res.multiRequests = multiRequests{float64(counts.requests) / n, float64(counts.reads) / n, float64(counts.watches) / n}
	}
	return res
}

// multiLockers dials spec.Clients Lockers of fl, each on its own
// connection (the only client, on the follower; otherwise spread over
// the members), counting their traffic in ctr.
func multiLockers(t *testing.T, fl recipe, spec multiSpec, at placement, ctr *counters, cfg config) []lock.Locker {
	ls := make([]lock.Locker, spec.Clients)
	for i := range ls {
		where := at.spread(i)
		if spec.Clients == 1 {
			where = at.follower
		}
		lc, ok := newClient(t, fl, dial(t, fl, where, ctr, cfg.ttl())).(lockerClient)
		if !ok {
			t.Fatalf("%s: not a lock.Locker recipe", fl.name)
		}
		ls[i] = lc.l
	}
	return ls
}

// measureMulti runs one window of a "multi" row: every client loops
// draw a set, take it the given way, enter every name of it in the
// register, leave, release. A client's sets are the same in every window
// (its own seeded sequence), so both ways see the same workload. Names
// are new in every window: the two ways never meet on one name, where a
// native AcquireAll and sorted Acquire could deadlock.
func measureMulti(t *testing.T, fl recipe, way multiWay, spec multiSpec, at placement, cfg config) multiRun {
	seq, ctr := nextWindow(), &counters{}
	base := uniqueName("multi")
	pool := make([]string, spec.Pool)
	for k := range pool {
		pool[k] = fmt.Sprintf("%s-%d", base, k)
	}
	ls := multiLockers(t, fl, spec, at, ctr, cfg)
	rngs := make([]*rand.Rand, spec.Clients)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 34))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.window()+cfg.warm()+5*time.Minute)
	defer cancel()
	row := fmt.Sprintf("%s %s, %s", fl.name, way.name, spec)
	reg, win := newRegister(row, 0), newRowWindow()
	var (
		mu                 sync.Mutex
		acquires, releases []time.Duration
	)
	cycle := func(i int) error {
		names := spec.draw(rngs[i], pool)
		asked := time.Now()
		leases, rel, err := way.take(ctx, ls[i], names)
		if err != nil {
			return fmt.Errorf("client %d: %s(%q) = %w; want nil", i, way.name, names, err)
		}
		got := time.Now()
		if err := heldAll(leases, names); err != nil {
			return fmt.Errorf("client %d: %s(%q): %w", i, way.name, names, err)
		}
		for _, le := range leases {
			reg.enter(le.Name(), i, exclusive, le.Token())
		}
		for _, le := range leases {
			reg.leave(le.Name(), i)
		}
		left := time.Now()
		if err := rel(ctx); err != nil {
			return fmt.Errorf("client %d: release of %q = %w; want nil", i, names, err)
		}
		if win.contains(got) {
			mu.Lock()
			acquires, releases = append(acquires, got.Sub(asked)), append(releases, time.Since(left))
			mu.Unlock()
		}
		return nil
	}
	w := win.run(t, row, spec.Clients, ctr, cfg.warm(), cfg.window()/time.Duration(cfg.Repeats), cancel, cycle)
	if err := reg.err(); err != nil {
		t.Error(err)
	}
	return multiRun{window: w.length, acquires: acquires, release: releases, counts: w.counts, seq: seq}
}

// heldAll checks that leases are one lease per name of names, sorted by
// name, each with a token.
func heldAll(leases []lock.Lease, names []string) error {
	var got []string
	for _, le := range leases {
		if le.Token() == 0 {
			return fmt.Errorf("lease of %q has no token", le.Name())
		}
		got = append(got, le.Name())
	}
	if want := slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
		return fmt.Errorf("leases of %q; want %q", got, want)
	}
	return nil
}

// printMulti prints the "multi" rows.
func printMulti(w io.Writer, rows []multiResult, cfg config) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSeveral names at once: lock.AcquireAll against sorted one-by-one Acquire, empty critical section, %d windows of %.1fs per row (alternating order; ratio: median (min–max) over the windows):\n", cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\t way\t sets/s\t acquire p50 ms\t acquire p99 ms\t release p50 ms\t requests/set\t reads/set\t watches/set\t AcquireAll ÷ sorted\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t %s\t %.0f\t %.2f\t %.2f\t %.2f\t %.1f\t %.2f\t %.2f\t %s\t\n", strings.TrimSuffix(r.multiSpec.String(), " names"), r.Way,
			r.SetsPerSec, r.Acquire.P50, r.Acquire.P99, r.Release.P50, r.RequestsPerSet, r.ReadsPerSet, r.WatchesPerSet, r.Ratio.spread())
	}
	tw.Flush()
}

func TestMultiDraw(t *testing.T) {
	pool := []string{"a", "b", "c", "d", "e", "f"}
	spec := multiSpec{Clients: 8, Pool: len(pool), SetMin: multiSetMin, SetMax: multiSetMax}
	rng, again := rand.New(rand.NewPCG(1, 34)), rand.New(rand.NewPCG(1, 34))
	sizes := map[int]int{}
	for range 1000 {
		set := spec.draw(rng, pool)
		sizes[len(set)]++
		if len(set) < spec.SetMin || len(set) > spec.SetMax {
			t.Fatalf("draw() = %q; want %d to %d names", set, spec.SetMin, spec.SetMax)
		}
		stray := slices.ContainsFunc(set, func(n string) bool { return !slices.Contains(pool, n) })
		if s := slices.Sorted(slices.Values(set)); len(slices.Compact(s)) != len(set) || stray {
			t.Fatalf("draw() = %q; want distinct names of the pool", set)
		}
		if other := spec.draw(again, pool); !slices.Equal(set, other) {
			t.Fatalf("draw() = %q, then %q from the same seed; want the same sets", set, other)
		}
	}
	for k := spec.SetMin; k <= spec.SetMax; k++ {
		if sizes[k] < 200 {
			t.Errorf("%d of 1000 sets have %d names; want each size about a third of them", sizes[k], k)
		}
	}
}

func TestCountRead(t *testing.T) {
	req := func(op uint32, watch byte) []byte {
		p := binary.BigEndian.AppendUint32(nil, 7) // xid
		p = binary.BigEndian.AppendUint32(p, op)
		p = binary.BigEndian.AppendUint32(p, 2)
		return append(p, '/', 'a', watch)
	}
	var c counters
	for _, p := range [][]byte{req(3, 1), req(4, 0), req(12, 1), req(8, 0), req(1, 1), req(14, 1), {0, 0, 0, 1}} {
		c.countRead(p)
	}
	if r, w := c.reads.Load(), c.watches.Load(); r != 4 || w != 2 {
		t.Errorf("countRead: %d reads, %d watches; want 4 reads (exists, getData, getChildren2, getChildren), 2 watches", r, w)
	}
}
