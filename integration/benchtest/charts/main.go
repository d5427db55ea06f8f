// Command charts draws the results of the side-by-side benchmarks (the JSON
// that TestBench in package benchtest writes) as SVG charts:
//
//   - grants-<backend>.svg: contended grants per second against the number
//     of clients, one line per recipe;
//   - handoff-<backend>.svg: the handoff latency per recipe and number of
//     clients, as a distribution (quartiles, p10–p90 and p99 where the JSON
//     has them, p50 and p99 otherwise);
//   - heap-per-lease.svg: live heap per held lease, per recipe and backend;
//   - rwlock.svg and semaphore.svg: grants per second of the read-write lock
//     and semaphore rows, when the results have them.
//
// The grants and handoff charts draw the contended rows whose clients hold
// each grant 1 ms, those of TestBench's default table; results written
// before the rows had a hold are drawn from their rows with an empty
// critical section, and a run without 1 ms rows is left out of a chart
// that another run has them for, so that no chart mixes holds.
//
// Usage, from the integration directory:
//
//	go run ./benchtest/charts -out DIR results.json [more.json ...]
//
// or "make charts" from the repository root (see BENCHMARKS.md). With
// -spread it draws nothing and writes instead, as Markdown tables, every
// target line of every run side by side, with the number of runs that met
// it ("make bench-spread"). With -report it draws nothing either: it
// makes the generated tables of the Markdown files given again from the
// results files those files name, and fails if a figure outside the
// tables (a ratio, or a number in ms, µs, /s, bytes or %) is in no results
// file of the -sources directory; -check verifies without rewriting
// ("make bench-report", "make bench-report-check"; report.go describes
// the markers). Several
// files are several runs: every run's figure is drawn, so that the spread
// between runs shows, and the lines and bars stand for the median. A chart
// whose rows no input has is not drawn, and a file of that name left in DIR
// by an earlier call is removed, so that DIR holds the charts of one set of
// runs only.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "charts:", err)
		}
		os.Exit(2)
	}
}

// run is the whole command; it returns the first error instead of exiting.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("charts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "the directory to write the SVG files to (created if missing; required unless -spread)")
	spread := fs.Bool("spread", false, "instead of drawing, write the target lines of every run side by side, as Markdown, to standard output")
	report := fs.Bool("report", false, "instead of drawing, regenerate the tables of the Markdown files given and check that every figure outside them has a source")
	check := fs.Bool("check", false, "with -report: rewrite nothing, fail if a table is out of date")
	sources := fs.String("sources", "docs/bench", "with -report: the directory of the committed results files a figure may come from")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: charts -out DIR results.json [more.json ...]\n       charts -spread results.json [more.json ...]\n       charts -report [-check] [-sources DIR] doc.md [more.md ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *report {
		if fs.NArg() == 0 {
			return errors.New("no input: give the Markdown files of the report")
		}
		return runReport(reportOptions{check: *check, sources: *sources, docs: fs.Args()}, stdout)
	}
	if *check {
		return errors.New("-check goes with -report")
	}
	if *out == "" && !*spread {
		return errors.New("-out is required: the directory for the SVG files")
	}
	if fs.NArg() == 0 {
		return errors.New("no input: give one or more bench-results JSON files (as written by TestBench)")
	}
	runs, err := loadRuns(fs.Args())
	if err != nil {
		return err
	}
	if *spread {
		return writeSpread(stdout, runs)
	}
	charts, err := buildCharts(runs)
	if err != nil {
		return err
	}
	written, err := writeCharts(*out, charts)
	if err != nil {
		return err
	}
	for _, name := range written {
		fmt.Fprintf(stdout, "wrote %s\n", name)
	}
	removed, err := removeStale(*out, charts)
	for _, name := range removed {
		fmt.Fprintf(stdout, "removed %s (no rows for it in this input)\n", name)
	}
	return err
}
