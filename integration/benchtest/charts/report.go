package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A document of the report holds two kinds of marker:
//
//	<!-- bench-report-set NAME FILE... -->
//
// names a set of results files (paths relative to the document's
// directory); every set is stated once, in one of the documents, and all
// of them see it. And
//
//	<!-- bench-report:TABLE [SET,SET...] -->
//	...
//	<!-- /bench-report:TABLE -->
//
// is a generated region: its text is the table TABLE made from the first
// of the sets (default "latest") whose runs have rows for it. The figures
// of a document are checked everywhere outside its regions, or, if it has
// any, only between
//
//	<!-- bench-report-check --> and <!-- /bench-report-check -->
//
// (say, in the one section of a README that reports benchmarks).

const defaultSet = "latest"

var (
	setMarker   = regexp.MustCompile(`(?s)<!-- bench-report-set (\S+)\s(.*?)-->`)
	openMarker  = regexp.MustCompile(`<!-- bench-report:([a-z0-9-]+)(?: ([A-Za-z0-9_,-]+))? -->`)
	closeMarker = regexp.MustCompile(`<!-- /bench-report:([a-z0-9-]+) -->`)
	checkSpan   = regexp.MustCompile(`(?s)<!-- bench-report-check -->.*?<!-- /bench-report-check -->`)
)

// document is one Markdown file of the report.
type document struct {
	path    string
	text    string
	regions []region
}

// region is one generated region: text[start:end] is its content.
type region struct {
	table      string
	sets       []string
	start, end int
	line       int // of the opening marker
}

// reportOptions are -report's inputs.
type reportOptions struct {
	check   bool     // verify only; write nothing
	sources string   // the directory of committed results files
	docs    []string // the Markdown files
}

// runReport regenerates (or, with check, verifies) every region of the
// documents, then checks that every figure outside them has a source. It
// writes what it found to stdout and returns an error wrapping errReport
// if anything is wrong.
func runReport(o reportOptions, stdout io.Writer) error {
	var docs []*document
	for _, p := range o.docs {
		d, err := parseDocument(p)
		if err != nil {
			return err
		}
		docs = append(docs, d)
	}
	sets, err := loadSets(docs)
	if err != nil {
		return err
	}
	g := &gen{}
	var problems []string
	for _, d := range docs {
		text, stale := d.render(g, sets)
		if len(stale) == 0 {
			continue
		}
		if o.check {
			for _, r := range stale {
				problems = append(problems, fmt.Sprintf("%s:%d: generated table %q is out of date (run make bench-report)", d.path, r.line, r.table))
			}
			continue
		}
		if err := os.WriteFile(d.path, []byte(text), 0o644); err != nil {
			return fmt.Errorf("%w: %w", errReport, err)
		}
		fmt.Fprintf(stdout, "rewrote %s\n", d.path)
		d.text = text
		if d.regions, err = findRegions(d.path, text); err != nil {
			return err
		}
	}
	known, err := knownFigures(o.sources, g)
	if err != nil {
		return err
	}
	for _, d := range docs {
		problems = append(problems, d.unsourced(known)...)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		return fmt.Errorf("%w: %d problem(s), listed above", errReport, len(problems))
	}
	return nil
}

func parseDocument(path string) (*document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errReport, err)
	}
	d := &document{path: path, text: string(b)}
	d.regions, err = findRegions(path, d.text)
	return d, err
}

// findRegions finds every generated region of text, in order.
func findRegions(path, text string) ([]region, error) {
	var out []region
	pos := 0
	for {
		m := openMarker.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			break
		}
		name := text[pos+m[2] : pos+m[3]]
		r := region{table: name, sets: []string{defaultSet}, start: pos + m[1], line: lineOf(text, pos+m[0])}
		if m[4] >= 0 {
			r.sets = strings.Split(text[pos+m[4]:pos+m[5]], ",")
		}
		if _, ok := tables[name]; !ok {
			return nil, fmt.Errorf("%w: %s:%d: no table %q (tables: %s)", errReport, path, r.line, name, strings.Join(tableNames(), ", "))
		}
		c := closeMarker.FindStringSubmatchIndex(text[r.start:])
		if c == nil || text[r.start+c[2]:r.start+c[3]] != name {
			return nil, fmt.Errorf("%w: %s:%d: region %q is not closed by <!-- /bench-report:%s -->", errReport, path, r.line, name, name)
		}
		if o := openMarker.FindStringSubmatchIndex(text[r.start : r.start+c[0]]); o != nil {
			inner := text[r.start+o[2] : r.start+o[3]]
			return nil, fmt.Errorf("%w: %s:%d: region %q opens before region %q is closed", errReport, path, lineOf(text, r.start+o[0]), inner, name)
		}
		r.end = r.start + c[0]
		out = append(out, r)
		pos = r.start + c[1]
	}
	if c := closeMarker.FindStringIndex(text[pos:]); c != nil {
		return nil, fmt.Errorf("%w: %s:%d: a closing marker without its opening one", errReport, path, lineOf(text, pos+c[0]))
	}
	return out, nil
}

func tableNames() []string {
	var out []string
	for n := range tables {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// loadSets reads every set the documents name, each file once.
func loadSets(docs []*document) (map[string][]*reportRun, error) {
	sets := map[string][]*reportRun{}
	where := map[string]string{}
	files := map[string]*reportRun{}
	for _, d := range docs {
		for _, m := range setMarker.FindAllStringSubmatchIndex(d.text, -1) {
			name := d.text[m[2]:m[3]]
			at := fmt.Sprintf("%s:%d", d.path, lineOf(d.text, m[0]))
			if prev, ok := where[name]; ok {
				return nil, fmt.Errorf("%w: %s: set %q is stated again (first at %s); state each set once", errReport, at, name, prev)
			}
			where[name] = at
			paths := strings.Fields(d.text[m[4]:m[5]])
			if len(paths) == 0 {
				return nil, fmt.Errorf("%w: %s: set %q names no file", errReport, at, name)
			}
			for _, file := range paths {
				p := file
				if !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(d.path), file)
				}
				r, ok := files[p]
				if !ok {
					var err error
					if r, err = loadReportRun(p); err != nil {
						return nil, fmt.Errorf("%w (set %q at %s)", err, name, at)
					}
					r.name = file
					files[p] = r
				}
				sets[name] = append(sets[name], r)
			}
		}
	}
	for _, d := range docs {
		for _, r := range d.regions {
			for _, s := range r.sets {
				if _, ok := sets[s]; !ok {
					return nil, fmt.Errorf("%w: %s:%d: region %q uses set %q, which no document states (<!-- bench-report-set %s FILE... -->)", errReport, d.path, r.line, r.table, s, s)
				}
			}
		}
	}
	return sets, nil
}

// render returns the document with every region made again, and the
// regions whose text that changed.
func (d *document) render(g *gen, sets map[string][]*reportRun) (string, []region) {
	var sb strings.Builder
	var stale []region
	pos := 0
	for _, r := range d.regions {
		sb.WriteString(d.text[pos:r.start])
		body := ""
		for _, s := range r.sets {
			if md, ok := tables[r.table](g, sets[s]); ok {
				body = md
				break
			}
		}
		if body == "" {
			body = fmt.Sprintf("No run of the set %s has rows for this table yet.\n", strings.Join(r.sets, " or "))
		}
		if "\n\n"+body != d.text[r.start:r.end] {
			stale = append(stale, r)
		}
		sb.WriteString("\n\n" + body)
		pos = r.end
	}
	sb.WriteString(d.text[pos:])
	return sb.String(), stale
}

// unsourced returns a line for every figure outside the regions and the
// markers that no committed results file gives.
func (d *document) unsourced(k *known) []string {
	var out []string
	text := []byte(d.text)
	// Blank out what is exempt, keeping the line breaks.
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if text[i] != '\n' {
				text[i] = ' '
			}
		}
	}
	if spans := checkSpan.FindAllIndex(text, -1); spans != nil {
		pos := 0
		for _, m := range spans {
			blank(pos, m[0])
			pos = m[1]
		}
		blank(pos, len(text))
	}
	for _, r := range d.regions {
		blank(r.start, r.end)
	}
	for _, m := range regexp.MustCompile(`(?s)<!--.*?-->`).FindAllIndex(text, -1) {
		blank(m[0], m[1])
	}
	for i, line := range bytes.Split(text, []byte("\n")) {
		for _, f := range figuresIn(string(line)) {
			if !k.sourced(f) {
				out = append(out, fmt.Sprintf("%s:%d: figure %q has no source: it is in no committed results file and no generated table", d.path, i+1, f.text))
			}
		}
	}
	return out
}
