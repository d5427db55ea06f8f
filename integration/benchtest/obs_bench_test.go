package benchtest

import (
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// BenchmarkObservabilityGuardApply measures Guard.Apply's accepted path
// with metrics off (a Guard without a provider: no allocation) and on (the
// SDK with a manual reader), in the same run.
func BenchmarkObservabilityGuardApply(b *testing.B) {
	ok := func() error { return nil }
	for _, withMetrics := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", withMetrics), func(b *testing.B) {
			var opts []fencing.Option
			if withMetrics {
				opts = append(opts, fencing.WithMeterProvider(testutil.NewMetrics(b).Provider))
			}
			g, err := fencing.NewGuard(16, opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := g.Apply("r", fencing.Token(i+1), ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
