package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// svgTexts parses an SVG file as XML and returns the text of its <text>
// elements; it fails the test if the file is not a well-formed SVG
// document with a size.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", path, err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	var inText, sawRoot bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", path, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if !sawRoot {
				sawRoot = true
				if el.Name.Local != "svg" {
					t.Fatalf("%s: root element <%s>; want <svg>", path, el.Name.Local)
				}
				for _, want := range []string{"width", "height", "viewBox"} {
					if !slices.ContainsFunc(el.Attr, func(a xml.Attr) bool { return a.Name.Local == want && a.Value != "" }) {
						t.Errorf("%s: <svg> has no %s", path, want)
					}
				}
			}
			inText = el.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(el))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if !sawRoot {
		t.Fatalf("%s: no root element", path)
	}
	return texts
}

// charts runs the command on the testdata files into a new directory and
// returns the directory and what it printed.
func charts(t *testing.T, files ...string) (dir, stdout string) {
	t.Helper()
	dir = t.TempDir()
	args := []string{"-out", dir}
	for _, f := range files {
		args = append(args, filepath.Join("testdata", f))
	}
	var out, errOut bytes.Buffer
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("run(%q) = %v; want nil", args, err)
	}
	return dir, out.String()
}

func TestCharts(t *testing.T) {
	all := []string{"grants-etcd.svg", "grants-zookeeper.svg", "handoff-etcd.svg", "handoff-zookeeper.svg", "heap-per-lease.svg", "rwlock.svg", "semaphore.svg"}
	tests := []struct {
		name  string
		files []string
		want  []string // the files written, sorted
		// texts each chart must show, and must not show.
		texts, notTexts map[string][]string
	}{
		{
			name:  "one run",
			files: []string{"run-a.json"},
			want:  all,
			texts: map[string][]string{
				"grants-etcd.svg": {
					"Contended lock on etcd 3.6.16, 3 members: grants per second",
					"etcdlock (fencelock)", "concurrency.Mutex (reference)", "watch-the-holder (naive herd)",
					"clients on one lock (log scale)", "grants per second (higher is better)",
					"Run of 2026-11-20 09:30 UTC on Test CPU 3000, 4 CPUs,", "2", "8",
				},
				"grants-zookeeper.svg": {"Contended lock on ZooKeeper 3.8.0, 3 members: grants per second", "zklock (fencelock)", "zk.Lock (reference)"},
				"handoff-etcd.svg": {
					"Contended lock on etcd 3.6.16, 3 members: handoff latency", "etcdlock (fencelock)", "concurrency.Mutex (reference)",
					"box: p25–p75, line: p50", "whiskers: p10–p90", "cross: p99", "2 clients", "8 clients", "handoff, ms (log scale; lower is better)",
				},
				"heap-per-lease.svg": {
					"Memory per held lease (1,000 leases held through one client)", "fencelock: etcdlock, zklock", "reference: concurrency.Mutex, zk.Lock",
					"etcd 3.6.16, 3 members", "ZooKeeper 3.8.0, 3 members", "0.6", "0.8", "KiB of heap per lease (lower is better)",
				},
				"rwlock.svg":    {"fencelock: etcdlock, zklock", "reference: recipes.RWMutex", "16 readers, 2 writers", "240", "137", "659"},
				"semaphore.svg": {"Semaphore of limit 4: grants per second", "etcdlock on etcd, limit 4", "zklock on ZooKeeper, limit 4", "6", "16"},
			},
			notTexts: map[string][]string{
				"handoff-etcd.svg": {"dot: p50"},
				"grants-etcd.svg":  {"zklock (fencelock)", "Contended lock on etcd 3.6.16, 3 members: grants per second (1 ms hold)"},
			},
		},
		{
			name:  "rows of three holds",
			files: []string{"holds.json"},
			want:  []string{"grants-etcd.svg", "handoff-etcd.svg"},
			texts: map[string][]string{
				"grants-etcd.svg":  {"Contended lock on etcd 3.6.16, 3 members: grants per second (1 ms hold)", "loops acquire → hold 1 ms → release on the one lock."},
				"handoff-etcd.svg": {"Contended lock on etcd 3.6.16, 3 members: handoff latency (1 ms hold)"},
			},
		},
		{
			// The run without a hold has no 1 ms rows: left out, not mixed in.
			name:  "a run with holds and one without",
			files: []string{"holds.json", "run-a.json"},
			want:  all,
			texts: map[string][]string{
				"grants-etcd.svg":      {"grants per second (1 ms hold)", "Run of 2026-11-28 10:00 UTC on Test CPU 3000"},
				"grants-zookeeper.svg": {"Run of 2026-11-20 09:30 UTC", "an empty critical section"},
				"heap-per-lease.svg":   {"Run of 2026-11-20 09:30 UTC"},
			},
			notTexts: map[string][]string{
				"grants-zookeeper.svg": {"Contended lock on ZooKeeper 3.8.0, 3 members: grants per second (1 ms hold)"},
			},
		},
		{
			name:  "two runs",
			files: []string{"run-a.json", "run-b.json"},
			want:  all,
			texts: map[string][]string{
				"grants-etcd.svg":    {"etcdlock (fencelock)", "2 runs, 2026-11-20 09:30 UTC to 2026-11-22 18:45 UTC on Test CPU 3000, 4 CPUs,", "Line: median of the runs; one mark per run."},
				"handoff-etcd.svg":   {"box: p25–p75, line: p50"},
				"heap-per-lease.svg": {"Bar: median of the runs; one mark per run."},
			},
		},
		{
			name:  "p50 and p99 only, no read-write or semaphore rows",
			files: []string{"p50-p99-only.json"},
			want:  []string{"grants-etcd.svg", "grants-zookeeper.svg", "handoff-etcd.svg", "handoff-zookeeper.svg", "heap-per-lease.svg"},
			texts: map[string][]string{
				"handoff-zookeeper.svg": {"zklock (fencelock)", "zk.Lock (reference)", "dot: p50", "cross: p99", "Run of 2026-11-19 12:00 UTC", "Hand-made test figures."},
			},
			notTexts: map[string][]string{
				"handoff-zookeeper.svg": {"box: p25–p75, line: p50", "whiskers: p10–p90"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, stdout := charts(t, tt.files...)
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("ReadDir() = %v", err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("files written = %q; want %q", got, tt.want)
			}
			for _, name := range got {
				p := filepath.Join(dir, name)
				if !strings.Contains(stdout, "wrote "+p+"\n") {
					t.Errorf("output %q does not name %s", stdout, p)
				}
				texts := svgTexts(t, p)
				// Captions are wrapped: a phrase may span lines.
				joined := strings.Join(texts, " ")
				for _, want := range tt.texts[name] {
					if !slices.Contains(texts, want) && !strings.Contains(joined, want) {
						t.Errorf("%s: no text %q; texts: %q", name, want, texts)
					}
				}
				for _, not := range tt.notTexts[name] {
					if slices.Contains(texts, not) {
						t.Errorf("%s: has text %q; want none", name, not)
					}
				}
			}
		})
	}
}

// TestContendedView checks which contended rows the grants and handoff
// charts draw: the 1 ms rows of the runs that have them, else the rows of
// results written before the rows had a hold.
func TestContendedView(t *testing.T) {
	tests := []struct {
		files    []string
		wantHold float64
		want     []int // contended rows of etcd per run after the cut
	}{
		{[]string{"holds.json"}, 1, []int{4}},
		{[]string{"run-a.json"}, 0, []int{6}},
		{[]string{"holds.json", "run-a.json"}, 1, []int{4, 0}},
	}
	for _, tt := range tests {
		var paths []string
		for _, f := range tt.files {
			paths = append(paths, filepath.Join("testdata", f))
		}
		runs, err := loadRuns(paths)
		if err != nil {
			t.Fatalf("loadRuns(%q) = %v", tt.files, err)
		}
		view, hold := contendedView(runs, "etcd")
		var got []int
		for _, r := range view {
			for _, b := range r.Backends {
				if b.Backend == "etcd" {
					for _, c := range b.Contended {
						if c.HoldMs != hold {
							t.Errorf("%q: a row held %v ms in the view of hold %v", tt.files, c.HoldMs, hold)
						}
					}
					got = append(got, len(b.Contended))
				}
			}
		}
		if hold != tt.wantHold || !slices.Equal(got, tt.want) {
			t.Errorf("contendedView(%q) = rows %v, hold %v; want %v, %v", tt.files, got, hold, tt.want, tt.wantHold)
		}
		// The runs read are left as they were.
		if n := len(runs[0].Backends[0].Contended); n == 0 || (tt.files[0] == "holds.json" && n != 12) {
			t.Errorf("%q: the first run has %d contended rows after the view; want them all", tt.files, n)
		}
	}
}

// TestChartsDeterministic checks that the same input gives the same bytes,
// so that redrawn charts change in git only when the figures do.
func TestChartsDeterministic(t *testing.T) {
	a, _ := charts(t, "run-a.json", "run-b.json")
	b, _ := charts(t, "run-a.json", "run-b.json")
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatalf("ReadDir() = %v", err)
	}
	for _, e := range entries {
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, err := os.ReadFile(filepath.Join(b, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs on the same input (%v)", e.Name(), err)
		}
	}
}

func TestChartsFontFallback(t *testing.T) {
	dir, _ := charts(t, "run-a.json")
	b, err := os.ReadFile(filepath.Join(dir, "grants-etcd.svg"))
	if err != nil {
		t.Fatalf("ReadFile() = %v", err)
	}
	if !bytes.Contains(b, []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")) {
		t.Errorf("grants-etcd.svg names no fallback fonts")
	}
	if bytes.Contains(b, []byte("font-family:Liberation Sans;")) {
		t.Errorf("grants-etcd.svg still names Liberation Sans alone")
	}
}

// TestChartsRemovesStale checks that charts an input has no rows for do
// not survive from an earlier call, and that other files are left alone.
func TestChartsRemovesStale(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"-out", dir, "testdata/run-a.json"}, &out, io.Discard); err != nil {
		t.Fatalf("run(run-a.json) = %v; want nil", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"-out", dir, "testdata/p50-p99-only.json"}, &out, io.Discard); err != nil {
		t.Fatalf("run(p50-p99-only.json) = %v; want nil", err)
	}
	for _, name := range []string{"rwlock.svg", "semaphore.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Stat(%s) = %v; want it removed", name, err)
		}
		if !strings.Contains(out.String(), "removed "+filepath.Join(dir, name)) {
			t.Errorf("output %q does not say %s was removed", out.String(), name)
		}
	}
	for _, name := range []string{"notes.txt", "grants-etcd.svg", "heap-per-lease.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Stat(%s) = %v; want it kept", name, err)
		}
	}
}

func TestChartsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // in the error
	}{
		{"no -out", []string{"testdata/run-a.json"}, []string{"-out is required"}},
		{"no input", []string{"-out", "OUT"}, []string{"no input"}},
		{"missing file", []string{"-out", "OUT", "testdata/no-such-file.json"}, []string{"no-such-file.json", "no such file"}},
		{"missing second file", []string{"-out", "OUT", "testdata/run-a.json", "testdata/no-such-file.json"}, []string{"no-such-file.json"}},
		{"empty file", []string{"-out", "OUT", "testdata/empty.json"}, []string{"empty.json", "empty file"}},
		{"malformed JSON", []string{"-out", "OUT", "testdata/malformed.json"}, []string{"malformed.json", "not a bench-results JSON file"}},
		{"JSON of another shape", []string{"-out", "OUT", "testdata/other-shape.json"}, []string{"other-shape.json", "not a bench-results JSON file"}},
		{"no backends", []string{"-out", "OUT", "testdata/no-backends.json"}, []string{"no-backends.json", "no backends"}},
		{"no rows", []string{"-out", "OUT", "testdata/no-rows.json"}, []string{"no-rows.json", "no contended, leases, read-write or semaphore rows"}},
		{"negative rate", []string{"-out", "OUT", "testdata/negative-rate.json"}, []string{"negative-rate.json", `etcd contended "etcdlock", 2 clients: grants_per_sec = -5; want a figure ≥ 0`}},
		{"semaphore without clients", []string{"-out", "OUT", "testdata/semaphore-no-clients.json"}, []string{"semaphore-no-clients.json", `zookeeper semaphore "zklock": 0 clients; want > 0`}},
		{"unknown flag", []string{"-size", "9", "-out", "OUT", "testdata/run-a.json"}, []string{"flag provided but not defined: -size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "charts")
			args := slices.Clone(tt.args)
			for i := range args {
				if args[i] == "OUT" {
					args[i] = out
				}
			}
			var stdout bytes.Buffer
			err := run(args, &stdout, io.Discard)
			if err == nil {
				t.Fatalf("run(%q) = nil; want an error", args)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("run(%q) = %v; want an error containing %q", args, err, w)
				}
			}
			// Nothing is written unless every input is good.
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Stat(%s) = %v; want no output directory after a failed run", out, err)
			}
			if stdout.Len() != 0 {
				t.Errorf("run(%q) printed %q; want nothing", args, stdout.String())
			}
		})
	}
}

func TestTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var out []string
		for _, tk := range ts {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"linear 0..600", labels(linearTicks{}.Ticks(0, 600)), []string{"0", "200", "400", "600"}},
		{"linear 0..1", labels(linearTicks{}.Ticks(0, 1)), []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{"linear 0..1000", labels(linearTicks{}.Ticks(0, 1000)), []string{"0", "200", "400", "600", "800", "1000"}},
		{"log 1.07..13", labels(logTicks{}.Ticks(1.07, 13)), []string{"2", "5", "10"}},
		{"log 0.6..1430", labels(logTicks{}.Ticks(0.6, 1430)), []string{"1", "2", "5", "10", "20", "50", "100", "200", "500", "1000"}},
		{"log of a non-positive range", labels(logTicks{}.Ticks(0, 10)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Equal(tt.got, tt.want) {
				t.Errorf("tick labels = %q; want %q", tt.got, tt.want)
			}
		})
	}
}

func TestNiceTop(t *testing.T) {
	tests := []struct{ in, want float64 }{
		{540.75, 600}, {556, 600}, {0.92, 1}, {0.3, 0.3}, {1180, 1200}, {620.6, 700}, {0, 1},
	}
	for _, tt := range tests {
		if got := niceTop(tt.in); got != tt.want {
			t.Errorf("niceTop(%v) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

func TestThousands(t *testing.T) {
	tests := []struct {
		in   int
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {10000, "10,000"}, {1234567, "1,234,567"}, {-2500, "-2,500"}}
	for _, tt := range tests {
		if got := thousands(tt.in); got != tt.want {
			t.Errorf("thousands(%d) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestSpread checks -spread: every run's figure of every target, side by
// side, with the number of runs that met it, counted over the runs that
// have the target; and nothing drawn.
func TestSpread(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-spread", filepath.Join("testdata", "spread-1.json"), filepath.Join("testdata", "spread-2.json")}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("run(%q) = %v; want nil", args, err)
	}
	got := out.String()
	for _, want := range []string{
		"| target | met in | run 1 | run 2 |\n| --- | --- | --- | --- |\n",
		"| contended grants/s with 2 clients at least 1× the reference | 1 of 2 | met: 717 vs 715 = 1.00× | MISSED: 642 vs 685 = 0.94× |\n",
		// Only the first run has it; the '|' in its name stays in its cell.
		`| heap \| per lease | 0 of 1 | MISSED: 577 vs 239 = 2.41× | — |` + "\n",
		"1 = 2026-11-25 05:00 UTC", "2 = 2026-11-25 05:20 UTC",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("-spread output lacks %q; got:\n%s", want, got)
		}
	}
	if err := run([]string{"-spread"}, &out, &errOut); err == nil {
		t.Error("-spread without input files: nil error; want one")
	}
}
