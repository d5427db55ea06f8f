package telemetrytest

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/sentinel"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// BenchmarkCycle measures what metrics add to one granted, held and
// released lease, as a backend records it (StartAcquire, End, and at the
// lease's end EndReason of the release error and Hold.End), with the
// SDK and a manual reader: without a name mapping, and with one.
func BenchmarkCycle(b *testing.B) {
	released := fmt.Errorf("lease %q (token %d): %w", "orders", 7, sentinel.Released)
	for _, tc := range []struct {
		name    string
		mapping func(string) string
	}{
		{"unmapped", nil},
		{"mapped", func(name string) string { return name }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			tel, err := telemetry.New("zookeeper", telemetry.Config{MeterProvider: mp, NameAttribute: tc.mapping})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, a := tel.StartAcquire(ctx, "orders", "exclusive", true)
				h := a.End(telemetry.Granted, 7, nil)
				h.End(config.EndReason(released))
			}
		})
	}
}
