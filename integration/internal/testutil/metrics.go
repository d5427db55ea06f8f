package testutil

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Metrics is an OpenTelemetry SDK meter provider with a manual reader: a
// test gives Provider to a Locker or helper, and reads what was recorded
// with Sum and HistogramCount.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMetrics returns a Metrics shut down when t ends.
func NewMetrics(t testing.TB) *Metrics {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Metrics{Provider: mp, reader: r}
}

// collect returns the metric called name, and whether it was recorded.
func (m *Metrics) collect(t testing.TB, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("ManualReader.Collect() = %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == name {
				return mt, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has every attribute of want (key=value).
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// Sum returns the sum of the data points of the int64 counter or up-down
// counter name whose attributes include want; 0 when none.
func (m *Metrics) Sum(t testing.TB, name string, want map[string]string) int64 {
	t.Helper()
	mt, ok := m.collect(t, name)
	if !ok {
		return 0
	}
	sum, ok := mt.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("metric %s is a %T; want an int64 sum", name, mt.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if matches(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

// HistogramCount returns the number of measurements of the float64
// histogram name whose attributes include want; 0 when none.
func (m *Metrics) HistogramCount(t testing.TB, name string, want map[string]string) uint64 {
	t.Helper()
	mt, ok := m.collect(t, name)
	if !ok {
		return 0
	}
	h, ok := mt.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("metric %s is a %T; want a float64 histogram", name, mt.Data)
	}
	var n uint64
	for _, dp := range h.DataPoints {
		if matches(dp.Attributes, want) {
			n += dp.Count
		}
	}
	return n
}

// Unit returns the unit of the metric called name ("" if not recorded).
func (m *Metrics) Unit(t testing.TB, name string) string {
	t.Helper()
	mt, _ := m.collect(t, name)
	return mt.Unit
}

// Dump returns every data point recorded, one line each, for failure
// messages.
func (m *Metrics) Dump(t testing.TB) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("ManualReader.Collect() = %v", err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", mt.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d", mt.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count))
				}
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
