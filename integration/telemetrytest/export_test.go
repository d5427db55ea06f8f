package telemetrytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencelock/fencelock/internal/telemetry"
)

// record runs a fixed sequence through tel: every outcome of an
// acquisition, a released and a lost lease, a session, fencing decisions
// and an election term.
func record(tel *telemetry.Telemetry) {
	ctx := context.Background()
	for _, name := range []string{"orders", "unmapped"} {
		_, a := tel.StartAcquire(ctx, name, "exclusive", true)
		a.End(telemetry.Granted, 7, nil).End("")
		_, a = tel.StartAcquire(ctx, name, "shared", true)
		h := a.End(telemetry.Granted, 8, nil)
		h.End("")
		h.Lost(telemetry.Expired)
		_, a = tel.StartAcquire(ctx, name, "shared", true)
		a.End(telemetry.Granted, 9, nil).End(telemetry.Closed)
		_, a = tel.StartAcquire(ctx, name, "exclusive", false)
		a.End(telemetry.Locked, 0, errors.New("locked"))
		for _, outcome := range []string{telemetry.Cancelled, telemetry.Lost, telemetry.Error} {
			_, a = tel.StartAcquire(ctx, name, "permit", true)
			a.End(outcome, 0, errors.New(outcome))
		}
		_, w := tel.StartWrite(ctx, "guard", name, 9)
		w.End(telemetry.Accepted, nil)
		tel.Leader(name, true)
		tel.Leader(name, false)
	}
	tel.SessionStarted()
	tel.SessionEnded(telemetry.Closed)
	tel.SessionEnded(telemetry.Disconnected)
	tel.Decide(ctx, "sqlfence", telemetry.Rejected)
	tel.Decide(ctx, "sqlfence", telemetry.Rejected)
}

// export returns, one line each, every data point that reader holds:
// instrument, unit, its attributes and its value (a histogram's count:
// its durations vary from run to run).
func export(t *testing.T, reader *sdkmetric.ManualReader) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("ManualReader.Collect() = %v", err)
	}
	enc := attribute.DefaultEncoder()
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			head := fmt.Sprintf("%s %s %s", sm.Scope.Name, m.Name, m.Unit)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s monotonic=%v {%s} %d", head, d.IsMonotonic, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s {%s} count=%d bounds=%v", head, p.Attributes.Encoded(enc), p.Count, p.Bounds))
				}
			default:
				t.Fatalf("%s: data of type %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// TestExport checks, line by line, what a fixed sequence exports, with
// and without a name mapping and a backend.
func TestExport(t *testing.T) {
	mapped := func(name string) string {
		if name == "unmapped" {
			return ""
		}
		return "m-" + name
	}
	for _, tc := range []struct {
		name    string
		backend string
		mapping func(string) string
		want    string
	}{
		{"etcd", "etcd", nil, wantEtcd},
		{"zookeeper mapped", "zookeeper", mapped, wantZooKeeperMapped},
		{"no backend", "", nil, wantNoBackend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			tel, err := telemetry.New(tc.backend, telemetry.Config{MeterProvider: mp, NameAttribute: tc.mapping})
			if err != nil {
				t.Fatalf("telemetry.New() = %v", err)
			}
			// Twice: a second pass reuses whatever the first one built.
			record(tel)
			record(tel)
			if got := export(t, reader); got != tc.want {
				t.Errorf("exported data:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
