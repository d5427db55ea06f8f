package benchtest

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
)

// Every compared row is measured in windows, the row and the one it is
// compared with taking turns (A B, B A, A B, ...), so that a change in the
// machine's load during the run hits both alike; the row's ratio is then
// taken window by window, and its median and spread are what the tables
// print.

// windowRatio is the ratio of a row's figure to the figure of the row it
// is compared with, window by window: A is the row that carries it (the
// fencelock recipe, or the recipe with the feature on), B the other (the
// reference, or the same recipe with the feature off).
type windowRatio struct {
	Metric    string    `json:"metric"` // the JSON field compared
	Better    string    `json:"better"` // "higher" or "lower": which way favours A
	Median    float64   `json:"median"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	PerWindow []float64 `json:"per_window"` // A ÷ B in each window
	Order     []string  `json:"order"`      // "AB" when A ran first in the window, "BA" when B did, "ABBA" for blocks in that order
}

const (
	higher = "higher"
	lower  = "lower"
)

// windowSeq numbers the windows of the run in the order they start, so
// that the order of two rows' windows can be told afterwards.
var windowSeq atomic.Int64

func nextWindow() int64 { return windowSeq.Add(1) }

// pairRatio returns the ratio of figures a to figures b window by window,
// window k of A having started as aSeq[k] and B's as bSeq[k]. A window in
// which either figure is zero (nothing measured) has no ratio; nil when
// no window has one.
func pairRatio(metric, better string, a, b []float64, aSeq, bSeq []int64) *windowRatio {
	r := &windowRatio{Metric: metric, Better: better}
	for k := range min(len(a), len(b), len(aSeq), len(bSeq)) {
		if a[k] == 0 || b[k] == 0 {
			continue
		}
		order := "AB"
		if bSeq[k] < aSeq[k] {
			order = "BA"
		}
		r.PerWindow = append(r.PerWindow, a[k]/b[k])
		r.Order = append(r.Order, order)
	}
	if len(r.PerWindow) == 0 {
		return nil
	}
	r.Median, r.Min, r.Max = median(r.PerWindow), slices.Min(r.PerWindow), slices.Max(r.PerWindow)
	return r
}

// median returns the median of xs (the mean of the middle two for an
// even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread formats a ratio as its median and, for more than one window, its
// range: "1.02× (0.97–1.08)".
func (r *windowRatio) spread() string {
	if r == nil {
		return "-"
	}
	if len(r.PerWindow) == 1 {
		return fmt.Sprintf("%.2f×", r.Median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", r.Median, r.Min, r.Max)
}

// orderOf returns the order in which window k of a round of n rows visits
// its rows: forward in even rounds, backward in odd ones.
func orderOf(round, n int) []int {
	idx := make([]int, n)
	for k := range idx {
		idx[k] = k
		if round%2 == 1 {
			idx[k] = n - 1 - k
		}
	}
	return idx
}

// ---- the confidence interval of an overhead ----

// logRatioCI returns the geometric mean of the ratios rs and its 95%
// confidence interval: a Student t-interval on their logarithms,
// exponentiated. ok is false for fewer than two ratios or one that is not
// positive.
func logRatioCI(rs []float64) (ratio, lo, hi float64, ok bool) {
	n := len(rs)
	if n < 2 {
		return 0, 0, 0, false
	}
	var sum float64
	for _, r := range rs {
		if !(r > 0) || math.IsInf(r, 0) {
			return 0, 0, 0, false
		}
		sum += math.Log(r)
	}
	mean := sum / float64(n)
	var ss float64
	for _, r := range rs {
		d := math.Log(r) - mean
		ss += d * d
	}
	half := tQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return math.Exp(mean), math.Exp(mean - half), math.Exp(mean + half), true
}

// tQuantile975 returns the 97.5th percentile of Student's t distribution
// with df degrees of freedom: exact to three decimals from a table for
// small df, then from its expansion around the normal quantile (error
// below 0.001 for df of 10 and more).
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262}
	if df < 1 {
		return math.Inf(1)
	}
	if df < len(table) {
		return table[df]
	}
	const z = 1.959963984540054
	v := float64(df)
	z3, z5, z7 := z*z*z, math.Pow(z, 5), math.Pow(z, 7)
	return z + (z3+z)/(4*v) + (5*z5+16*z3+3*z)/(96*v*v) + (3*z7+19*z5+17*z3-15*z)/(384*v*v*v)
}

// within1pct reports whether the interval [lo, hi] around ratio lies
// within ±1% of it.
func within1pct(ratio, lo, hi float64) bool {
	return hi <= ratio*1.01 && lo >= ratio*0.99
}

func TestPairRatio(t *testing.T) {
	r := pairRatio("grants_per_sec", higher, []float64{10, 30, 20, 5}, []float64{5, 10, 10, 0}, []int64{1, 4, 5, 7}, []int64{2, 3, 6, 8})
	if r == nil {
		t.Fatal("pairRatio() = nil; want three windows")
	}
	want := &windowRatio{Metric: "grants_per_sec", Better: higher, Median: 2, Min: 2, Max: 3,
		PerWindow: []float64{2, 3, 2}, Order: []string{"AB", "BA", "AB"}}
	if fmt.Sprint(*r) != fmt.Sprint(*want) {
		t.Errorf("pairRatio() = %+v; want %+v", *r, *want)
	}
	if got := r.spread(); got != "2.00× (2.00–3.00)" {
		t.Errorf("spread() = %q; want %q", got, "2.00× (2.00–3.00)")
	}
	if r := pairRatio("p50_ms", lower, []float64{1}, []float64{0}, []int64{1}, []int64{2}); r != nil {
		t.Errorf("pairRatio(no denominator) = %+v; want nil", r)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4 1 3 2) = %v; want 2.5", got)
	}
	if got := orderOf(1, 3); !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("orderOf(1, 3) = %v; want [2 1 0]", got)
	}
}

func TestLogRatioCI(t *testing.T) {
	// The logarithms of 1.1 and 1/1.1 have mean 0 and standard deviation
	// ln(1.1)·√2, so the interval is exp(±12.706·ln(1.1)) for two ratios.
	r, lo, hi, ok := logRatioCI([]float64{1.1, 1 / 1.1})
	wantHalf := 12.706 * math.Log(1.1)
	if !ok || math.Abs(r-1) > 1e-12 || math.Abs(math.Log(hi)-wantHalf) > 1e-9 || math.Abs(math.Log(lo)+wantHalf) > 1e-9 {
		t.Errorf("logRatioCI(1.1, 1/1.1) = %v, [%v, %v], %v; want 1, exp(±%.4f), true", r, lo, hi, ok, wantHalf)
	}
	for _, bad := range [][]float64{nil, {1.2}, {1, 0}, {1, -1}, {1, math.Inf(1)}} {
		if _, _, _, ok := logRatioCI(bad); ok {
			t.Errorf("logRatioCI(%v) ok; want false", bad)
		}
	}
	// Against published quantiles.
	for df, want := range map[int]float64{10: 2.228, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980, 1000: 1.962} {
		if got := tQuantile975(df); math.Abs(got-want) > 0.001 {
			t.Errorf("tQuantile975(%d) = %.4f; want %.3f", df, got, want)
		}
	}
	if !within1pct(1.02, 1.011, 1.029) || within1pct(1.02, 1.005, 1.03) {
		t.Error("within1pct: wrong verdict on [1.011, 1.029] or [1.005, 1.03] around 1.02")
	}
}
