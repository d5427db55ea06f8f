package benchtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// BenchmarkObservabilityAcquireRelease measures what metrics cost an
// uncontended acquire+release on a real cluster: two Lockers on the same
// cluster, one recording on the OpenTelemetry SDK (with a manual reader,
// collected after every round so that nothing accumulates unread) and one
// without a provider, run in alternating rounds of cycles so that both
// see the same load. It reports each Locker's time per cycle and the
// overhead in percent (on/off - 1); the target is at most 2%.
//
//	cd integration && go test -run '^$' -bench Observability -benchtime 2000x ./benchtest
func BenchmarkObservabilityAcquireRelease(b *testing.B) {
	for _, kind := range []cluster.Kind{cluster.Etcd, cluster.ZooKeeper} {
		c := cluster.FromEnv(b).Start(b, kind)
		url := "etcd://" + strings.Join(c.Endpoints(), ",") + "/obsbench?ttl=10s"
		if kind == cluster.ZooKeeper {
			url = "zk://" + strings.Join(c.Endpoints(), ",") + "/obsbench?session_timeout=10s"
		}
		b.Run(string(kind), func(b *testing.B) {
			m := testutil.NewMetrics(b)
			on := openBench(b, url, m.Provider)
			off := openBench(b, url, nil)
			ctx := context.Background()
			cycle := func(l lock.Locker, name string) {
				le, err := l.Acquire(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				if err := le.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			// Warm both: sessions, connections.
			for range 20 {
				cycle(on, "obsbench-on")
				cycle(off, "obsbench-off")
			}
			const round = 25
			var tOn, tOff time.Duration
			var nOn, nOff int
			b.ResetTimer()
			for i := 0; i < b.N; i += 2 * round {
				// Alternate which goes first, so neither always follows
				// the other.
				order := []bool{true, false}
				if (i/(2*round))%2 == 1 {
					order = []bool{false, true}
				}
				for _, withMetrics := range order {
					l, name := off, "obsbench-off"
					if withMetrics {
						l, name = on, "obsbench-on"
					}
					start := time.Now()
					for range round {
						cycle(l, name)
					}
					d := time.Since(start)
					if withMetrics {
						tOn += d
						nOn += round
					} else {
						tOff += d
						nOff += round
					}
				}
				m.Sum(b, "fencelock.leases.held", nil) // a collection, as a scrape would
			}
			b.StopTimer()
			perOn := float64(tOn.Nanoseconds()) / float64(nOn)
			perOff := float64(tOff.Nanoseconds()) / float64(nOff)
			b.ReportMetric(perOn, "ns/cycle-metrics-on")
			b.ReportMetric(perOff, "ns/cycle-metrics-off")
			b.ReportMetric((perOn/perOff-1)*100, "overhead-%")
			if got := m.HistogramCount(b, "fencelock.acquire.duration", map[string]string{"fencelock.outcome": "granted"}); got < uint64(nOn) {
				b.Errorf("acquire.duration count = %d; want at least the %d cycles measured", got, nOn)
			}
		})
	}
}

func openBench(b *testing.B, url string, mp metric.MeterProvider) lock.Locker {
	b.Helper()
	opts := []lock.OpenOption{lock.WithLogger(slog.New(slog.DiscardHandler))}
	if mp != nil {
		opts = append(opts, lock.WithMeterProvider(mp))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, url, opts...)
	if err != nil {
		b.Fatalf("lock.Open() = %v", err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

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
