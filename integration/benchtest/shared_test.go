package benchtest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	recipes "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock"
)

// The read-write lock and semaphore measurements. Every client has its own
// connection and session and loops acquire, release, as in the contended
// measurement; a client is a reader or a writer for the whole window.

// rwClient takes one kind of grant of a read-write lock or semaphore, and
// returns its fencing token (0 for a recipe without tokens) and release.
type rwClient func(ctx context.Context, name string) (token fencing.Token, release func(context.Context) error, err error)

// rwRecipe is one way to get read-write locks or semaphores on a backend.
type rwRecipe struct {
	name string
	role role
	// dial opens one client: a reader (shared), a writer, or a permit
	// of limit (limit > 0; shared is then ignored).
	dial func(t testing.TB, endpoints []string, ctr *counters, ttl time.Duration, shared bool, limit int) rwClient
}

// lockerOf returns the lock.Locker of a fencelock recipe's connection.
func lockerOf(t testing.TB, c conn) lock.Locker {
	switch c := c.(type) {
	case etcdlockConn:
		return c.l
	case zklockConn:
		return c.l
	}
	t.Fatalf("%T is not a fencelock connection", c)
	return nil
}

// fencelockRW wraps the fencelock recipe of a backend. A backend without
// the interfaces fails the measurement.
func fencelockRW(r recipe) rwRecipe {
	return rwRecipe{name: r.name, role: roleFencelock, dial: func(t testing.TB, endpoints []string, ctr *counters, ttl time.Duration, shared bool, limit int) rwClient {
		l := lockerOf(t, dial(t, r, endpoints, ctr, ttl))
		sl, ok1 := l.(lock.SharedLocker)
		sem, ok2 := l.(lock.Semaphore)
		if !ok1 || !ok2 {
			t.Fatalf("%s: %T is not a lock.SharedLocker and a lock.Semaphore", r.name, l)
		}
		grant := func(le lock.Lease, err error) (fencing.Token, func(context.Context) error, error) {
			if err != nil {
				return 0, nil, err
			}
			return le.Token(), le.Release, nil
		}
		return func(ctx context.Context, name string) (fencing.Token, func(context.Context) error, error) {
			switch {
			case limit > 0:
				return grant(sem.AcquireSemaphore(ctx, name, limit))
			case shared:
				return grant(sl.AcquireShared(ctx, name))
			}
			return grant(l.Acquire(ctx, name))
		}
	}}
}

// rwMutexRecipe is etcd's experimental recipes.RWMutex, the reference for
// read-write locks on etcd. It has no semaphore.
func rwMutexRecipe() rwRecipe {
	return rwRecipe{name: "recipes.RWMutex", role: roleReference, dial: func(t testing.TB, endpoints []string, ctr *counters, ttl time.Duration, shared bool, limit int) rwClient {
		if limit > 0 {
			t.Fatalf("recipes.RWMutex has no semaphore")
		}
		cli, err := etcdClient(endpoints, ctr)
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			cli.Close()
			t.Fatalf("NewSession() = %v", err)
		}
		t.Cleanup(func() { s.Close(); cli.Close() })
		// recipes.RWMutex has no tokens: its grants are checked by
		// occupancy only (see register).
		return func(_ context.Context, name string) (fencing.Token, func(context.Context) error, error) {
			m := recipes.NewRWMutex(s, "bench/rwmutex/"+name)
			if shared {
				if err := m.RLock(); err != nil {
					return 0, nil, err
				}
				return 0, func(context.Context) error { return m.RUnlock() }, nil
			}
			if err := m.Lock(); err != nil {
				return 0, nil, err
			}
			return 0, func(context.Context) error { return m.Unlock() }, nil
		}
	}}
}

// sharedResult is one row of the read-write lock or semaphore measurement.
type sharedResult struct {
	Recipe           string         `json:"recipe"`
	Role             role           `json:"role"`
	Readers          int            `json:"readers"`           // shared clients, or permit clients
	Writers          int            `json:"writers,omitempty"` // exclusive clients
	Limit            int            `json:"limit,omitempty"`   // the semaphore's, 0 for a read-write lock
	WindowSec        float64        `json:"window_sec"`
	ReadsPerSec      float64        `json:"reads_per_sec"` // shared grants, or permits
	WritesPerSec     float64        `json:"writes_per_sec,omitempty"`
	GrantsPerSec     float64        `json:"grants_per_sec"`
	WriteWait        stats          `json:"write_wait"`
	Handoff          stats          `json:"handoff"` // from a release to the next grant that had to wait
	MaxHolders       int            `json:"max_holders"`
	Violations       int            `json:"violations"` // grants that broke the exclusion or the limit
	RequestsPerGrant float64        `json:"requests_per_grant"`
	EventsPerGrant   float64        `json:"events_per_grant"`
	Windows          []sharedWindow `json:"windows"`
	// Ratio compares grants_per_sec with the reference's of the same
	// shape, window by window (read-write rows on etcd only).
	Ratio *windowRatio `json:"ratio,omitempty"`
	seq   []int64
}

// sharedWindow is what one window of a read-write or semaphore row
// measured.
type sharedWindow struct {
	WindowSec        float64 `json:"window_sec"`
	ReadsPerSec      float64 `json:"reads_per_sec"`
	WritesPerSec     float64 `json:"writes_per_sec,omitempty"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	HandoffP50       float64 `json:"handoff_p50_ms"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	EventsPerGrant   float64 `json:"events_per_grant"`
}

// sharedRun is the raw outcome of one window of measureShared.
type sharedRun struct {
	tally                  sharedTally
	w                      windowRun
	violations, maxHolders int
	seq                    int64
}

// combineShared sums the windows of one recipe and shape.
func combineShared(r rwRecipe, readers, writers, limit int, runs []sharedRun) sharedResult {
	res := sharedResult{Recipe: r.name, Role: r.role, Readers: readers, Writers: writers, Limit: limit}
	var all sharedTally
	var w windowRun
	for _, x := range runs {
		var one sharedResult
		x.tally.fill(&one, x.w)
		res.Windows = append(res.Windows, sharedWindow{WindowSec: one.WindowSec, ReadsPerSec: one.ReadsPerSec, WritesPerSec: one.WritesPerSec,
			GrantsPerSec: one.GrantsPerSec, HandoffP50: one.Handoff.P50, RequestsPerGrant: one.RequestsPerGrant, EventsPerGrant: one.EventsPerGrant})
		res.seq = append(res.seq, x.seq)
		res.Violations += x.violations
		res.MaxHolders = max(res.MaxHolders, x.maxHolders)
		all.reads, all.writes = all.reads+x.tally.reads, all.writes+x.tally.writes
		all.writeWaits = append(all.writeWaits, x.tally.writeWaits...)
		all.handoffs = append(all.handoffs, x.tally.handoffs...)
		w.length += x.w.length
		w.counts.requests += x.w.counts.requests
		w.counts.events += x.w.counts.events
	}
	all.fill(&res, w)
	return res
}

// grantsPerSec returns the per-window grants/s of x.
func (x sharedResult) grantsPerSec() []float64 {
	out := make([]float64, len(x.Windows))
	for k, w := range x.Windows {
		out[k] = w.GrantsPerSec
	}
	return out
}

// measureShared runs readers shared clients and writers exclusive ones on
// one name (limit == 0), or readers permit clients of a semaphore of
// limit, for one window (a cfg.Repeats-th of cfg.WindowSec). Every grant
// enters the row's register for the whole hold, which checks the
// exclusion or the limit and the tokens.
func measureShared(t *testing.T, r rwRecipe, readers, writers, limit int, at placement, cfg config) sharedRun {
	seq := nextWindow()
	ctr := &counters{}
	name := uniqueName(fmt.Sprintf("shared%d-%d-%d", readers, writers, limit))
	cls := make([]rwClient, readers+writers)
	for i := range cls {
		cls[i] = r.dial(t, at.spread(i), ctr, cfg.ttl(), i < readers, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.window()+cfg.warm()+5*time.Minute)
	defer cancel()
	row := fmt.Sprintf("%s, %d readers/permits, %d writers, limit %d", r.name, readers, writers, limit)
	reg, win := newRegister(row, limit), newRowWindow()
	var (
		mu          sync.Mutex
		lastRelease time.Time
		tally       sharedTally
	)
	cycle := func(i int) error {
		k := sharedKind(i, readers, limit)
		asked := time.Now()
		tok, rel, err := cls[i](ctx, name)
		if err != nil {
			return fmt.Errorf("client %d: acquire(%q) = %w", i, name, err)
		}
		got := time.Now()
		reg.enter(name, i, k, tok)
		mu.Lock()
		if win.contains(got) {
			tally.record(k, asked, got, lastRelease)
		}
		mu.Unlock()
		time.Sleep(holdFor)
		// The grant counts until its release starts: the backends end a
		// lease before they send its deletion, so a grant that this
		// one's release lets in comes after this.
		reg.leave(name, i)
		mu.Lock()
		lastRelease = time.Now()
		mu.Unlock()
		if err := rel(ctx); err != nil {
			return fmt.Errorf("client %d: release(%q) = %w", i, name, err)
		}
		return nil
	}
	w := win.run(t, row, len(cls), ctr, cfg.warm(), cfg.window()/time.Duration(cfg.Repeats), cancel, cycle)
	if err := reg.err(); err != nil {
		t.Error(err)
	}
	out := sharedRun{tally: tally, w: w, seq: seq}
	out.violations, out.maxHolders = reg.counts()
	var res sharedResult
	tally.fill(&res, w)
	t.Logf("%s: %.0f reads/s, %.0f writes/s, %.1f requests and %.2f events per grant, at most %d holders",
		row, res.ReadsPerSec, res.WritesPerSec, res.RequestsPerGrant, res.EventsPerGrant, out.maxHolders)
	return out
}

// sharedTally is what measureShared counts in its window.
type sharedTally struct {
	reads, writes        int             // shared grants or permits; exclusive grants
	writeWaits, handoffs []time.Duration // handoffs: to grants that had to wait
}

// sharedKind is the kind of grant client i of a measureShared row takes.
func sharedKind(i, readers, limit int) grantKind {
	switch {
	case limit > 0:
		return permit
	case i < readers:
		return shared
	}
	return exclusive
}

// record counts a grant of kind k asked for at asked and granted at got,
// the last release of any client having started at last.
func (a *sharedTally) record(k grantKind, asked, got, last time.Time) {
	if k == exclusive {
		a.writes++
		a.writeWaits = append(a.writeWaits, got.Sub(asked))
	} else {
		a.reads++
	}
	if !last.IsZero() && last.After(asked) {
		a.handoffs = append(a.handoffs, got.Sub(last))
	}
}

// fill sets res's rates and per-grant figures from the tally and the
// window w.
func (a sharedTally) fill(res *sharedResult, w windowRun) {
	win := w.length.Seconds()
	res.WindowSec = win
	res.ReadsPerSec, res.WritesPerSec = float64(a.reads)/win, float64(a.writes)/win
	res.GrantsPerSec = float64(a.reads+a.writes) / win
	res.WriteWait, res.Handoff = summarize(a.writeWaits), summarize(a.handoffs)
	if g := a.reads + a.writes; g > 0 {
		res.RequestsPerGrant = float64(w.counts.requests) / float64(g)
		res.EventsPerGrant = float64(w.counts.events) / float64(g)
	}
}

// holdFor is how long every client holds each grant, so that shared
// holders overlap and the exclusion and limit checks have something to
// catch.
const holdFor = 2 * time.Millisecond

// The shapes measured: the rows (16 readers and 2 writers; 16
// clients of a semaphore of limit 4) and the waiter counts of the herd
// check (2 and 32 clients beyond those that hold).
var (
	sharedShapes = []struct{ readers, writers int }{{16, 2}, {1, 1}, {24, 8}}
	semLimit     = 4
	semClients   = []int{16, semLimit + 2, semLimit + 32}
)

// runShared measures the read-write lock rows: fencelock's, and on etcd the
// recipe's, cfg.Repeats windows each in alternating order (A B, B A, ...).
func runShared(t *testing.T, kind cluster.Kind, rs []recipe, at placement, cfg config) []sharedResult {
	fl, ok := find(rs, func(r recipe) bool { return r.role == roleFencelock })
	if !ok {
		t.Fatalf("no fencelock recipe for %s", kind)
	}
	rws := []rwRecipe{fencelockRW(fl)}
	if kind == cluster.Etcd {
		rws = append(rws, rwMutexRecipe())
	}
	var out []sharedResult
	for _, sh := range sharedShapes {
		runs := make([][]sharedRun, len(rws))
		for rep := range cfg.Repeats {
			for _, i := range orderOf(rep, len(rws)) {
				r := rws[i]
				t.Run(fmt.Sprintf("%s/%dr%dw", r.name, sh.readers, sh.writers), func(t *testing.T) {
					runs[i] = append(runs[i], measureShared(t, r, sh.readers, sh.writers, 0, at, cfg))
				})
			}
		}
		var rows []sharedResult
		for i, r := range rws {
			if len(runs[i]) == cfg.Repeats {
				rows = append(rows, combineShared(r, sh.readers, sh.writers, 0, runs[i]))
			}
		}
		ref, ok := find(rows, func(x sharedResult) bool { return x.Role == roleReference })
		for i, x := range rows {
			if ok && x.Role == roleFencelock {
				rows[i].Ratio = pairRatio("grants_per_sec", higher, x.grantsPerSec(), ref.grantsPerSec(), x.seq, ref.seq)
			}
		}
		out = append(out, rows...)
	}
	return out
}

// runSemaphore measures fencelock's semaphore rows, cfg.Repeats windows
// each, the shapes visited in alternating order. Neither etcd nor
// go-zookeeper ships a semaphore, so there is no reference row and no
// ratio: the windows show the spread.
func runSemaphore(t *testing.T, kind cluster.Kind, rs []recipe, at placement, cfg config) []sharedResult {
	fl, ok := find(rs, func(r recipe) bool { return r.role == roleFencelock })
	if !ok {
		t.Fatalf("no fencelock recipe for %s", kind)
	}
	r := fencelockRW(fl)
	runs := make([][]sharedRun, len(semClients))
	for rep := range cfg.Repeats {
		for _, i := range orderOf(rep, len(semClients)) {
			n := semClients[i]
			t.Run(fmt.Sprintf("%s/%d", r.name, n), func(t *testing.T) {
				runs[i] = append(runs[i], measureShared(t, r, n, 0, semLimit, at, cfg))
			})
		}
	}
	var out []sharedResult
	for i, n := range semClients {
		if len(runs[i]) == cfg.Repeats {
			out = append(out, combineShared(r, n, 0, semLimit, runs[i]))
		}
	}
	return out
}

// grantsSpread formats the range of a row's per-window grants/s.
func grantsSpread(x sharedResult) string {
	g := x.grantsPerSec()
	if len(g) < 2 {
		return "-"
	}
	return fmt.Sprintf("%.0f–%.0f", slices.Min(g), slices.Max(g))
}

// printShared prints the read-write lock and semaphore tables.
func printShared(w io.Writer, tw *tabwriter.Writer, br *backendReport, cfg config) {
	if len(br.Shared) > 0 {
		fmt.Fprintf(w, "\nRead-write lock, one name, each client its own connection and session, a reader or a writer throughout, holding each grant %v; %d windows of %.1fs per row (recipes in alternating order; ratios: median (min–max) over the windows):\n", holdFor, cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
		fmt.Fprintln(tw, "readers\t writers\t recipe\t reads/s\t writes/s\t grants/s per window\t write wait p50 ms\t write wait p99 ms\t handoff p50 ms\t requests/grant\t events/grant\t max holders\t grants/s vs ref\t")
		for _, x := range br.Shared {
			vs := ""
			if x.Ratio != nil {
				vs = x.Ratio.spread()
			}
			fmt.Fprintf(tw, "%d\t %d\t %s\t %.0f\t %.0f\t %s\t %.1f\t %.1f\t %.1f\t %.1f\t %.2f\t %d\t %s\t\n", x.Readers, x.Writers, x.Recipe, x.ReadsPerSec, x.WritesPerSec, grantsSpread(x), x.WriteWait.P50, x.WriteWait.P99, x.Handoff.P50, x.RequestsPerGrant, x.EventsPerGrant, x.MaxHolders, vs)
		}
		tw.Flush()
	}
	if len(br.Semaphore) > 0 {
		fmt.Fprintf(w, "\nSemaphore of limit %d, one name, each client its own connection and session, holding each permit %v; %d windows of %.1fs per row, the rows in alternating order (no reference: neither client library has a semaphore):\n", semLimit, holdFor, cfg.Repeats, cfg.WindowSec/float64(cfg.Repeats))
		fmt.Fprintln(tw, "clients\t waiters\t recipe\t grants/s\t grants/s per window\t handoff p50 ms\t handoff p99 ms\t requests/grant\t events/grant\t max holders\t")
		for _, x := range br.Semaphore {
			fmt.Fprintf(tw, "%d\t %d\t %s\t %.0f\t %s\t %.1f\t %.1f\t %.1f\t %.2f\t %d\t\n", x.Readers, x.Readers-x.Limit, x.Recipe, x.GrantsPerSec, grantsSpread(x), x.Handoff.P50, x.Handoff.P99, x.RequestsPerGrant, x.EventsPerGrant, x.MaxHolders)
		}
		tw.Flush()
	}
}

// sharedTargets checks the targets for read-write locks and
// semaphores: fencelock at least the reference's grants/s on every
// read-write row, and requests and events per grant that do not grow with
// the number of waiters. For the read-write lock that is from 2 to 32
// clients (at most 1.5× plus one, while the clients grow 16×).
//
// A semaphore's waiters follow the herd-free rule on lock.SharedLocker:
// the first waiter watches the limit holders, every later one its
// predecessor, and a permit admitted after waiting touches its record to
// wake its successor. So in the steady state of these rows (every permit
// taken, waiters queued) one grant costs, counted as watch events
// delivered to any client's connection: the event of the release on the
// first waiter's watch, and the event of the new holder's touch on its
// successor's watch (a holder's watch on its own record starts 50ms
// after its grant on both backends, after these rows' 2ms holds, so its
// own release costs no event). That is 2 events per grant, whatever the
// number of waiters; the target
// adds a quarter event for the races in which a waiter wakes or reads
// for nothing (a touch seen after the listing; on ZooKeeper, a waiter
// woken by a touch touches on the guess that it is admitted, and a wrong
// guess wakes the waiter behind it once for nothing). Requests per
// grant: at most 1.25× plus one from 12 to 32 waiters.
//
// The rule wakes one waiter per admission, in a chain: a waiter learns
// that it is the first only from its predecessor's touch, so admissions
// follow each other at most one per wake-up, read and touch (with the
// guess, one per wake-up and touch), however many permits come free at
// once. That chain, not the holders, bounds grants/s on these rows.
func sharedTargets(br *backendReport) []target {
	var out []target
	for _, x := range br.Shared {
		if x.Role != roleFencelock {
			continue
		}
		if r, ok := find(br.Shared, func(y sharedResult) bool {
			return y.Role == roleReference && y.Readers == x.Readers && y.Writers == x.Writers
		}); ok {
			q := x.GrantsPerSec / r.GrantsPerSec
			out = append(out, target{fmt.Sprintf("read-write grants/s with %d readers and %d writers at least the reference's", x.Readers, x.Writers),
				fmt.Sprintf("%.0f vs %.0f = %.2f×", x.GrantsPerSec, r.GrantsPerSec, trunc2(q)), q >= 1})
		}
	}
	fl := func(rs []sharedResult, f func(sharedResult) bool) (sharedResult, bool) {
		return find(rs, func(x sharedResult) bool { return x.Role == roleFencelock && f(x) })
	}
	lo, ok1 := fl(br.Shared, func(x sharedResult) bool { return x.Readers+x.Writers == 2 })
	hi, ok2 := fl(br.Shared, func(x sharedResult) bool { return x.Readers+x.Writers == 32 })
	if ok1 && ok2 {
		met := hi.RequestsPerGrant <= 1.5*lo.RequestsPerGrant+1 && hi.EventsPerGrant <= 1.5*lo.EventsPerGrant+1
		out = append(out, target{"read-write lock: requests and events per grant constant from 2 to 32 clients",
			fmt.Sprintf("requests/grant %.1f → %.1f, events/grant %.2f → %.2f", lo.RequestsPerGrant, hi.RequestsPerGrant, lo.EventsPerGrant, hi.EventsPerGrant), met})
	}
	var rows []string
	maxEvents := 0.0
	for _, x := range br.Semaphore {
		if x.Role == roleFencelock {
			rows = append(rows, fmt.Sprintf("%d waiters: %.1f requests, %.2f events", x.Readers-x.Limit, x.RequestsPerGrant, x.EventsPerGrant))
			maxEvents = max(maxEvents, x.EventsPerGrant)
		}
	}
	if len(rows) > 0 {
		const bound = 2.0 // the first waiter's wake-up, its successor's
		out = append(out, target{fmt.Sprintf("semaphore: at most %.0f watch events per grant (+0.25 for races), at every number of waiters", bound),
			strings.Join(rows, "; "), maxEvents <= bound+0.25})
	}
	lo, ok1 = fl(br.Semaphore, func(x sharedResult) bool { return x.Readers-x.Limit == 12 })
	hi, ok2 = fl(br.Semaphore, func(x sharedResult) bool { return x.Readers-x.Limit == 32 })
	if ok1 && ok2 {
		out = append(out, target{"semaphore: requests per grant flat from 12 to 32 waiters",
			fmt.Sprintf("%.1f → %.1f", lo.RequestsPerGrant, hi.RequestsPerGrant), hi.RequestsPerGrant <= 1.25*lo.RequestsPerGrant+1})
	}
	return out
}
