package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// writeSpread writes, as Markdown, how the target lines fared across runs:
// one table per backend, one row per target, saying in how many runs it
// was met and giving every run's figure, in the order of the runs. A
// target that some runs do not have (a measurement they did not make) is
// counted over the runs that have it.
func writeSpread(w io.Writer, runs []*benchRun) error {
	var backends []string
	for _, r := range runs {
		for _, b := range r.Backends {
			if !slices.Contains(backends, b.Backend) {
				backends = append(backends, b.Backend)
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Runs: ")
	for i, r := range runs {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%d = %s (%s)", i+1, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.path)
	}
	sb.WriteString("\n")
	for _, name := range backends {
		// The targets of this backend in the order they first appear.
		var order []string
		figures := map[string][]string{} // target → the figure of each run ("" when absent)
		met := map[string]int{}
		have := map[string]int{}
		for i, r := range runs {
			for _, b := range r.Backends {
				if b.Backend != name {
					continue
				}
				for _, t := range b.Targets {
					if _, ok := figures[t.What]; !ok {
						order = append(order, t.What)
						figures[t.What] = make([]string, len(runs))
					}
					verdict := "MISSED"
					if t.Met {
						verdict = "met"
						met[t.What]++
					}
					have[t.What]++
					figures[t.What][i] = verdict + ": " + t.Figure
				}
			}
		}
		if len(order) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\n%s\n\n| target | met in | %s |\n| --- | --- |%s\n", name, runHeads(len(runs)), strings.Repeat(" --- |", len(runs)))
		for _, what := range order {
			cells := make([]string, len(runs))
			for i, f := range figures[what] {
				cells[i] = escapeCell(f)
				if f == "" {
					cells[i] = "—"
				}
			}
			fmt.Fprintf(&sb, "| %s | %d of %d | %s |\n", escapeCell(what), met[what], have[what], strings.Join(cells, " | "))
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func runHeads(n int) string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("run %d", i+1)
	}
	return strings.Join(h, " | ")
}

// escapeCell keeps a figure inside its table cell.
func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
