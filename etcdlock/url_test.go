package etcdlock

import (
	"bytes"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/lock"
)

// TestURLOptionsOpenConfig checks that every field of lock.OpenConfig
// reaches the Locker's options.
func TestURLOptionsOpenConfig(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := lock.OpenConfig{
		Logger:         logger,
		MeterProvider:  metricnoop.NewMeterProvider(),
		TracerProvider: tracenoop.NewTracerProvider(),
		Identity:       "worker-7",
		NameAttribute:  func(string) string { return "mapped" },
	}
	o, _, err := urlOptions(&url.URL{Scheme: "etcd", Host: "h:2379", Path: "/app"}, cfg)
	if err != nil {
		t.Fatalf("urlOptions() = %v; want nil", err)
	}
	o.Logger.Info("probe")
	if !strings.Contains(buf.String(), "probe") {
		t.Errorf("a line logged through the Locker's logger is not in the given logger's output %q", buf.String())
	}
	if o.Identity != "worker-7" {
		t.Errorf("Identity = %q; want %q", o.Identity, "worker-7")
	}
	if o.Telemetry.MeterProvider == nil || o.Telemetry.TracerProvider == nil {
		t.Errorf("Telemetry = %+v; want both providers", o.Telemetry)
	}
	if f := o.Telemetry.NameAttribute; f == nil || f("x") != "mapped" {
		t.Errorf("NameAttribute not the one given")
	}
}
