package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// reportDir copies testdata/report to a temporary directory, so that a
// test may rewrite its documents.
func reportDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(filepath.Join("testdata", "report"))
	if err != nil {
		t.Fatalf("ReadDir() = %v", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "report", e.Name()))
		if err != nil {
			t.Fatalf("ReadFile() = %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatalf("WriteFile() = %v", err)
		}
	}
	return dir
}

// emptyRegions returns text with every generated region emptied.
func emptyRegions(t *testing.T, text string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)(<!-- bench-report:[a-z0-9-]+(?: [a-z,]+)? -->).*?(<!-- /bench-report:)`)
	out := re.ReplaceAllString(text, "$1\n$2")
	if out == text {
		t.Fatal("no region emptied")
	}
	return out
}

func report(t *testing.T, dir string, check bool, docs ...string) (string, error) {
	t.Helper()
	args := []string{"-report", "-sources", dir}
	if check {
		args = append(args, "-check")
	}
	for _, d := range docs {
		args = append(args, filepath.Join(dir, d))
	}
	var out bytes.Buffer
	err := run(args, &out, io.Discard)
	return out.String(), err
}

// TestReportRegenerates checks that -report makes every region of the
// fixture from its results again, byte for byte, rewriting nothing else,
// and that a second call changes nothing.
func TestReportRegenerates(t *testing.T) {
	dir := reportDir(t)
	doc := filepath.Join(dir, "doc.md")
	want, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte(emptyRegions(t, string(want))), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := report(t, dir, false, "doc.md")
	if err != nil {
		t.Fatalf("-report = %v; want nil (output %q)", err, out)
	}
	got, _ := os.ReadFile(doc)
	if !bytes.Equal(got, want) {
		t.Errorf("-report wrote:\n%s\nwant testdata/report/doc.md:\n%s", got, want)
	}
	if out, err := report(t, dir, false, "doc.md"); err != nil || out != "" {
		t.Errorf("second -report = %q, %v; want no output and nil", out, err)
	}
	if again, _ := os.ReadFile(doc); !bytes.Equal(again, want) {
		t.Error("a second -report changed the document")
	}
}

// TestReportTables checks the figures of the generated tables: a ratio
// object's median and range where a row has one, the ratio of the
// aggregates where it has none, each hold in its own table, and the
// overheads with their intervals.
func TestReportTables(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "report", "doc.md"))
	if err != nil {
		t.Fatal(err)
	}
	regions := map[string]string{}
	re := regexp.MustCompile(`(?s)<!-- bench-report:([a-z0-9-]+)( [a-z,]+)? -->(.*?)<!-- /bench-report:`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		regions[m[1]+m[2]] = m[3]
	}
	tests := []struct {
		region string
		want   []string
	}{
		// The ratio object's median and range, not 310/217.
		{"contended-1ms", []string{"| etcd | 2 | 310 | 217 | 1.43× (1.31–1.62) | 3.9 vs 6.0 | 6.5 vs 9.5 |"}},
		// No ratio object: 700/600 from the aggregates.
		{"contended-1ms", []string{"| ZooKeeper | 2 | 700 | 600 | 1.17× | 4.0 vs 5.0 | 3.1 vs 3.4 |"}},
		{"contended-10ms", []string{"| etcd | 2 | 80 | 73 | 1.09× (1.02–1.15) |"}},
		// Two runs: the median of 20.00 (aggregates) and 20.1, the range of both.
		{"contended-0ms", []string{"| etcd | 2 | 390 | 20 | 20.05× (18.70–21.90) |", "Figures are the median of the runs"}},
		{"contended-0ms older", []string{"| etcd | 2 | 380 | 19 | 20.00× |", "From `run-old.json`."}},
		{"overheads", []string{"| etcd | metrics | — | 1.004× [0.996–1.012] | 1 of 1 |", "| etcd | tracing | — | 1.021× [1.013–1.029] | 0 of 1 |"}},
		{"uncontended", []string{"| etcd | 2.04 | 1.98 | 1.70 | 1.03× (1.01–1.06) | 1.20× | 2.0 | 490, 430, 400 |"}},
		{"targets", []string{"| uncontended p50 within 5% of the reference | 1 of 2 | MISSED: 2.10 ms vs 1.95 ms = 1.08× | met: 2.04 ms vs 1.98 ms = 1.03× | 1.06× (1.03–1.08) |"}},
		{"summary", []string{"| contended grants/s, 2 clients, 1 ms hold | 1.43× (1.31–1.62) | 1.17× |", "| target lines met in every run | 1 of 2 | 1 of 1 |"}},
		{"scale older,latest", []string{"| etcd | 200 / 1,000 | 2,183 | 2,361 | 0.93× (0.88–0.99) | 2.3 vs 2.3 |", "| etcd | 100,000 | 312 | 256 | 1.22× |"}},
		{"lockdelay", []string{"| etcd | 2 | 420 / 395 | 0.94× (0.90–0.97) |"}},
		// The mixed fleet's ratio to the slower recipe, not to the reference.
		{"interop", []string{"| etcd | 8 | 80 | 440 | 82 | 1.02× (0.99–1.05) |"}},
		// AcquireAll's ratio object; without one, 250/100 from the aggregates.
		{"multi", []string{"| etcd | 8 | 2–4 of 6 | 300 | 200 | 1.50× (1.25–1.75) | 20.0 / 30.0 | 60.0 / 90.0 | 5.0 / 12.0 |",
			"| ZooKeeper | 1 | 3 of 3 | 250 | 100 | 2.50× | 2.0 / 6.0 | 3.0 / 8.0 | 4.0 / 12.0 |"}},
		{"tls", []string{"| etcd | etcdlock, TLS+auth | 2.30 | 400 | 1.15× (1.11–1.19) |"}},
		{"failover", []string{"No run of the set latest has rows for this table yet."}},
	}
	for _, tt := range tests {
		got, ok := regions[tt.region]
		if !ok {
			t.Errorf("doc.md has no region %q", tt.region)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("region %q lacks %q; got:\n%s", tt.region, w, got)
			}
		}
	}
}

// TestReportCheck checks -check: it passes on an up-to-date document,
// fails on a stale one, and writes nothing either way.
func TestReportCheck(t *testing.T) {
	dir := reportDir(t)
	if out, err := report(t, dir, true, "doc.md"); err != nil {
		t.Fatalf("-report -check on an up-to-date document = %v (%q); want nil", err, out)
	}
	doc := filepath.Join(dir, "doc.md")
	b, _ := os.ReadFile(doc)
	stale := strings.Replace(string(b), "| 310 | 217 |", "| 311 | 217 |", 1)
	if stale == string(b) {
		t.Fatal("fixture has no row to make stale")
	}
	if err := os.WriteFile(doc, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := report(t, dir, true, "doc.md")
	if !errors.Is(err, errReport) {
		t.Errorf("-report -check on a stale document = %v; want errReport", err)
	}
	if !strings.Contains(out, `doc.md:57: generated table "contended-1ms" is out of date`) || strings.Count(out, "out of date") != 1 {
		t.Errorf("-report -check output %q does not say the tables are out of date", out)
	}
	if after, _ := os.ReadFile(doc); string(after) != stale {
		t.Error("-report -check rewrote the document")
	}
}

// TestReportUnsourced checks that a figure outside the regions that no
// results file gives fails the report, named with its file and line, and
// that the sourced figures next to it pass.
func TestReportUnsourced(t *testing.T) {
	for _, check := range []bool{false, true} {
		dir := reportDir(t)
		out, err := report(t, dir, check, "unsourced.md")
		if !errors.Is(err, errReport) {
			t.Errorf("-report (check %v) = %v; want errReport", check, err)
		}
		want := filepath.Join(dir, "unsourced.md") + `:15: figure "7.77×" has no source`
		if !strings.Contains(out, want) {
			t.Errorf("-report (check %v) output %q lacks %q", check, out, want)
		}
		if n := strings.Count(out, "has no source"); n != 1 {
			t.Errorf("-report (check %v) flagged %d figures; want 1 (only 7.77×): %q", check, n, out)
		}
	}
}

// TestReportCheckSpan checks that a document with a checked span has its
// figures checked there only: span.md's figures before and after it are
// not flagged. Its region uses the set unsourced.md states.
func TestReportCheckSpan(t *testing.T) {
	dir := reportDir(t)
	out, err := report(t, dir, true, "unsourced.md", "span.md")
	if !errors.Is(err, errReport) {
		t.Errorf("-report -check = %v; want errReport", err)
	}
	want := filepath.Join(dir, "span.md") + `:17: figure "8.88×" has no source`
	if !strings.Contains(out, want) {
		t.Errorf("-report -check output %q lacks %q", out, want)
	}
	if n := strings.Count(out, "span.md:"); n != 1 {
		t.Errorf("-report -check flagged %d figures of span.md; want 1: %q", n, out)
	}
}

func TestReportErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"unknown table", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report:nosuch -->\n<!-- /bench-report:nosuch -->\n", `doc.md:2: no table "nosuch"`},
		{"unclosed", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report:heap -->\n", `doc.md:2: region "heap" is not closed`},
		{"closed by another", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report:heap -->\n<!-- /bench-report:tls -->\n", `region "heap" is not closed`},
		{"nested", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report:heap -->\n<!-- bench-report:tls -->\n<!-- /bench-report:heap -->\n", `doc.md:3: region "tls" opens before region "heap" is closed`},
		{"close without open", "<!-- /bench-report:heap -->\n", "doc.md:1: a closing marker without its opening one"},
		{"unknown set", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report:heap other -->\n<!-- /bench-report:heap -->\n", `doc.md:2: region "heap" uses set "other"`},
		{"set twice", "<!-- bench-report-set latest run-new.json -->\n<!-- bench-report-set latest run-old.json -->\n", `doc.md:2: set "latest" is stated again (first at`},
		{"missing file", "<!-- bench-report-set latest no-such.json -->\n", "no-such.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := reportDir(t)
			if err := os.WriteFile(filepath.Join(dir, "doc.md"), []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := report(t, dir, false, "doc.md")
			if !errors.Is(err, errReport) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("-report = %v; want errReport containing %q", err, tt.want)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "doc.md")); string(b) != tt.doc {
				t.Error("-report rewrote a document it could not read")
			}
		})
	}
	if err := run([]string{"-report"}, io.Discard, io.Discard); err == nil {
		t.Error("-report without documents = nil; want an error")
	}
	if err := run([]string{"-check", "testdata/run-a.json"}, io.Discard, io.Discard); err == nil {
		t.Error("-check without -report = nil; want an error")
	}
	empty := t.TempDir()
	dir := reportDir(t)
	if err := run([]string{"-report", "-sources", empty, filepath.Join(dir, "doc.md")}, io.Discard, io.Discard); !errors.Is(err, errNoSources) {
		t.Errorf("-report with no results files to check against = %v; want errNoSources", err)
	}
}

func TestFiguresIn(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"1.43× the Mutex's 217 grants/s", []string{"1.43×", "217 grants/s"}},
		{"(1.31–1.62× over the windows)", []string{"1.31×", "1.62×"}},
		{"p99 ms and p50 ms are no figures", nil},
		{"1,441 grants/s, 327 bytes, 0.6 KiB, −0.9%, 2.5 ms", []string{"1,441 grants/s", "327 bytes", "0.6 KiB", "−0.9%", "2.5 ms"}},
		{"run-2026-11-26-full-10.json and 20 clients", nil},
	}
	for _, tt := range tests {
		var got []string
		for _, f := range figuresIn(tt.line) {
			got = append(got, f.text)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("figuresIn(%q) = %q; want %q", tt.line, got, tt.want)
		}
	}
}

func TestKnownSourced(t *testing.T) {
	k := &known{ratios: []float64{1.2649, 1.004}, values: []float64{217.4, 1441}}
	tests := []struct {
		text string
		want bool
	}{
		{"1.26×", true},
		{"1.3×", true},
		{"1.27×", false},
		{"217 grants/s", true},
		{"217.4 grants/s", true},
		{"218 grants/s", false},
		{"1,441 grants/s", true},
		{"0.4%", true},  // the ratio 1.004 as a cost
		{"217×", false}, // a value is no ratio
	}
	for _, tt := range tests {
		fs := figuresIn(tt.text)
		if len(fs) != 1 {
			t.Fatalf("figuresIn(%q) = %v; want one figure", tt.text, fs)
		}
		if got := k.sourced(fs[0]); got != tt.want {
			t.Errorf("sourced(%q) = %v; want %v", tt.text, got, tt.want)
		}
	}
}
