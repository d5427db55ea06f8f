package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// listFlag collects a repeated string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, "; ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// defaultStages is the order "make test" runs them in.
var defaultStages = []string{"deps", "vet", "unit", "examples", "process", "containers", "fuzz"}

func cmdReport(args []string, w io.Writer) (int, error) {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	dir := fs.String("dir", "", "results directory")
	stages := fs.String("stages", strings.Join(defaultStages, ","), "stages, in the order to show them")
	var leftOut listFlag
	fs.Var(&leftOut, "left-out", "something the run was asked to leave out (repeatable)")
	fs.Parse(args)
	if *dir == "" {
		return 2, errors.New("report: need -dir")
	}
	steps, err := readSteps(*dir)
	if err != nil {
		return 2, err
	}
	s, err := summarize(*dir, steps, strings.Split(*stages, ","))
	if err != nil {
		return 2, err
	}
	s.leftOut = leftOut
	s.print(w)
	if s.ok() {
		return 0, nil
	}
	return 1, nil
}

// row counts the tests of one stage and backend.
type row struct {
	stage, backend                 string
	tests, passed, failed, skipped int
}

// skipGroup is every skip with one reason in one stage.
type skipGroup struct {
	stage, reason string
	requested     bool
	tests         []string // "pkg Test/sub"
}

type stageTime struct {
	name    string
	seconds float64
	steps   int
	failed  int // steps that exited non-zero
}

type summary struct {
	stages   []stageTime
	rows     []*row
	skips    []*skipGroup
	failures []string // "stage pkg Test: why"
	pkgFails []string
	leftOut  []string
	retried  []string // "stage command: why", steps run again (step.Retried)
}

func summarize(dir string, steps []step, order []string) (*summary, error) {
	s := &summary{}
	byStage := map[string]*stageTime{}
	for _, name := range order {
		if name == "" {
			continue
		}
		byStage[name] = &stageTime{name: name}
	}
	rows := map[[2]string]*row{}
	skips := map[[2]string]*skipGroup{}
	for _, st := range steps {
		t := byStage[st.Stage]
		if t == nil {
			t = &stageTime{name: st.Stage}
			byStage[st.Stage] = t
			order = append(order, st.Stage)
		}
		t.seconds += st.Seconds
		if st.Retried != "" {
			s.retried = append(s.retried, fmt.Sprintf("%s: %s: %s", st.Stage, strings.Join(st.Command, " "), st.Retried))
			continue
		}
		t.steps++
		if st.Exit != 0 {
			t.failed++
		}
		if st.Events == "" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, st.Events))
		if err != nil {
			return nil, err
		}
		res := newResults()
		err = res.read(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", st.Events, err)
		}
		for _, o := range res.outcomes() {
			backend := backendUnit
			if st.Provider != "" {
				backend = backendOf(o.t.pkg, o.t.name)
			}
			k := [2]string{st.Stage, backend}
			r := rows[k]
			if r == nil {
				r = &row{stage: st.Stage, backend: backend}
				rows[k] = r
			}
			r.tests++
			id := shortPkg(o.t.pkg) + " " + o.t.name
			switch o.status {
			case "pass":
				r.passed++
			case "fail":
				r.failed++
				why := ""
				if o.reason != "" {
					why = ": " + o.reason
				}
				s.failures = append(s.failures, fmt.Sprintf("%s: %s%s", st.Stage, id, why))
			case "skip":
				r.skipped++
				sk := [2]string{st.Stage, o.reason}
				g := skips[sk]
				if g == nil {
					g = &skipGroup{stage: st.Stage, reason: o.reason, requested: requested(o.reason, st.Env)}
					skips[sk] = g
				}
				g.tests = append(g.tests, id)
			}
		}
		for _, p := range res.packageFailures() {
			s.pkgFails = append(s.pkgFails, fmt.Sprintf("%s: %s failed outside its tests:\n%s", st.Stage, shortPkg(p.name), indent(tail(p.output, 15))))
		}
	}
	seen := map[string]bool{}
	for _, name := range order {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		s.stages = append(s.stages, *byStage[name])
	}
	stageIndex := map[string]int{}
	for i, st := range s.stages {
		stageIndex[st.name] = i
	}
	for _, r := range rows {
		s.rows = append(s.rows, r)
	}
	backendRank := map[string]int{backendUnit: 0, backendEtcd: 1, backendZK: 2, backendNone: 3}
	sort.Slice(s.rows, func(i, j int) bool {
		a, b := s.rows[i], s.rows[j]
		if a.stage != b.stage {
			return stageIndex[a.stage] < stageIndex[b.stage]
		}
		return backendRank[a.backend] < backendRank[b.backend]
	})
	for _, g := range skips {
		s.skips = append(s.skips, g)
	}
	sort.Slice(s.skips, func(i, j int) bool {
		a, b := s.skips[i], s.skips[j]
		if a.requested != b.requested {
			return !a.requested // unrequested first
		}
		if a.stage != b.stage {
			return stageIndex[a.stage] < stageIndex[b.stage]
		}
		return a.reason < b.reason
	})
	return s, nil
}

func (s *summary) unrequested() int {
	n := 0
	for _, g := range s.skips {
		if !g.requested {
			n += len(g.tests)
		}
	}
	return n
}

func (s *summary) failedSteps() int {
	n := 0
	for _, st := range s.stages {
		n += st.failed
	}
	return n
}

func (s *summary) ran() bool {
	for _, st := range s.stages {
		if st.steps > 0 {
			return true
		}
	}
	return false
}

func (s *summary) ok() bool {
	return s.ran() && len(s.failures) == 0 && len(s.pkgFails) == 0 && s.unrequested() == 0 && s.failedSteps() == 0
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "\n======== fencelock test summary ========\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tstatus\twall time\t")
	total := 0.0
	for _, st := range s.stages {
		status := "ok"
		switch {
		case st.steps == 0:
			status = "not run"
		case st.failed > 0:
			status = "FAILED"
		}
		wall := "-"
		if st.steps > 0 {
			wall = duration(st.seconds)
		}
		total += st.seconds
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", st.name, status, wall)
	}
	fmt.Fprintf(tw, "total\t\t%s\t\n", duration(total))
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage/provider\tbackend\t tests\tpassed\tfailed\tskipped\t")
	var sum row
	for _, r := range s.rows {
		fmt.Fprintf(tw, "%s\t%s\t%6d\t%6d\t%6d\t%7d\t\n", r.stage, r.backend, r.tests, r.passed, r.failed, r.skipped)
		sum.tests += r.tests
		sum.passed += r.passed
		sum.failed += r.failed
		sum.skipped += r.skipped
	}
	fmt.Fprintf(tw, "all\t\t%6d\t%6d\t%6d\t%7d\t\n", sum.tests, sum.passed, sum.failed, sum.skipped)
	tw.Flush()
	fmt.Fprintln(w, "(tests: leaf tests and subtests, plus parents that failed or skipped by themselves)")

	if len(s.skips) > 0 {
		fmt.Fprintln(w, "\nskipped:")
		for _, g := range s.skips {
			label := "asked for"
			if !g.requested {
				label = "NOT ASKED FOR"
			}
			fmt.Fprintf(w, "  %4d  %-13s  %s: %s\n", len(g.tests), label, g.stage, g.reason)
			n := len(g.tests)
			if g.requested && n > 3 {
				n = 3
			}
			for _, t := range g.tests[:n] {
				fmt.Fprintf(w, "              %s\n", t)
			}
			if n < len(g.tests) {
				fmt.Fprintf(w, "              ... and %d more\n", len(g.tests)-n)
			}
		}
	}
	if len(s.leftOut) > 0 {
		fmt.Fprintln(w, "\nleft out, as asked:")
		for _, l := range s.leftOut {
			fmt.Fprintf(w, "  - %s\n", l)
		}
	}
	if len(s.retried) > 0 {
		fmt.Fprintln(w, "\nrun again once, after a failure that only a known toolchain defect explains (not counted; the run again is):")
		for _, r := range s.retried {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
	if len(s.failures) > 0 {
		fmt.Fprintln(w, "\nfailed tests:")
		for _, f := range s.failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if len(s.pkgFails) > 0 {
		fmt.Fprintln(w, "\nfailed packages:")
		for _, f := range s.pkgFails {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	fmt.Fprintln(w)
	if s.ok() {
		fmt.Fprintln(w, "RESULT: PASS")
		return
	}
	var why []string
	if !s.ran() {
		why = append(why, "nothing ran")
	}
	if n := s.failedSteps(); n > 0 {
		why = append(why, fmt.Sprintf("%d failed step(s)", n))
	}
	if n := len(s.failures); n > 0 {
		why = append(why, fmt.Sprintf("%d failed test(s)", n))
	}
	if n := len(s.pkgFails); n > 0 {
		why = append(why, fmt.Sprintf("%d package(s) failed outside their tests", n))
	}
	if n := s.unrequested(); n > 0 {
		why = append(why, fmt.Sprintf("%d skip(s) nobody asked for", n))
	}
	fmt.Fprintf(w, "RESULT: FAIL (%s)\n", strings.Join(why, ", "))
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("      ")
		b.WriteString(strings.TrimRight(l, "\n"))
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
