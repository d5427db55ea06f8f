package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// sans is the charts' typeface. The SVG names it without embedding it
// (that would add some 400 KB per file); fixFonts adds fallbacks.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// Colours from the Okabe–Ito palette, which stays distinct for the common
// forms of colour blindness.
var (
	blue      = color.RGBA{0x00, 0x72, 0xb2, 0xff}
	orange    = color.RGBA{0xe6, 0x9f, 0x00, 0xff}
	purple    = color.RGBA{0xcc, 0x79, 0xa7, 0xff}
	green     = color.RGBA{0x00, 0x9e, 0x73, 0xff}
	vermilion = color.RGBA{0xd5, 0x5e, 0x00, 0xff}
	sky       = color.RGBA{0x56, 0xb4, 0xe9, 0xff}
	grey      = color.RGBA{0x80, 0x80, 0x80, 0xff}
	ink       = color.RGBA{0x20, 0x20, 0x20, 0xff}
	faint     = color.RGBA{0x55, 0x55, 0x55, 0xff}
	gridGrey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
)

// roleColors gives every role of package benchtest its colour, the same
// in every chart.
var roleColors = map[string]color.Color{
	"fencelock":  blue,
	"reference":  orange,
	"naive herd": purple,
	"floor":      grey,
}

// spareColors colour recipes whose role is unknown or already taken.
var spareColors = []color.Color{green, vermilion, sky, ink}

// translucent returns c at about a third of its opacity, for fills.
func translucent(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	const a = 0x55
	// Premultiplied, as color.RGBA wants.
	return color.RGBA{uint8(r >> 8 * a / 0xff), uint8(g >> 8 * a / 0xff), uint8(b >> 8 * a / 0xff), a}
}

func textStyle(size vg.Length, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(sans, size), Handler: plot.DefaultTextHandler}
}

// newPlot returns a plot with the charts' fonts and a light grid.
// The title is the figure's (figure.svg draws it across the whole width).
func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 10)
		a.Tick.Label.Font = font.From(sans, 9)
		a.Padding = vg.Points(4)
	}
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	return p
}

// addGrid adds horizontal grid lines, under everything added after it.
func addGrid(p *plot.Plot) {
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	g.Horizontal.Color = gridGrey
	g.Horizontal.Width = vg.Points(0.5)
	p.Add(g)
}

// legendEntry is one line of a chart's legend.
type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

// thumb draws a legend thumbnail.
type thumb func(c *draw.Canvas)

func (f thumb) Thumbnail(c *draw.Canvas) { f(c) }

func swatch(col color.Color) thumb {
	return func(c *draw.Canvas) {
		r := c.Rectangle
		inset := (r.Max.Y - r.Min.Y) / 5
		pts := []vg.Point{
			{X: r.Min.X + inset, Y: r.Min.Y + inset}, {X: r.Max.X - inset, Y: r.Min.Y + inset},
			{X: r.Max.X - inset, Y: r.Max.Y - inset}, {X: r.Min.X + inset, Y: r.Max.Y - inset},
		}
		c.FillPolygon(col, pts)
	}
}

func glyphThumb(sty draw.GlyphStyle) thumb {
	return func(c *draw.Canvas) { c.DrawGlyphNoClip(sty, c.Center()) }
}

// figure is a plot with a title above it, the legend beside it and a
// caption below it.
type figure struct {
	title   string
	plot    *plot.Plot
	legend  []legendEntry
	caption []string
	w, h    vg.Length
}

// svg renders the figure.
func (f figure) svg() ([]byte, error) {
	c := vgsvg.New(f.w, f.h)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	pad := vg.Points(8)
	titleSty := textStyle(13, ink)
	titleSty.YAlign = draw.YTop
	dc.FillText(titleSty, vg.Point{X: dc.Min.X + pad, Y: dc.Max.Y - pad}, f.title)
	titleH := titleSty.Height(f.title) + 2*pad

	capSty := textStyle(8, faint)
	var caption []string
	for _, para := range f.caption {
		// 0.9: room for a viewer's wider fallback face.
		caption = append(caption, wrap(capSty, para, (f.w-2*pad)*0.9)...)
	}
	lineH := capSty.Height("Xg") * 1.25
	capH := lineH*vg.Length(len(caption)) + pad
	for i, line := range caption {
		y := dc.Min.Y + pad/2 + lineH*vg.Length(len(caption)-1-i)
		dc.FillText(capSty, vg.Point{X: dc.Min.X + pad, Y: y}, line)
	}

	leg := plot.NewLegend()
	leg.TextStyle = textStyle(9, ink)
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(16)
	leg.Padding = vg.Points(2)
	for _, e := range f.legend {
		leg.Add(e.label, e.thumbs...)
	}
	var legW vg.Length
	if len(f.legend) > 0 {
		// A viewer without Liberation Sans or Arial sets the text in a
		// wider face; the slack keeps the legend inside the image then.
		r := leg.Rectangle(dc)
		legW = (r.Max.X-r.Min.X)*1.15 + 2*pad
	}
	if legW > f.w/2 {
		return nil, fmt.Errorf("legend %.0fpt wide on a %.0fpt chart: labels too long", legW.Points(), f.w.Points())
	}
	f.plot.Draw(draw.Crop(dc, 0, -legW, capH, -titleH))
	if len(f.legend) > 0 {
		leg.Draw(draw.Crop(dc, f.w-legW+pad/2, -pad/2, capH, -titleH))
	}

	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render SVG: %w", err)
	}
	return fixFonts(buf.Bytes()), nil
}

// wrap breaks s into lines no wider than width, between words.
func wrap(sty text.Style, s string, width vg.Length) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && sty.Width(line+" "+w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// fixFonts gives the SVG's font family fallbacks. vgsvg names the family
// alone ("Liberation Sans"), and a viewer without it would fall back to its
// default, often a serif; Liberation Sans has the metrics of Arial, so text
// measured for one fits in the other.
func fixFonts(svg []byte) []byte {
	return bytes.ReplaceAll(svg, []byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
}

// median returns the median of xs, which must not be empty.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ---- lines: a figure against a number of clients ----

// lineSeries is one line of a line chart: at each x, one value per run.
type lineSeries struct {
	label string
	color color.Color
	xs    []float64
	ys    [][]float64
}

// linePlot draws series against a log x axis with a tick at every x, a
// line through the medians and a mark for every run.
func linePlot(p *plot.Plot, series []lineSeries, runs int) ([]legendEntry, error) {
	addGrid(p)
	var xs []float64
	ymax := 0.0
	var legend []legendEntry
	for _, s := range series {
		var med, each plotter.XYs
		for i, x := range s.xs {
			med = append(med, plotter.XY{X: x, Y: median(s.ys[i])})
			for _, y := range s.ys[i] {
				each = append(each, plotter.XY{X: x, Y: y})
				ymax = max(ymax, y)
			}
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
		line, err := plotter.NewLine(med)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		line.Color, line.Width = s.color, vg.Points(2)
		marks, err := plotter.NewScatter(each)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		marks.GlyphStyle = draw.GlyphStyle{Color: s.color, Radius: vg.Points(3.5), Shape: draw.CircleGlyph{}}
		if runs > 1 {
			marks.GlyphStyle.Shape = draw.RingGlyph{}
		}
		p.Add(line, marks)
		legend = append(legend, legendEntry{s.label, []plot.Thumbnailer{line, marks}})
	}
	slices.Sort(xs)
	var ticks plot.ConstantTicks
	for _, x := range xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: fmt.Sprint(x)})
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = xs[0]/1.4, xs[len(xs)-1]*1.4
	p.Y.Min, p.Y.Max = 0, niceTop(ymax*1.05)
	p.Y.Tick.Marker = linearTicks{}
	return legend, nil
}

// niceStep returns the smallest of 1, 2, 2.5 and 5 times a power of ten
// that is at least v (v > 0).
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// linearTicks labels about five round values of a linear axis.
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: formatTick(lo)}}
	}
	step := niceStep((hi - lo) / 5)
	var ticks []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i*step + 0 // no "-0"
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v)})
		if i*step+step/2 <= hi {
			ticks = append(ticks, plot.Tick{Value: v + step/2})
		}
	}
	return ticks
}

// formatTick prints v with no more digits than it has (to 1/1000).
func formatTick(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// logTicks labels 1, 2 and 5 times the powers of ten of a log axis, with
// a minor tick at the other multiples.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = formatTick(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// niceTop returns a round top for a linear axis from 0 that shows v.
func niceTop(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	step := niceStep(v / 10)
	// Rounded, so that 3 steps of 0.1 make 0.3.
	return math.Round(math.Ceil(v/step-1e-9)*step*1e9) / 1e9
}

// ---- distributions: latency per recipe and number of clients ----

// distItem is one distribution drawn at x.
type distItem struct {
	x, halfWidth float64 // in data units
	color        color.Color
	d            dist
}

// distPlot draws distributions on a log y axis: where the quartiles are
// known, a box from p25 to p75 with a line at p50 and whiskers from p10 to
// p90; otherwise a dot at p50. A cross marks p99 either way.
type distPlot struct{ items []distItem }

var (
	p99Glyph = draw.GlyphStyle{Color: ink, Radius: vg.Points(3.5), Shape: draw.CrossGlyph{}}
	p50Glyph = draw.GlyphStyle{Color: ink, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
)

// Plot implements plot.Plotter.
func (dp distPlot) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, it := range dp.items {
		d := it.d
		x, x0, x1 := trX(it.x), trX(it.x-it.halfWidth), trX(it.x+it.halfWidth)
		thin := draw.LineStyle{Color: it.color, Width: vg.Points(1.2)}
		if d.hasQuartiles() {
			lo, hi := min(d.P25, nonzero(d.P10, d.P25)), max(d.P75, d.P90)
			c.StrokeLine2(thin, x, trY(lo), x, trY(d.P25))
			c.StrokeLine2(thin, x, trY(d.P75), x, trY(hi))
			capW := (x1 - x0) / 4
			c.StrokeLine2(thin, x-capW, trY(lo), x+capW, trY(lo))
			c.StrokeLine2(thin, x-capW, trY(hi), x+capW, trY(hi))
			box := []vg.Point{{X: x0, Y: trY(d.P25)}, {X: x1, Y: trY(d.P25)}, {X: x1, Y: trY(d.P75)}, {X: x0, Y: trY(d.P75)}}
			c.FillPolygon(translucent(it.color), box)
			c.StrokeLines(thin, append(box, box[0]))
			c.StrokeLine2(draw.LineStyle{Color: ink, Width: vg.Points(1.8)}, x0, trY(d.P50), x1, trY(d.P50))
		} else {
			if d.P99 > d.P50 {
				c.StrokeLine2(thin, x, trY(d.P50), x, trY(d.P99))
			}
			sty := p50Glyph
			sty.Color = it.color
			c.DrawGlyph(sty, vg.Point{X: x, Y: trY(d.P50)})
		}
		if d.P99 > 0 {
			sty := p99Glyph
			sty.Color = it.color
			c.DrawGlyph(sty, vg.Point{X: x, Y: trY(d.P99)})
		}
	}
}

func nonzero(v, otherwise float64) float64 {
	if v > 0 {
		return v
	}
	return otherwise
}

// DataRange implements plot.DataRanger.
func (dp distPlot) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, it := range dp.items {
		xmin, xmax = min(xmin, it.x-it.halfWidth), max(xmax, it.x+it.halfWidth)
		for _, v := range []float64{it.d.P10, it.d.P25, it.d.P50, it.d.P75, it.d.P90, it.d.P99} {
			if v > 0 {
				ymin, ymax = min(ymin, v), max(ymax, v)
			}
		}
	}
	return xmin, xmax, ymin, ymax
}

// distKey explains the marks of a distPlot in the legend: the box only
// when some item has quartiles, the dot only when some has not.
func distKey(items []distItem) []legendEntry {
	var quart, bare bool
	for _, it := range items {
		if it.d.hasQuartiles() {
			quart = true
		} else {
			bare = true
		}
	}
	var out []legendEntry
	if quart {
		out = append(out,
			legendEntry{"box: p25–p75, line: p50", []plot.Thumbnailer{thumb(func(c *draw.Canvas) {
				r := c.Rectangle
				mx := (r.Min.X + r.Max.X) / 2
				w := (r.Max.Y - r.Min.Y) * 0.45
				box := []vg.Point{{X: mx - w, Y: r.Min.Y + 1}, {X: mx + w, Y: r.Min.Y + 1}, {X: mx + w, Y: r.Max.Y - 1}, {X: mx - w, Y: r.Max.Y - 1}}
				c.FillPolygon(translucent(grey), box)
				c.StrokeLines(draw.LineStyle{Color: grey, Width: vg.Points(1)}, append(box, box[0]))
				my := (r.Min.Y + r.Max.Y) / 2
				c.StrokeLine2(draw.LineStyle{Color: ink, Width: vg.Points(1.8)}, mx-w, my, mx+w, my)
			})}},
			legendEntry{"whiskers: p10–p90", []plot.Thumbnailer{thumb(func(c *draw.Canvas) {
				r := c.Rectangle
				mx := (r.Min.X + r.Max.X) / 2
				sty := draw.LineStyle{Color: grey, Width: vg.Points(1.2)}
				c.StrokeLine2(sty, mx, r.Min.Y, mx, r.Max.Y)
				c.StrokeLine2(sty, mx-3, r.Min.Y, mx+3, r.Min.Y)
				c.StrokeLine2(sty, mx-3, r.Max.Y, mx+3, r.Max.Y)
			})}})
	}
	if bare {
		sty := p50Glyph
		sty.Color = grey
		out = append(out, legendEntry{"dot: p50", []plot.Thumbnailer{glyphThumb(sty)}})
	}
	sty := p99Glyph
	sty.Color = grey
	return append(out, legendEntry{"cross: p99", []plot.Thumbnailer{glyphThumb(sty)}})
}

// ---- bars ----

// barItem is one bar: its height is the median of values (one per run),
// and with several runs each run's value is marked on it.
type barItem struct {
	x, halfWidth float64
	color        color.Color
	values       []float64
	label        string // printed above the bar
}

type barPlot struct{ items []barItem }

// Plot implements plot.Plotter.
func (bp barPlot) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	labelSty := textStyle(8, ink)
	labelSty.XAlign = draw.XCenter
	for _, it := range bp.items {
		h := median(it.values)
		x0, x1 := trX(it.x-it.halfWidth), trX(it.x+it.halfWidth)
		y0, y1 := trY(0), trY(h)
		c.FillPolygon(it.color, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
		top := max(h, 0)
		if len(it.values) > 1 {
			for _, v := range it.values {
				c.DrawGlyph(draw.GlyphStyle{Color: ink, Radius: vg.Points(2.5), Shape: draw.RingGlyph{}}, vg.Point{X: trX(it.x), Y: trY(v)})
				top = max(top, v)
			}
		}
		if it.label != "" {
			c.FillText(labelSty, vg.Point{X: trX(it.x), Y: trY(top) + vg.Points(3)}, it.label)
		}
	}
}

// DataRange implements plot.DataRanger; the top leaves room for the labels.
func (bp barPlot) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, it := range bp.items {
		xmin, xmax = min(xmin, it.x-it.halfWidth), max(xmax, it.x+it.halfWidth)
		for _, v := range it.values {
			ymin, ymax = min(ymin, v), max(ymax, v)
		}
	}
	return xmin, xmax, ymin, niceTop(ymax * 1.15)
}
