package zklock

import (
	"bytes"
	"errors"
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
	u, err := url.Parse("zk://127.0.0.1:1/app")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := urlOptions(u, cfg)
	if err != nil {
		t.Fatalf("urlOptions() = %v; want nil", err)
	}
	o, err := buildOptions(opts)
	if err != nil {
		t.Fatalf("buildOptions() = %v; want nil", err)
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

// TestURLLayout checks the layout key: each layout by its name, bad
// names and a lock-delay with a Curator layout refused.
func TestURLLayout(t *testing.T) {
	for query, want := range map[string]Layout{"": LayoutFencelock, "?layout=fencelock": LayoutFencelock,
		"?layout=curator": LayoutCurator, "?layout=curator-rw": LayoutCuratorReadWrite, "?layout=curator-latch": LayoutCuratorLatch,
		"?layout=": "", "?layout=zk": "", "?layout=curator&layout=curator": "", "?layout=curator&lock_delay=1s": ""} {
		u, err := url.Parse("zk://127.0.0.1:1/app" + query)
		if err != nil {
			t.Fatal(err)
		}
		opts, err := urlOptions(u, lock.OpenConfig{})
		var o *options
		if err == nil {
			o, err = buildOptions(opts)
		}
		switch {
		case want == "" && !errors.Is(err, lock.ErrInvalidConfig):
			t.Errorf("%s: options = %v; want an error wrapping %v", query, err, lock.ErrInvalidConfig)
		case want != "" && (err != nil || o.layout != want):
			t.Errorf("%s: options = %v, %v; want layout %q", query, o, err, want)
		}
	}
}
