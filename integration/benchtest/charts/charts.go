package main

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// chart is one SVG file to write.
type chart struct {
	name string
	svg  []byte
}

// stalePatterns match every file name buildCharts can produce.
var stalePatterns = []string{"grants-*.svg", "handoff-*.svg", "heap-per-lease.svg", "rwlock.svg", "semaphore.svg"}

// buildCharts draws every chart the runs have rows for.
func buildCharts(runs []*benchRun) ([]chart, error) {
	var out []chart
	add := func(name string, f figure, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		svg, err := f.svg()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, chart{name, svg})
		return nil
	}
	for _, b := range backendNames(runs) {
		if hasRows(runs, b, func(x backend) int { return len(x.Contended) }) {
			view, hold := contendedView(runs, b)
			f, err := grantsFigure(view, b, hold)
			if err := add("grants-"+b+".svg", f, err); err != nil {
				return nil, err
			}
			f, err = handoffFigure(view, b, hold)
			if err := add("handoff-"+b+".svg", f, err); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range []struct {
		name string
		rows func(backend) int
		fig  func([]*benchRun) (figure, error)
	}{
		{"heap-per-lease.svg", func(x backend) int { return len(x.Leases) }, heapFigure},
		{"rwlock.svg", func(x backend) int { return len(x.Shared) }, rwFigure},
		{"semaphore.svg", func(x backend) int { return len(x.Semaphore) }, semaphoreFigure},
	} {
		if hasRows(runs, "", c.rows) {
			f, err := c.fig(runs)
			if err := add(c.name, f, err); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("nothing to draw: no contended, leases, read-write or semaphore rows in the input")
	}
	return out, nil
}

// hasRows reports whether any run has rows of backend b (any backend if b
// is empty).
func hasRows(runs []*benchRun, b string, rows func(backend) int) bool {
	for _, r := range runs {
		for _, x := range r.Backends {
			if (b == "" || x.Backend == b) && rows(x) > 0 {
				return true
			}
		}
	}
	return false
}

// backendNames returns the backends in the order they first appear.
func backendNames(runs []*benchRun) []string {
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

// displayName is a backend's name for people.
func displayName(b string) string {
	if b == "zookeeper" {
		return "ZooKeeper"
	}
	return b
}

// serverOf returns the server version and size of backend b in the runs
// ("etcd 3.6.16, 3 members"), or the backend's name if they differ.
func serverOf(runs []*benchRun, b string) string {
	var seen []string
	for _, r := range runs {
		for _, x := range r.Backends {
			if x.Backend == b && x.ServerVersion != "" {
				s := x.ServerVersion
				if x.Members > 0 {
					s += fmt.Sprintf(", %d members", x.Members)
				}
				if !slices.Contains(seen, s) {
					seen = append(seen, s)
				}
			}
		}
	}
	if len(seen) != 1 {
		return displayName(b)
	}
	return seen[0]
}

// recipeKey names a recipe of one backend.
type recipeKey struct{ recipe, role string }

var roleOrder = []string{"fencelock", "reference", "naive herd", "floor"}

// sortRecipes orders recipes by role (fencelock first), then by name.
func sortRecipes(rs []recipeKey) {
	rank := func(role string) int {
		if i := slices.Index(roleOrder, role); i >= 0 {
			return i
		}
		return len(roleOrder)
	}
	slices.SortStableFunc(rs, func(a, b recipeKey) int {
		return cmp.Or(cmp.Compare(rank(a.role), rank(b.role)), cmp.Compare(a.recipe, b.recipe))
	})
}

// colorsFor gives each recipe its role's colour, or a spare one when the
// role is unknown or another recipe has it already.
func colorsFor(rs []recipeKey) map[recipeKey]color.Color {
	out := map[recipeKey]color.Color{}
	taken := map[string]bool{}
	spare := 0
	for _, r := range rs {
		if c, ok := roleColors[r.role]; ok && !taken[r.role] {
			out[r] = c
			taken[r.role] = true
			continue
		}
		out[r] = spareColors[spare%len(spareColors)]
		spare++
	}
	return out
}

func (k recipeKey) label() string {
	if k.role == "" {
		return k.recipe
	}
	return k.recipe + " (" + k.role + ")"
}

// caption describes the runs behind a chart: when, on what machine, how
// many. Only the runs with rows for the chart count.
func caption(runs []*benchRun) string {
	var machines, providers []string
	quick := false
	for _, r := range runs {
		m := fmt.Sprintf("%s, %d CPUs", cmp.Or(r.Machine.CPU, "unknown CPU"), r.Machine.NumCPU)
		if !slices.Contains(machines, m) {
			machines = append(machines, m)
		}
		p := r.Config.Provider
		switch p {
		case "process":
			p = "local processes"
		case "containers":
			p = "containers"
		}
		if p != "" && !slices.Contains(providers, p) {
			providers = append(providers, p)
		}
		quick = quick || r.Config.Quick
	}
	when := func(r *benchRun) string {
		if r.Started.IsZero() {
			return "an unknown date"
		}
		return r.Started.UTC().Format("2006-01-02 15:04 UTC")
	}
	var s string
	if len(runs) == 1 {
		s = "Run of " + when(runs[0])
	} else {
		first := slices.MinFunc(runs, func(a, b *benchRun) int { return a.Started.Compare(b.Started) })
		last := slices.MaxFunc(runs, func(a, b *benchRun) int { return a.Started.Compare(b.Started) })
		s = fmt.Sprintf("%d runs, %s to %s", len(runs), when(first), when(last))
	}
	s += " on " + strings.Join(machines, " and ")
	if len(providers) > 0 {
		s += ", servers: " + strings.Join(providers, " and ")
	}
	if quick {
		s += "; QUICK run (FENCELOCK_BENCH_QUICK=1), smoke figures only"
	}
	s += "."
	for _, r := range runs {
		if r.Note != "" {
			s += " " + strings.TrimSpace(r.Note)
		}
	}
	return s
}

// runsWith returns the runs that have rows for a chart.
func runsWith(runs []*benchRun, rows func(backend) int, b string) []*benchRun {
	var out []*benchRun
	for _, r := range runs {
		for _, x := range r.Backends {
			if (b == "" || x.Backend == b) && rows(x) > 0 {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// spreadNote says how several runs are drawn.
func spreadNote(runs int, what string) string {
	if runs < 2 {
		return ""
	}
	return fmt.Sprintf("%s; one mark per run.", what)
}

// chartHoldMs is the hold of the contended rows that the grants and
// handoff charts draw: 1 ms, the rows of TestBench's default table.
const chartHoldMs = 1

// contendedView returns the runs with backend b's contended rows cut down
// to those of one hold, and that hold: chartHoldMs if any run has rows of
// it, else 0, the only hold of results written before the rows had one.
// A run without rows of that hold then has no contended rows of b, and
// the charts leave it out rather than mix holds.
func contendedView(runs []*benchRun, b string) ([]*benchRun, float64) {
	hold := 0.0
	if hasRows(runs, b, func(x backend) int { return len(holdRows(x.Contended, chartHoldMs)) }) {
		hold = chartHoldMs
	}
	out := make([]*benchRun, len(runs))
	for i, r := range runs {
		v := *r
		v.Backends = slices.Clone(r.Backends)
		for j := range v.Backends {
			if v.Backends[j].Backend == b {
				v.Backends[j].Contended = holdRows(v.Backends[j].Contended, hold)
			}
		}
		out[i] = &v
	}
	return out, hold
}

// holdRows returns the rows of cs held holdMs.
func holdRows(cs []contended, holdMs float64) []contended {
	return slices.DeleteFunc(slices.Clone(cs), func(c contended) bool { return c.HoldMs != holdMs })
}

// cycleText says what each client of the contended rows does, for holdMs.
func cycleText(holdMs float64) string {
	if holdMs == 0 {
		return "loops acquire → release on the one lock (an empty critical section)"
	}
	return fmt.Sprintf("loops acquire → hold %g ms → release on the one lock", holdMs)
}

// holdSuffix is the end of a contended chart's title: the hold, if any.
func holdSuffix(holdMs float64) string {
	if holdMs == 0 {
		return ""
	}
	return fmt.Sprintf(" (%g ms hold)", holdMs)
}

// grantsFigure: contended grants per second against clients, one line per
// recipe, on backend b, for runs whose rows all hold holdMs.
func grantsFigure(runs []*benchRun, b string, holdMs float64) (figure, error) {
	used := runsWith(runs, func(x backend) int { return len(x.Contended) }, b)
	type cell struct {
		k       recipeKey
		clients int
	}
	values := map[cell][]float64{}
	var recipes []recipeKey
	for _, r := range used {
		for _, x := range r.Backends {
			if x.Backend != b {
				continue
			}
			for _, c := range x.Contended {
				k := recipeKey{c.Recipe, c.Role}
				if !slices.Contains(recipes, k) {
					recipes = append(recipes, k)
				}
				values[cell{k, c.Clients}] = append(values[cell{k, c.Clients}], c.GrantsPerSec)
			}
		}
	}
	sortRecipes(recipes)
	colors := colorsFor(recipes)
	var series []lineSeries
	for _, k := range recipes {
		s := lineSeries{label: k.label(), color: colors[k]}
		var cs []int
		for c := range values {
			if c.k == k {
				cs = append(cs, c.clients)
			}
		}
		slices.Sort(cs)
		for _, n := range cs {
			s.xs = append(s.xs, float64(n))
			s.ys = append(s.ys, values[cell{k, n}])
		}
		series = append(series, s)
	}
	title := fmt.Sprintf("Contended lock on %s: grants per second%s", serverOf(runs, b), holdSuffix(holdMs))
	p := newPlot("clients on one lock (log scale)", "grants per second (higher is better)")
	legend, err := linePlot(p, series, len(used))
	if err != nil {
		return figure{}, err
	}
	capt := []string{caption(used), "Each client, with its own connection and session, " + cycleText(holdMs) + "."}
	if n := spreadNote(len(used), "Line: median of the runs"); n != "" {
		capt[1] += " " + n
	}
	return figure{title: title, plot: p, legend: legend, caption: capt, w: 7 * vg.Inch, h: 4.2 * vg.Inch}, nil
}

// handoffFigure: the handoff latency distribution per client count and
// recipe on backend b, for runs whose rows all hold holdMs.
func handoffFigure(runs []*benchRun, b string, holdMs float64) (figure, error) {
	used := runsWith(runs, func(x backend) int { return len(x.Contended) }, b)
	var recipes []recipeKey
	var clients []int
	for _, r := range used {
		for _, x := range r.Backends {
			if x.Backend != b {
				continue
			}
			for _, c := range x.Contended {
				if k := (recipeKey{c.Recipe, c.Role}); !slices.Contains(recipes, k) {
					recipes = append(recipes, k)
				}
				if !slices.Contains(clients, c.Clients) {
					clients = append(clients, c.Clients)
				}
			}
		}
	}
	sortRecipes(recipes)
	slices.Sort(clients)
	colors := colorsFor(recipes)
	// Client count g is centred on x = g; each recipe has a slot in it,
	// and each run a place in the recipe's slot.
	slot := 0.8 / float64(len(recipes))
	var items []distItem
	for g, n := range clients {
		for i, k := range recipes {
			centre := float64(g) + (float64(i)-float64(len(recipes)-1)/2)*slot
			for ri, r := range used {
				for _, x := range r.Backends {
					if x.Backend != b {
						continue
					}
					for _, c := range x.Contended {
						if c.Clients != n || (recipeKey{c.Recipe, c.Role}) != k || c.Handoff.P50 <= 0 {
							continue
						}
						w := slot / float64(len(used))
						items = append(items, distItem{
							x:         centre + (float64(ri)-float64(len(used)-1)/2)*w,
							halfWidth: w * 0.35,
							color:     colors[k],
							d:         c.Handoff,
						})
					}
				}
			}
		}
	}
	if len(items) == 0 {
		return figure{}, errors.New("no handoff latencies above 0 in the contended rows")
	}
	title := fmt.Sprintf("Contended lock on %s: handoff latency%s", serverOf(runs, b), holdSuffix(holdMs))
	p := newPlot("clients on one lock", "handoff, ms (log scale; lower is better)")
	addGrid(p)
	p.Add(distPlot{items})
	var ticks plot.ConstantTicks
	for g, n := range clients {
		ticks = append(ticks, plot.Tick{Value: float64(g), Label: fmt.Sprintf("%d clients", n)})
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = -0.5, float64(len(clients))-0.5
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	_, _, ymin, ymax := distPlot{items}.DataRange()
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	var legend []legendEntry
	for _, k := range recipes {
		legend = append(legend, legendEntry{k.label(), []plot.Thumbnailer{swatch(colors[k])}})
	}
	legend = append(legend, legendEntry{"", nil})
	legend = append(legend, distKey(items)...)
	capt := []string{caption(used), "Handoff: from the moment the holder starts its release to the next grant, in another client."}
	if n := spreadNote(len(used), "Each recipe's runs side by side, in the order the files were given"); n != "" {
		capt[1] += " " + n
	}
	return figure{title: title, plot: p, legend: legend, caption: capt, w: 7.5 * vg.Inch, h: 4.2 * vg.Inch}, nil
}

// byRole colours recipes by their role, so that fencelock has the same
// colour on every backend, and returns a legend with one line per role that
// names its recipes ("fencelock: etcdlock, zklock").
func byRole(recipes []recipeKey) (func(recipeKey) color.Color, []legendEntry) {
	var roles []recipeKey
	names := map[string][]string{}
	for _, k := range recipes {
		if _, ok := names[k.role]; !ok {
			roles = append(roles, recipeKey{role: k.role})
		}
		names[k.role] = append(names[k.role], k.recipe)
	}
	sortRecipes(roles)
	colors := colorsFor(roles)
	var legend []legendEntry
	for _, r := range roles {
		label := strings.Join(names[r.role], ", ")
		if r.role != "" {
			label = r.role + ": " + label
		}
		legend = append(legend, legendEntry{label, []plot.Thumbnailer{swatch(colors[r])}})
	}
	return func(k recipeKey) color.Color { return colors[recipeKey{role: k.role}] }, legend
}

// group is a set of bars side by side, one per recipe.
type group struct {
	label string
	bars  map[recipeKey][]float64 // one value per run
	order []recipeKey
}

// groupedBars lays groups out at x = 0, 1, ... with their bars side by
// side, each labelled with format(its height).
func groupedBars(p *plot.Plot, groups []*group, colorOf func(recipeKey) color.Color, format func(float64) string) {
	addGrid(p)
	var items []barItem
	var ticks plot.ConstantTicks
	most := 2 // a lone bar is no wider than one of two
	for _, grp := range groups {
		most = max(most, len(grp.order))
	}
	slot := 0.8 / float64(most)
	for g, grp := range groups {
		for i, k := range grp.order {
			v := grp.bars[k]
			items = append(items, barItem{
				x:         float64(g) + (float64(i)-float64(len(grp.order)-1)/2)*slot,
				halfWidth: slot * 0.42,
				color:     colorOf(k),
				values:    v,
				label:     format(median(v)),
			})
		}
		ticks = append(ticks, plot.Tick{Value: float64(g), Label: grp.label})
	}
	p.Add(barPlot{items})
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	_, _, ymin, ymax := barPlot{items}.DataRange()
	p.Y.Min, p.Y.Max = ymin, ymax
	p.Y.Tick.Marker = linearTicks{}
}

// heapFigure: live heap per held lease, per backend and recipe.
func heapFigure(runs []*benchRun) (figure, error) {
	rows := func(x backend) int { return len(x.Leases) }
	used := runsWith(runs, rows, "")
	var groups []*group
	var recipes []recipeKey
	leaseCounts := []int{}
	for _, b := range backendNames(used) {
		grp := &group{label: serverOf(used, b), bars: map[recipeKey][]float64{}}
		for _, r := range used {
			for _, x := range r.Backends {
				if x.Backend != b {
					continue
				}
				for _, l := range x.Leases {
					k := recipeKey{l.Recipe, l.Role}
					if _, ok := grp.bars[k]; !ok {
						grp.order = append(grp.order, k)
					}
					grp.bars[k] = append(grp.bars[k], l.HeapBytesPerLease/1024)
					if !slices.Contains(recipes, k) {
						recipes = append(recipes, k)
					}
					if !slices.Contains(leaseCounts, l.Leases) {
						leaseCounts = append(leaseCounts, l.Leases)
					}
				}
			}
		}
		if len(grp.order) > 0 {
			sortRecipes(grp.order)
			groups = append(groups, grp)
		}
	}
	colorOf, legend := byRole(recipes)
	leasesText := "many"
	if len(leaseCounts) == 1 {
		leasesText = thousands(leaseCounts[0])
	}
	title := fmt.Sprintf("Memory per held lease (%s leases held through one client)", leasesText)
	p := newPlot("", "KiB of heap per lease (lower is better)")
	groupedBars(p, groups, colorOf, func(v float64) string { return fmt.Sprintf("%.1f", v) })
	capt := []string{caption(used), "Growth of the live heap after a GC from 0 to all leases held, divided by the leases; bars left to right in legend order."}
	if n := spreadNote(len(used), "Bar: median of the runs"); n != "" {
		capt[1] += " " + n
	}
	return figure{title: title, plot: p, legend: legend, caption: capt, w: 7.5 * vg.Inch, h: 4 * vg.Inch}, nil
}

// rwFigure: read-write lock grants per second per backend, readers and
// writers, and recipe.
func rwFigure(runs []*benchRun) (figure, error) {
	rows := func(x backend) int { return len(x.Shared) }
	used := runsWith(runs, rows, "")
	type cfg struct {
		backend          string
		readers, writers int
	}
	var cfgs []cfg
	var recipes []recipeKey
	values := map[cfg]map[recipeKey][]float64{}
	for _, r := range used {
		for _, x := range r.Backends {
			for _, s := range x.Shared {
				c := cfg{x.Backend, s.Readers, s.Writers}
				if values[c] == nil {
					values[c] = map[recipeKey][]float64{}
					cfgs = append(cfgs, c)
				}
				k := recipeKey{s.Recipe, s.Role}
				values[c][k] = append(values[c][k], s.GrantsPerSec)
				if !slices.Contains(recipes, k) {
					recipes = append(recipes, k)
				}
			}
		}
	}
	colorOf, legend := byRole(recipes)
	sortRecipes(recipes)
	var groups []*group
	for _, c := range cfgs {
		grp := &group{label: fmt.Sprintf("%s\n%d readers, %d writers", displayName(c.backend), c.readers, c.writers), bars: values[c]}
		for _, k := range recipes {
			if _, ok := values[c][k]; ok {
				grp.order = append(grp.order, k)
			}
		}
		groups = append(groups, grp)
	}
	title := "Read-write lock: grants per second (reads + writes)"
	p := newPlot("", "grants per second (higher is better)")
	groupedBars(p, groups, colorOf, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	capt := []string{caption(used), "One name; each client its own connection and session, a reader or a writer throughout."}
	if n := spreadNote(len(used), "Bar: median of the runs"); n != "" {
		capt[1] += " " + n
	}
	return figure{title: title, plot: p, legend: legend, caption: capt, w: 7.5 * vg.Inch, h: 4 * vg.Inch}, nil
}

// semaphoreFigure: semaphore grants per second against clients, one line
// per backend, recipe and limit.
func semaphoreFigure(runs []*benchRun) (figure, error) {
	rows := func(x backend) int { return len(x.Semaphore) }
	used := runsWith(runs, rows, "")
	type key struct {
		backend string
		k       recipeKey
		limit   int
	}
	var keys []key
	values := map[key]map[int][]float64{}
	for _, r := range used {
		for _, x := range r.Backends {
			for _, s := range x.Semaphore {
				k := key{x.Backend, recipeKey{s.Recipe, s.Role}, s.Limit}
				if values[k] == nil {
					values[k] = map[int][]float64{}
					keys = append(keys, k)
				}
				values[k][s.Readers] = append(values[k][s.Readers], s.GrantsPerSec)
			}
		}
	}
	var series []lineSeries
	var limits []int
	for i, k := range keys {
		s := lineSeries{
			label: fmt.Sprintf("%s on %s, limit %d", k.k.recipe, displayName(k.backend), k.limit),
			color: append([]color.Color{blue, green}, spareColors...)[i%(2+len(spareColors))],
		}
		var ns []int
		for n := range values[k] {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		for _, n := range ns {
			s.xs = append(s.xs, float64(n))
			s.ys = append(s.ys, values[k][n])
		}
		series = append(series, s)
		if !slices.Contains(limits, k.limit) {
			limits = append(limits, k.limit)
		}
	}
	title := "Semaphore: grants per second"
	if len(limits) == 1 {
		title = fmt.Sprintf("Semaphore of limit %d: grants per second", limits[0])
	}
	p := newPlot("clients on one semaphore (log scale)", "grants per second (higher is better)")
	legend, err := linePlot(p, series, len(used))
	if err != nil {
		return figure{}, err
	}
	capt := []string{caption(used), "Each client loops acquire → hold → release; as many as the limit hold, the others wait."}
	if n := spreadNote(len(used), "Line: median of the runs"); n != "" {
		capt[1] += " " + n
	}
	return figure{title: title, plot: p, legend: legend, caption: capt, w: 7 * vg.Inch, h: 4.2 * vg.Inch}, nil
}

// writeCharts writes every chart into dir and returns their paths.
func writeCharts(dir string, charts []chart) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var out []string
	for _, c := range charts {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.svg, 0o644); err != nil {
			return out, fmt.Errorf("write chart: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// removeStale removes the charts in dir that an earlier call wrote and
// this one did not, so that dir never mixes the charts of different runs.
func removeStale(dir string, charts []chart) ([]string, error) {
	var removed []string
	for _, pat := range stalePatterns {
		matches, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return removed, err
		}
		for _, m := range matches {
			if slices.ContainsFunc(charts, func(c chart) bool { return c.name == filepath.Base(m) }) {
				continue
			}
			if err := os.Remove(m); err != nil {
				return removed, fmt.Errorf("remove stale chart: %w", err)
			}
			removed = append(removed, m)
		}
	}
	return removed, nil
}

// thousands prints n with commas between groups of three digits.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
