package main

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// tableFunc writes one generated table from a set of runs; ok is false
// when no run has rows for it.
type tableFunc func(g *gen, runs []*reportRun) (md string, ok bool)

// tables are the generated regions a document may hold, by name.
var tables = map[string]tableFunc{
	"runs":           runsTable,
	"summary":        summaryTable,
	"targets":        targetsTable,
	"uncontended":    uncontendedTable,
	"contended-0ms":  contendedTable(0),
	"contended-1ms":  contendedTable(1),
	"contended-10ms": contendedTable(10),
	"rwlock":         rwlockTable,
	"semaphore":      semaphoreTable,
	"lockdelay":      lockDelayTable,
	"interop":        interopTable,
	"multi":          multiTable,
	"tls":            tlsTable,
	"failover":       failoverTable,
	"waiters":        waitersTable,
	"heap":           heapTable,
	"scale":          scaleTable,
	"overheads":      overheadsTable,
}

// gen records every figure the tables compute, so that the source check
// can accept a figure of the prose that one of them gives.
type gen struct {
	ratios []float64
	values []float64
}

func (g *gen) value(v float64) float64 { g.values = append(g.values, v); return v }

// span is a ratio over several runs: the median of the runs' ratios and
// the lowest and highest figure seen, per window where a run has them.
type span struct {
	med, lo, hi float64
	runs        int
	windows     bool // some run gave its ratio per window
}

// spanOf combines one sample per run; a run with a ratio object gives its
// median and range, one without gives the ratio of its aggregates.
func (g *gen) spanOf(samples []sample) (span, bool) {
	if len(samples) == 0 {
		return span{}, false
	}
	var meds []float64
	s := span{lo: math.Inf(1), hi: math.Inf(-1), runs: len(samples)}
	for _, x := range samples {
		meds = append(meds, x.med)
		s.lo, s.hi = min(s.lo, x.lo), max(s.hi, x.hi)
		s.windows = s.windows || x.windows
		g.ratios = append(g.ratios, x.med, x.lo, x.hi)
	}
	s.med = median(meds)
	g.ratios = append(g.ratios, s.med)
	return s, true
}

// sample is one run's ratio.
type sample struct {
	med, lo, hi float64
	windows     bool
}

// sampleOf returns the run's ratio: its ratio object if it has one, else
// a over b; ok is false when neither gives a figure.
func sampleOf(r *ratio, a, b float64) (sample, bool) {
	if r != nil && r.Median > 0 {
		lo, hi := cmp.Or(r.Min, r.Median), cmp.Or(r.Max, r.Median)
		return sample{r.Median, lo, hi, true}, true
	}
	if b <= 0 || math.IsNaN(a/b) {
		return sample{}, false
	}
	return sample{a / b, a / b, a / b, false}, true
}

func (s span) String() string {
	if s.runs == 0 {
		return "—"
	}
	if round(s.lo, 2) == round(s.hi, 2) {
		return fmt.Sprintf("%.2f×", s.med)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.med, s.lo, s.hi)
}

func round(v float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(v*p) / p
}

// med returns the median of the runs' figures, recorded, or NaN if none.
func (g *gen) med(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return g.value(median(xs))
}

func num(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "—"
	}
	if decimals == 0 && math.Abs(v) >= 1000 {
		return thousands(int(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// backendsOf returns the backends of the runs in the order they first
// appear.
func backendsOf(runs []*reportRun) []string {
	var out []string
	for _, r := range runs {
		for _, b := range r.Backends {
			if !slices.Contains(out, b.Backend) {
				out = append(out, b.Backend)
			}
		}
	}
	return out
}

// each calls f with every run's section for backend b.
func each(runs []*reportRun, b string, f func(x *reportBackend)) {
	for _, r := range runs {
		for i := range r.Backends {
			if r.Backends[i].Backend == b {
				f(&r.Backends[i])
			}
		}
	}
}

// table is a Markdown table under construction.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var sb strings.Builder
	sb.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	sb.WriteString(strings.Repeat(" --- |", len(t.head)) + "\n")
	for _, r := range t.rows {
		for i := range r {
			r[i] = escapeCell(r[i])
		}
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return sb.String()
}

// sourceLine names the runs a table was made from; most is the largest
// number of runs behind one figure, windows whether a run gave its ratio
// per window.
func sourceLine(runs []*reportRun, most int, windows bool) string {
	var names []string
	for _, r := range runs {
		names = append(names, "`"+filepath.Base(r.path)+"`")
	}
	s := "\nFrom " + strings.Join(names, ", ") + "."
	switch {
	case most > 1 && windows:
		s += " Figures are the median of the runs; a ratio is followed by the lowest and highest of any window in brackets."
	case most > 1:
		s += " Figures are the median of the runs; a ratio is followed by the lowest and highest of any run in brackets."
	case windows:
		s += " A ratio is followed by the lowest and highest of its windows in brackets."
	}
	return s + "\n"
}

func runsTable(g *gen, runs []*reportRun) (string, bool) {
	t := table{head: []string{"run", "file", "started", "machine", "load average at start", "provider"}}
	for i, r := range runs {
		t.add(strconv.Itoa(i+1), "`"+r.name+"`", r.Started.UTC().Format("2006-01-02 15:04 UTC"),
			fmt.Sprintf("%s, %d CPUs", r.Machine.CPU, r.Machine.NumCPU), cmp.Or(r.Machine.LoadAvgStart, "—"), cmp.Or(r.Config.Provider, "—"))
	}
	return t.String(), len(runs) > 0
}

var ratioInFigure = regexp.MustCompile(`= (\d+(?:\.\d+)?)×`)

// targetsTable: every target line of every run side by side, how many met
// it, and the spread of its ratio where its figure has one.
func targetsTable(g *gen, runs []*reportRun) (string, bool) {
	var sb strings.Builder
	any := false
	for _, name := range backendsOf(runs) {
		var order []string
		cells := map[string][]string{}
		ratios := map[string][]sample{}
		met, have := map[string]int{}, map[string]int{}
		for i, r := range runs {
			for _, b := range r.Backends {
				if b.Backend != name {
					continue
				}
				for _, tg := range b.Targets {
					if _, ok := cells[tg.What]; !ok {
						order = append(order, tg.What)
						cells[tg.What] = slices.Repeat([]string{"—"}, len(runs))
					}
					verdict := "MISSED"
					if tg.Met {
						verdict = "met"
						met[tg.What]++
					}
					have[tg.What]++
					cells[tg.What][i] = verdict + ": " + tg.Figure
					if m := ratioInFigure.FindStringSubmatch(tg.Figure); m != nil {
						v, _ := strconv.ParseFloat(m[1], 64)
						ratios[tg.What] = append(ratios[tg.What], sample{v, v, v, false})
					}
				}
			}
		}
		if len(order) == 0 {
			continue
		}
		any = true
		head := []string{"target", "met in"}
		for i := range runs {
			head = append(head, fmt.Sprintf("run %d", i+1))
		}
		head = append(head, "ratio")
		t := table{head: head}
		for _, what := range order {
			s, _ := g.spanOf(ratios[what])
			row := append([]string{what, fmt.Sprintf("%d of %d", met[what], have[what])}, cells[what]...)
			t.add(append(row, s.String())...)
		}
		fmt.Fprintf(&sb, "\n%s\n\n%s", displayName(name), t.String())
	}
	return strings.TrimPrefix(sb.String(), "\n") + sourceLine(runs, len(runs), false), any
}

// pick returns the row of role in rows that key selects, if any.
func pick[T any](rows []T, role string, key func(T) (string, bool)) (T, bool) {
	for _, r := range rows {
		if k, ok := key(r); ok && k == role {
			return r, true
		}
	}
	var zero T
	return zero, false
}

func uncontendedTable(g *gen, runs []*reportRun) (string, bool) {
	t := table{head: []string{"backend", "fencelock p50 ms", "reference p50 ms", "floor p50 ms", "p50 vs reference", "p50 vs floor", "requests/cycle", "client CPU µs/cycle: fencelock, reference, floor"}}
	windows, most := false, 0
	for _, b := range backendsOf(runs) {
		var f, ref, floor, req, cpu, refCPU, floorCPU []float64
		var vsRef, vsFloor []sample
		each(runs, b, func(x *reportBackend) {
			role := func(u uncontended) (string, bool) { return u.Role, true }
			fl, ok := pick(x.Uncontended, "fencelock", role)
			if !ok {
				return
			}
			f = append(f, fl.Latency.P50)
			req = append(req, fl.RequestsPerCycle)
			cpu = append(cpu, fl.ClientCPUUs)
			if rf, ok := pick(x.Uncontended, "reference", role); ok {
				ref = append(ref, rf.Latency.P50)
				refCPU = append(refCPU, rf.ClientCPUUs)
				if s, ok := sampleOf(fl.Ratio, fl.Latency.P50, rf.Latency.P50); ok {
					vsRef = append(vsRef, s)
				}
			}
			if fo, ok := pick(x.Uncontended, "floor", role); ok {
				floor = append(floor, fo.Latency.P50)
				floorCPU = append(floorCPU, fo.ClientCPUUs)
				if s, ok := sampleOf(nil, fl.Latency.P50, fo.Latency.P50); ok {
					vsFloor = append(vsFloor, s)
				}
			}
		})
		if len(f) == 0 {
			continue
		}
		a, _ := g.spanOf(vsRef)
		c, _ := g.spanOf(vsFloor)
		windows, most = windows || a.windows, max(most, len(f))
		t.add(displayName(b), num(g.med(f), 2), num(g.med(ref), 2), num(g.med(floor), 2), a.String(), c.String(), num(g.med(req), 1), num(g.med(cpu), 0)+", "+num(g.med(refCPU), 0)+", "+num(g.med(floorCPU), 0))
	}
	return t.String() + sourceLine(runs, most, windows), len(t.rows) > 0
}

// contendedTable returns the table of the contended rows held holdMs.
func contendedTable(holdMs float64) tableFunc {
	return func(g *gen, runs []*reportRun) (string, bool) {
		return pairTable(g, runs, contendedPairs(func(x *reportBackend) []contendedRow { return x.Contended }, holdMs))
	}
}

// pairs describes a table of fencelock rows against their references.
type pairs struct {
	head []string
	// rows returns, for one run's backend, each key (say, a number of
	// clients) with its cells' figures and the run's ratio sample.
	rows func(x *reportBackend) []pairRow
	// cells formats the medians of a key's figures.
	cells func(g *gen, figs [][]float64) []string
}

type pairRow struct {
	key  string
	figs []float64
	s    sample
	ok   bool // s is a ratio
}

func contendedPairs(rows func(*reportBackend) []contendedRow, holdMs float64) pairs {
	return pairs{
		head: []string{"clients", "fencelock grants/s", "reference grants/s", "ratio", "requests/grant", "handoff p99 ms"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range rows(x) {
				if c.Role != "fencelock" || c.HoldMs != holdMs {
					continue
				}
				p := pairRow{key: strconv.Itoa(c.Clients), figs: []float64{c.GrantsPerSec, math.NaN(), c.RequestsPerGrant, math.NaN(), c.Handoff.P99, math.NaN()}}
				for _, r := range rows(x) {
					if r.Role == "reference" && r.Clients == c.Clients && r.HoldMs == holdMs {
						p.figs[1], p.figs[3], p.figs[5] = r.GrantsPerSec, r.RequestsPerGrant, r.Handoff.P99
						p.s, p.ok = sampleOf(c.Ratio, c.GrantsPerSec, r.GrantsPerSec)
					}
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), "", vs(g, f[2], f[3], 1), vs(g, f[4], f[5], 1)}
		},
	}
}

// vs formats a fencelock figure against its reference's ("3.8 vs 6.0").
func vs(g *gen, a, b []float64, decimals int) string {
	x := num(g.med(a), decimals)
	if y := g.med(b); !math.IsNaN(y) {
		x += " vs " + num(y, decimals)
	}
	return x
}

// pairTable writes one row per backend and key, the ratio in the column
// whose cell is left empty.
func pairTable(g *gen, runs []*reportRun, p pairs) (string, bool) {
	t := table{head: append([]string{"backend"}, p.head...)}
	windows, most := false, 0
	for _, b := range backendsOf(runs) {
		var keys []string
		figs := map[string][][]float64{}
		ratios := map[string][]sample{}
		each(runs, b, func(x *reportBackend) {
			for _, r := range p.rows(x) {
				if _, ok := figs[r.key]; !ok {
					keys = append(keys, r.key)
					figs[r.key] = make([][]float64, len(r.figs))
				}
				for i, v := range r.figs {
					if !math.IsNaN(v) {
						figs[r.key][i] = append(figs[r.key][i], v)
					}
				}
				if r.ok {
					ratios[r.key] = append(ratios[r.key], r.s)
				}
			}
		})
		slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(keyOrder(a), keyOrder(b)) })
		for _, k := range keys {
			cells := p.cells(g, figs[k])
			s, _ := g.spanOf(ratios[k])
			windows = windows || s.windows
			for _, f := range figs[k] {
				most = max(most, len(f))
			}
			for i := range cells {
				if cells[i] == "" {
					cells[i] = s.String()
				}
			}
			t.add(append([]string{displayName(b), k}, cells...)...)
		}
	}
	if len(t.rows) == 0 {
		return "", false
	}
	return t.String() + sourceLine(runs, most, windows), true
}

// keyOrder sorts keys that start with a number by that number.
func keyOrder(k string) float64 {
	end := strings.IndexFunc(k, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(k)
	}
	v, err := strconv.ParseFloat(k[:end], 64)
	if err != nil {
		return math.Inf(1)
	}
	return v
}

func rwlockTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"readers / writers", "fencelock grants/s", "reference grants/s", "ratio", "requests/grant", "events/grant"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range x.Shared {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: fmt.Sprintf("%d / %d", c.Readers, c.Writers), figs: []float64{c.GrantsPerSec, math.NaN(), c.RequestsPerGrant, c.EventsPerGrant}}
				for _, r := range x.Shared {
					if r.Role == "reference" && r.Readers == c.Readers && r.Writers == c.Writers {
						p.figs[1] = r.GrantsPerSec
						p.s, p.ok = sampleOf(c.Ratio, c.GrantsPerSec, r.GrantsPerSec)
					}
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), "", num(g.med(f[2]), 1), num(g.med(f[3]), 2)}
		},
	})
}

func semaphoreTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"clients", "limit", "grants/s", "handoff p99 ms", "requests/grant", "events/grant", "most holders at once"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range x.Semaphore {
				if c.Role == "fencelock" {
					out = append(out, pairRow{key: strconv.Itoa(c.Readers), figs: []float64{float64(c.Limit), c.GrantsPerSec, c.Handoff.P99, c.RequestsPerGrant, c.EventsPerGrant, float64(c.MaxHolders)}})
				}
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), num(g.med(f[2]), 1), num(g.med(f[3]), 1), num(g.med(f[4]), 2), num(slices.Max(f[5]), 0)}
		},
	})
}

func lockDelayTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"clients", "grants/s without / with", "ratio", "handoff p50 ms without / with", "requests/grant without / with"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, w := range x.LockDelay {
				if !strings.Contains(w.Recipe, "lock_delay") {
					continue
				}
				for _, c := range x.LockDelay {
					if c.Clients == w.Clients && c.HoldMs == w.HoldMs && !strings.Contains(c.Recipe, "lock_delay") {
						key := strconv.Itoa(c.Clients)
						if w.HoldMs > 0 {
							key += fmt.Sprintf(", %g ms hold", w.HoldMs)
						}
						p := pairRow{key: key, figs: []float64{c.GrantsPerSec, w.GrantsPerSec, c.Handoff.P50, w.Handoff.P50, c.RequestsPerGrant, w.RequestsPerGrant}}
						p.s, p.ok = sampleOf(w.Ratio, w.GrantsPerSec, c.GrantsPerSec)
						out = append(out, p)
					}
				}
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0) + " / " + num(g.med(f[1]), 0), "", num(g.med(f[2]), 1) + " / " + num(g.med(f[3]), 1), num(g.med(f[4]), 1) + " / " + num(g.med(f[5]), 1)}
		},
	})
}

// interopTable has, per client count, the grants/s of the reference, of
// fencelock in its layout and of the fleet mixing them, and the mixed
// fleet's ratio to the slower of the two.
func interopTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"clients", "reference grants/s", "fencelock in its layout", "mixed fleet", "mixed vs the slower"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for i := 0; i+2 < len(x.Interop); i += 3 {
				ref, fl, mixed := x.Interop[i], x.Interop[i+1], x.Interop[i+2]
				p := pairRow{key: strconv.Itoa(mixed.Clients), figs: []float64{ref.GrantsPerSec, fl.GrantsPerSec, mixed.GrantsPerSec}}
				p.s, p.ok = sampleOf(mixed.Slower, mixed.GrantsPerSec, min(ref.GrantsPerSec, fl.GrantsPerSec))
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), num(g.med(f[2]), 0), ""}
		},
	})
}

// multiTable has, per "multi" row, the sets/s of lock.AcquireAll and of
// sorted one-by-one Acquire, AcquireAll's ratio to it, and both ways'
// acquire latency and requests per set.
func multiTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"clients", "names per set", "AcquireAll sets/s", "sorted Acquire sets/s", "AcquireAll ÷ sorted",
			"acquire p50 ms, all / sorted", "acquire p99 ms, all / sorted", "requests/set, all / sorted"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, a := range x.Multi {
				i := slices.IndexFunc(x.Multi, func(s multiRow) bool {
					return s.Way != a.Way && s.Clients == a.Clients && s.Pool == a.Pool && s.SetMin == a.SetMin && s.SetMax == a.SetMax
				})
				if a.Way != "AcquireAll" || i < 0 {
					continue
				}
				s := x.Multi[i]
				p := pairRow{key: strconv.Itoa(a.Clients), figs: []float64{float64(a.SetMin), float64(a.SetMax), float64(a.Pool),
					a.SetsPerSec, s.SetsPerSec, a.Acquire.P50, s.Acquire.P50, a.Acquire.P99, s.Acquire.P99, a.RequestsPerSet, s.RequestsPerSet}}
				p.s, p.ok = sampleOf(a.Ratio, a.SetsPerSec, s.SetsPerSec)
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			both := func(i, decimals int) string {
				return num(g.med(f[i]), decimals) + " / " + num(g.med(f[i+1]), decimals)
			}
			names := num(median(f[0]), 0)
			if median(f[1]) != median(f[0]) {
				names += "–" + num(median(f[1]), 0)
			}
			return []string{names + " of " + num(median(f[2]), 0), num(g.med(f[3]), 0), num(g.med(f[4]), 0), "",
				both(5, 1), both(7, 1), both(9, 1)}
		},
	})
}

func tlsTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"row", "p50 ms", "cycles/s", "p50 vs plain"},
		rows: func(x *reportBackend) []pairRow {
			var plain *uncontended
			for i := range x.TLS {
				if strings.Contains(x.TLS[i].Recipe, "plain") {
					plain = &x.TLS[i]
				}
			}
			var out []pairRow
			for _, c := range x.TLS {
				p := pairRow{key: c.Recipe, figs: []float64{c.Latency.P50, c.CyclesPerSec}}
				if plain != nil {
					p.s, p.ok = sampleOf(c.Ratio, c.Latency.P50, plain.Latency.P50)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 2), num(g.med(f[1]), 0), ""}
		},
	})
}

func failoverTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"TTL", "fencelock kill → grant ms", "reference ms", "ratio"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range x.Failover {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: fmt.Sprintf("%g s", c.TTLSec), figs: []float64{c.MedianMs, math.NaN()}}
				if r, ok := pick(x.Failover, "reference", func(f failover) (string, bool) { return f.Role, f.TTLSec == c.TTLSec }); ok {
					p.figs[1] = r.MedianMs
					p.s, p.ok = sampleOf(c.Ratio, c.MedianMs, r.MedianMs)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), ""}
		},
	})
}

func waitersTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"waiters", "fencelock serve s", "reference serve s", "ratio"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range x.Waiters {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: strconv.Itoa(c.Waiters), figs: []float64{c.ServeSec, math.NaN()}}
				if r, ok := pick(x.Waiters, "reference", func(w waiters) (string, bool) { return w.Role, w.Waiters == c.Waiters }); ok {
					p.figs[1] = r.ServeSec
					p.s, p.ok = sampleOf(c.Ratio, c.ServeSec, r.ServeSec)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 2), num(g.med(f[1]), 2), ""}
		},
	})
}

func heapTable(g *gen, runs []*reportRun) (string, bool) {
	return pairTable(g, runs, pairs{
		head: []string{"leases", "fencelock bytes/lease", "reference bytes/lease", "ratio", "goroutines/lease"},
		rows: func(x *reportBackend) []pairRow {
			var out []pairRow
			for _, c := range x.Leases {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: thousands(c.Leases), figs: []float64{c.HeapBytesPerLease, math.NaN(), c.GoroutinesPerLease}}
				if r, ok := pick(x.Leases, "reference", func(l leasesRow) (string, bool) { return l.Role, l.Leases == c.Leases }); ok {
					p.figs[1] = r.HeapBytesPerLease
					p.s, p.ok = sampleOf(c.Ratio, c.HeapBytesPerLease, r.HeapBytesPerLease)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), "", num(g.med(f[2]), 2)}
		},
	})
}

// scaleTable: the many-Lockers rows and the many-leases rows.
func scaleTable(g *gen, runs []*reportRun) (string, bool) {
	lockers, ok1 := pairTable(g, runs, pairs{
		head: []string{"Lockers / names", "fencelock grants/s", "reference grants/s", "ratio", "requests/grant"},
		rows: func(x *reportBackend) []pairRow {
			if x.Scale == nil {
				return nil
			}
			var out []pairRow
			for _, c := range x.Scale.Lockers {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: fmt.Sprintf("%d / %s", c.Lockers, thousands(c.Names)), figs: []float64{c.GrantsPerSec, math.NaN(), c.RequestsPerGrant, math.NaN()}}
				if r, ok := pick(x.Scale.Lockers, "reference", func(l scaleLockers) (string, bool) { return l.Role, l.Lockers == c.Lockers }); ok {
					p.figs[1], p.figs[3] = r.GrantsPerSec, r.RequestsPerGrant
					p.s, p.ok = sampleOf(c.Ratio, c.GrantsPerSec, r.GrantsPerSec)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), "", vs(g, f[2], f[3], 1)}
		},
	})
	leases, ok2 := pairTable(g, runs, pairs{
		head: []string{"leases", "fencelock bytes/lease", "reference bytes/lease", "ratio"},
		rows: func(x *reportBackend) []pairRow {
			if x.Scale == nil {
				return nil
			}
			var out []pairRow
			for _, c := range x.Scale.Leases {
				if c.Role != "fencelock" {
					continue
				}
				p := pairRow{key: thousands(c.Leases), figs: []float64{c.HeapBytesPerLease, math.NaN()}}
				if r, ok := pick(x.Scale.Leases, "reference", func(l scaleLeases) (string, bool) { return l.Role, l.Leases == c.Leases }); ok {
					p.figs[1] = r.HeapBytesPerLease
					p.s, p.ok = sampleOf(c.Ratio, c.HeapBytesPerLease, r.HeapBytesPerLease)
				}
				out = append(out, p)
			}
			return out
		},
		cells: func(g *gen, f [][]float64) []string {
			return []string{num(g.med(f[0]), 0), num(g.med(f[1]), 0), ""}
		},
	})
	if ok1 && ok2 {
		// Both tables come from the same runs: one source line.
		lockers = lockers[:strings.LastIndex(strings.TrimSuffix(lockers, "\n"), "\n")+1]
		return lockers + leases, true
	}
	return lockers + leases, ok1 || ok2
}

// overheadsTable: one row per backend and overhead, every run's ratio with
// its interval in a column of its own.
func overheadsTable(g *gen, runs []*reportRun) (string, bool) {
	head := []string{"backend", "what"}
	for i := range runs {
		head = append(head, fmt.Sprintf("run %d: on / off [95%% interval]", i+1))
	}
	t := table{head: append(head, "interval within ±1%")}
	for _, b := range backendsOf(runs) {
		var whats []string
		cells := map[string][]string{}
		within, measured := map[string]int{}, map[string]int{}
		for i, r := range runs {
			for _, x := range r.Backends {
				if x.Backend != b {
					continue
				}
				for _, o := range x.Overheads {
					if cells[o.What] == nil {
						whats = append(whats, o.What)
						cells[o.What] = make([]string, len(runs))
					}
					g.ratios = append(g.ratios, o.Ratio, o.CI95Low, o.CI95High)
					cells[o.What][i] = fmt.Sprintf("%.3f× [%.3f–%.3f]", o.Ratio, o.CI95Low, o.CI95High)
					measured[o.What]++
					if o.Met1Pct {
						within[o.What]++
					}
				}
			}
		}
		for _, w := range whats {
			row := append([]string{displayName(b), w}, cells[w]...)
			for i, c := range row {
				if c == "" {
					row[i] = "—"
				}
			}
			t.add(append(row, fmt.Sprintf("%d of %d", within[w], measured[w]))...)
		}
	}
	if len(t.rows) == 0 {
		return "", false
	}
	return t.String() + sourceLine(runs, 1, false), true
}

// summaryTable: the few ratios the README shows, one column per backend.
func summaryTable(g *gen, runs []*reportRun) (string, bool) {
	bs := backendsOf(runs)
	head := []string{"fencelock against the reference"}
	for _, b := range bs {
		head = append(head, displayName(b))
	}
	t := table{head: head}
	windows, most := false, 0
	for _, l := range summaryLines(summaryHold(runs)) {
		row := []string{l.what}
		some := false
		for _, b := range bs {
			var ss []sample
			each(runs, b, func(x *reportBackend) {
				if s, ok := l.get(x); ok {
					ss = append(ss, s)
				}
			})
			s, ok := g.spanOf(ss)
			some = some || ok
			windows, most = windows || s.windows, max(most, s.runs)
			row = append(row, s.String())
		}
		if some {
			t.add(row...)
		}
	}
	row := []string{"target lines met in every run"}
	for _, b := range bs {
		row = append(row, metInAll(runs, b))
	}
	t.add(row...)
	return t.String() + sourceLine(runs, most, windows), len(t.rows) > 1
}

// summaryHold is the hold of the summary's contended lines: 1 ms, the
// default table's, if any run has such rows, else 0.
func summaryHold(runs []*reportRun) float64 {
	for _, r := range runs {
		for _, x := range r.Backends {
			if slices.ContainsFunc(x.Contended, func(c contendedRow) bool { return c.HoldMs == 1 }) {
				return 1
			}
		}
	}
	return 0
}

// summaryLine is one line of the summary: what it compares, and how to
// take one run's ratio from a backend's rows.
type summaryLine struct {
	what string
	get  func(x *reportBackend) (sample, bool)
}

func summaryLines(hold float64) []summaryLine {
	contended := func(clients int) func(x *reportBackend) (sample, bool) {
		return func(x *reportBackend) (sample, bool) {
			key := func(c contendedRow) (string, bool) { return c.Role, c.Clients == clients && c.HoldMs == hold }
			f, ok1 := pick(x.Contended, "fencelock", key)
			r, ok2 := pick(x.Contended, "reference", key)
			if !ok1 || !ok2 {
				return sample{}, false
			}
			return sampleOf(f.Ratio, f.GrantsPerSec, r.GrantsPerSec)
		}
	}
	holdText := "an empty critical section"
	if hold > 0 {
		holdText = fmt.Sprintf("%g ms hold", hold)
	}
	return []summaryLine{
		{"uncontended acquire+release, p50 latency (lower is better)", func(x *reportBackend) (sample, bool) {
			key := func(u uncontended) (string, bool) { return u.Role, true }
			f, ok1 := pick(x.Uncontended, "fencelock", key)
			r, ok2 := pick(x.Uncontended, "reference", key)
			if !ok1 || !ok2 {
				return sample{}, false
			}
			return sampleOf(f.Ratio, f.Latency.P50, r.Latency.P50)
		}},
		{"contended grants/s, 2 clients, " + holdText, contended(2)},
		{"contended grants/s, 32 clients, " + holdText, contended(32)},
		{"heap per held lease (lower is better)", func(x *reportBackend) (sample, bool) {
			f, ok1 := pick(x.Leases, "fencelock", func(l leasesRow) (string, bool) { return l.Role, true })
			r, ok2 := pick(x.Leases, "reference", func(l leasesRow) (string, bool) { return l.Role, l.Leases == f.Leases })
			if !ok1 || !ok2 {
				return sample{}, false
			}
			return sampleOf(f.Ratio, f.HeapBytesPerLease, r.HeapBytesPerLease)
		}},
	}
}

// metInAll says how many of backend b's target lines every run that has
// them met ("16 of 18").
func metInAll(runs []*reportRun, b string) string {
	met, have := map[string]int{}, map[string]int{}
	each(runs, b, func(x *reportBackend) {
		for _, tg := range x.Targets {
			have[tg.What]++
			if tg.Met {
				met[tg.What]++
			}
		}
	})
	all := 0
	for what, n := range have {
		if met[what] == n {
			all++
		}
	}
	return fmt.Sprintf("%d of %d", all, len(have))
}
