package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
)

// The command serves its metrics in the Prometheus text format with a
// MeterProvider of its own, below, rather than with the OpenTelemetry SDK
// and its Prometheus exporter: the command is built from the library's
// module, whose requirements stay the OpenTelemetry API and nothing
// heavier. It implements only what the library
// records — int64 counters and up-down counters, float64 histograms with
// explicit buckets — with the OpenTelemetry-to-Prometheus naming the
// exporter uses: dots become underscores, the unit "s" adds "_seconds",
// counters end in "_total", up-down counters are gauges. Other instrument
// kinds are no-ops. Programs that embed the library should use the SDK
// and its exporter instead (see examples/prometheus).

// promProvider is a metric.MeterProvider whose instruments keep their
// current values for /metrics. It is safe for concurrent use.
type promProvider struct {
	embedded.MeterProvider
	mu    sync.Mutex
	insts map[string]*promInstrument // by Prometheus name
}

func newPromProvider() *promProvider {
	return &promProvider{insts: map[string]*promInstrument{}}
}

func (p *promProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return promMeter{p: p}
}

// promMeter creates the instruments of a promProvider.
type promMeter struct {
	noop.Meter
	p *promProvider
}

func (m promMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(opts...)
	return &promInt{inst: m.p.instrument(name, c.Unit(), c.Description(), "counter", nil)}, nil
}

func (m promMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c := metric.NewInt64UpDownCounterConfig(opts...)
	return &promInt{inst: m.p.instrument(name, c.Unit(), c.Description(), "gauge", nil)}, nil
}

func (m promMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	bounds := c.ExplicitBucketBoundaries()
	if len(bounds) == 0 {
		bounds = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	}
	return &promHist{inst: m.p.instrument(name, c.Unit(), c.Description(), "histogram", bounds)}, nil
}

// promInstrument is one instrument: its series by attribute set.
type promInstrument struct {
	name, help, typ string
	bounds          []float64

	mu     sync.Mutex
	series map[attribute.Distinct]*promSeries
}

// promSeries is the state of one attribute set.
type promSeries struct {
	attrs   attribute.Set
	value   int64    // counter, gauge
	buckets []uint64 // histogram: counts per bound, then +Inf
	sum     float64
	count   uint64
}

// instrument returns the instrument of that name, made on first use.
func (p *promProvider) instrument(name, unit, help, typ string, bounds []float64) *promInstrument {
	pname := promName(name, unit, typ)
	p.mu.Lock()
	defer p.mu.Unlock()
	if in, ok := p.insts[pname]; ok {
		return in
	}
	in := &promInstrument{name: pname, help: help, typ: typ, bounds: bounds, series: map[attribute.Distinct]*promSeries{}}
	p.insts[pname] = in
	return in
}

func (in *promInstrument) get(set attribute.Set) *promSeries {
	s, ok := in.series[set.Equivalent()]
	if !ok {
		s = &promSeries{attrs: set}
		if in.typ == "histogram" {
			s.buckets = make([]uint64, len(in.bounds)+1)
		}
		in.series[set.Equivalent()] = s
	}
	return s
}

type promInt struct {
	embedded.Int64Counter
	embedded.Int64UpDownCounter
	inst *promInstrument
}

func (c *promInt) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	c.inst.mu.Lock()
	c.inst.get(set).value += v
	c.inst.mu.Unlock()
}

func (c *promInt) Enabled(context.Context) bool { return true }

type promHist struct {
	embedded.Float64Histogram
	inst *promInstrument
}

func (h *promHist) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	set := metric.NewRecordConfig(opts).Attributes()
	i := sort.SearchFloat64s(h.inst.bounds, v) // the first bound >= v: Prometheus buckets are "le"
	h.inst.mu.Lock()
	s := h.inst.get(set)
	s.buckets[i]++
	s.sum += v
	s.count++
	h.inst.mu.Unlock()
}

func (h *promHist) Enabled(context.Context) bool { return true }

// promName is the Prometheus name of an OpenTelemetry instrument.
func promName(name, unit, typ string) string {
	n := sanitize(name)
	if unit == "s" && !strings.HasSuffix(n, "_seconds") {
		n += "_seconds"
	}
	if typ == "counter" {
		n += "_total"
	}
	return n
}

// sanitize maps a name to [a-zA-Z0-9_:], the others becoming '_'.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == ':' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// WriteTo writes every series in the Prometheus text format (version
// 0.0.4), instruments and series in a stable order.
func (p *promProvider) WriteTo(w io.Writer) (int64, error) {
	p.mu.Lock()
	insts := make([]*promInstrument, 0, len(p.insts))
	for _, in := range p.insts {
		insts = append(insts, in)
	}
	p.mu.Unlock()
	sort.Slice(insts, func(i, j int) bool { return insts[i].name < insts[j].name })
	var b strings.Builder
	for _, in := range insts {
		in.write(&b)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func (in *promInstrument) write(b *strings.Builder) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.series) == 0 {
		return
	}
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", in.name, escapeHelp(in.help), in.name, in.typ)
	series := make([]*promSeries, 0, len(in.series))
	for _, s := range in.series {
		series = append(series, s)
	}
	sort.Slice(series, func(i, j int) bool { return labels(series[i].attrs, "") < labels(series[j].attrs, "") })
	for _, s := range series {
		if in.typ != "histogram" {
			fmt.Fprintf(b, "%s%s %d\n", in.name, labels(s.attrs, ""), s.value)
			continue
		}
		var cum uint64
		for i, bound := range in.bounds {
			cum += s.buckets[i]
			fmt.Fprintf(b, "%s_bucket%s %d\n", in.name, labels(s.attrs, formatFloat(bound)), cum)
		}
		fmt.Fprintf(b, "%s_bucket%s %d\n", in.name, labels(s.attrs, "+Inf"), s.count)
		fmt.Fprintf(b, "%s_sum%s %s\n", in.name, labels(s.attrs, ""), formatFloat(s.sum))
		fmt.Fprintf(b, "%s_count%s %d\n", in.name, labels(s.attrs, ""), s.count)
	}
}

// labels formats an attribute set as Prometheus labels, plus le when
// given.
func labels(set attribute.Set, le string) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, sanitize(string(kv.Key))+`="`+escapeLabel(kv.Value.Emit())+`"`)
	}
	if le != "" {
		parts = append(parts, `le="`+le+`"`)
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// metricsServer serves /metrics of p on addr until stop is called.
type metricsServer struct {
	srv  *http.Server
	done chan struct{}
}

// serveMetrics listens on addr and serves p's metrics at /metrics.
func serveMetrics(addr string, p *promProvider) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = p.WriteTo(w)
	})
	s := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// stop closes the server and waits for it.
func (s *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}
