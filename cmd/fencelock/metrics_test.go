package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// TestPromProviderText checks the text format /metrics serves: names,
// types, labels (escaped), cumulative buckets, and updates.
func TestPromProviderText(t *testing.T) {
	p := newPromProvider()
	m := p.Meter("test")
	ctx := context.Background()
	c, _ := m.Int64Counter("fencelock.leases.lost", metric.WithUnit("{lease}"), metric.WithDescription("Leases lost."))
	g, _ := m.Int64UpDownCounter("fencelock.leases.held", metric.WithUnit("{lease}"), metric.WithDescription("Held."))
	h, _ := m.Float64Histogram("fencelock.acquire.duration", metric.WithUnit("s"), metric.WithDescription("Wait."), metric.WithExplicitBucketBoundaries(0.1, 1))
	expired := metric.WithAttributes(attribute.String("fencelock.reason", "expired"), attribute.String("fencelock.backend", "etcd"))
	c.Add(ctx, 1, expired)
	c.Add(ctx, 2, expired)
	c.Add(ctx, 1, metric.WithAttributes(attribute.String("fencelock.lock", "a\"b\\c\nd")))
	g.Add(ctx, 1)
	g.Add(ctx, 1)
	g.Add(ctx, -1)
	for _, v := range []float64{0.05, 0.1, 0.5, 3} {
		h.Record(ctx, v, metric.WithAttributes(attribute.String("fencelock.outcome", "granted")))
	}
	var b strings.Builder
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP fencelock_acquire_duration_seconds Wait.
# TYPE fencelock_acquire_duration_seconds histogram
fencelock_acquire_duration_seconds_bucket{fencelock_outcome="granted",le="0.1"} 2
fencelock_acquire_duration_seconds_bucket{fencelock_outcome="granted",le="1"} 3
fencelock_acquire_duration_seconds_bucket{fencelock_outcome="granted",le="+Inf"} 4
fencelock_acquire_duration_seconds_sum{fencelock_outcome="granted"} 3.65
fencelock_acquire_duration_seconds_count{fencelock_outcome="granted"} 4
# HELP fencelock_leases_held Held.
# TYPE fencelock_leases_held gauge
fencelock_leases_held 1
# HELP fencelock_leases_lost_total Leases lost.
# TYPE fencelock_leases_lost_total counter
fencelock_leases_lost_total{fencelock_backend="etcd",fencelock_reason="expired"} 3
fencelock_leases_lost_total{fencelock_lock="a\"b\\c\nd"} 1
`
	if got := b.String(); got != want {
		t.Errorf("WriteTo() =\n%s\nwant\n%s", got, want)
	}
}

// TestObservabilityFlagErrors checks that bad log and metrics settings are
// usage errors, reported before anything connects.
func TestObservabilityFlagErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--log-level", "loud", "holder", "x"}, exitUsage, `--log-level "loud"`},
		{[]string{"--log-format", "xml", "holder", "x"}, exitUsage, `--log-format "xml"`},
		{[]string{"--metrics-addr", busy.Addr().String(), "holder", "x"}, exitError, "--metrics-addr " + busy.Addr().String()},
	} {
		code, _, stderr := runApp(t, "etcd://127.0.0.1:1/x", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("fencelock %q = %d, %q; want %d and a message containing %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
