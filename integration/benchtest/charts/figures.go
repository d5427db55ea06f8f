package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// proseFigure is a measured figure found in prose: a ratio or a number with a
// unit.
type proseFigure struct {
	text     string  // as written, unit included
	value    float64 // the number
	decimals int
	unit     string // "×", "%" or another unit
}

// figurePattern finds a number, or a range of two, before a unit. The
// number must not continue a word ("p99 ms" is no figure).
var figurePattern = regexp.MustCompile(`(?:^|[^\w.])([−-]?\d[\d,]*(?:\.\d+)?)(?:\s?[–-]\s?([−-]?\d[\d,]*(?:\.\d+)?))?(\s?×|\s?%|\s?(?:ms|µs)\b|\s?(?:B|bytes|KiB|MiB)\b|\s?[A-Za-z]*/s\b)`)

// figuresIn returns every figure of line, both ends of a range.
func figuresIn(line string) []proseFigure {
	var out []proseFigure
	for _, m := range figurePattern.FindAllStringSubmatch(line, -1) {
		unit := strings.TrimSpace(m[3])
		switch {
		case unit == "×" || unit == "%":
		case strings.HasSuffix(unit, "/s"):
			unit = "/s"
		}
		for _, n := range []string{m[1], m[2]} {
			if n == "" {
				continue
			}
			f, ok := parseFigure(n)
			if !ok {
				continue
			}
			f.text, f.unit = n+m[3], unit
			out = append(out, f)
		}
	}
	return out
}

func parseFigure(s string) (proseFigure, bool) {
	s = strings.ReplaceAll(strings.ReplaceAll(s, ",", ""), "−", "-")
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return proseFigure{}, false
	}
	d := 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		d = len(s) - i - 1
	}
	return proseFigure{value: v, decimals: d}, true
}

// known holds every figure a committed results file gives: ratios apart
// from other figures, so that a ratio in prose must match a ratio.
type known struct {
	ratios []float64
	values []float64
}

// errNoSources is returned when the sources directory has no JSON.
var errNoSources = errors.New("no results files")

// ratioKeys are the JSON fields whose numbers are ratios.
var ratioKeys = []string{"ratio", "median", "min", "max", "per_window", "ci95_low", "ci95_high"}

var numberInText = regexp.MustCompile(`[−-]?\d[\d,]*(?:\.\d+)?(×)?`)

// knownFigures collects the figures of every JSON file in dir, those the
// tables compute from each of them, and those g recorded.
func knownFigures(dir string, g *gen) (*known, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errReport, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: %w in %s: nothing to check the figures against", errReport, errNoSources, dir)
	}
	k := &known{ratios: slices.Clone(g.ratios), values: slices.Clone(g.values)}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errReport, err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errReport, p, err)
		}
		k.walk("", v)
		// What the tables compute from this run alone.
		if r, err := loadReportRun(p); err == nil {
			one := &gen{}
			for _, name := range tableNames() {
				tables[name](one, []*reportRun{r})
			}
			k.ratios = append(k.ratios, one.ratios...)
			k.values = append(k.values, one.values...)
		}
	}
	return k, nil
}

func (k *known) walk(key string, v any) {
	switch x := v.(type) {
	case float64:
		k.values = append(k.values, x)
		if slices.Contains(ratioKeys, key) {
			k.ratios = append(k.ratios, x)
		}
	case string:
		for _, m := range numberInText.FindAllStringSubmatch(x, -1) {
			f, ok := parseFigure(strings.TrimSuffix(m[0], "×"))
			if !ok {
				continue
			}
			k.values = append(k.values, f.value)
			if m[1] != "" {
				k.ratios = append(k.ratios, f.value)
			}
		}
	case []any:
		for _, e := range x {
			k.walk(key, e)
		}
	case map[string]any:
		for kk, e := range x {
			k.walk(kk, e)
		}
	}
}

// sourced reports whether some known proseFigure, rounded as f is, gives f.
// A percentage may also be a ratio's distance from 1.
func (k *known) sourced(f proseFigure) bool {
	match := func(v float64) bool { return math.Abs(round(v, f.decimals)-f.value) < 1e-9 }
	switch f.unit {
	case "×":
		return slices.ContainsFunc(k.ratios, match)
	case "%":
		return slices.ContainsFunc(k.values, match) ||
			slices.ContainsFunc(k.ratios, func(r float64) bool { return match(100 * (r - 1)) })
	}
	return slices.ContainsFunc(k.values, match)
}
