package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// cfgDriver records the OpenConfig it was given.
type cfgDriver struct {
	m   *locktest.Memory
	got chan lock.OpenConfig
}

func (d *cfgDriver) Open(ctx context.Context, u *url.URL, cfg lock.OpenConfig) (lock.Locker, error) {
	d.got <- cfg
	return d.m.NewLocker(cfg.Identity), nil
}

func TestOpenOptionsReachDriver(t *testing.T) {
	d := &cfgDriver{m: locktest.NewMemory(), got: make(chan lock.OpenConfig, 1)}
	scheme := uniqueScheme("openopts")
	lock.Register(scheme, d)
	logger := slog.New(slog.DiscardHandler)
	mp := metricnoop.NewMeterProvider()
	tp := tracenoop.NewTracerProvider()
	mapName := func(string) string { return "class" }
	l, err := lock.Open(context.Background(), scheme+"://h:1/x",
		lock.WithLogger(logger), lock.WithMeterProvider(mp), lock.WithTracerProvider(tp),
		lock.WithIdentity("worker-7"), lock.WithNameAttribute(mapName))
	if err != nil {
		t.Fatalf("Open() = %v; want nil", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cfg := <-d.got
	if cfg.Logger != logger || cfg.MeterProvider != mp || cfg.TracerProvider != tp || cfg.Identity != "worker-7" || cfg.NameAttribute == nil || cfg.NameAttribute("x") != "class" {
		t.Errorf("driver got %+v; want every option given", cfg)
	}

	// Without options, every field is unset: the backend's defaults apply.
	l2, err := lock.Open(context.Background(), scheme+"://h:1/x")
	if err != nil {
		t.Fatalf("Open() = %v; want nil", err)
	}
	t.Cleanup(func() { _ = l2.Close() })
	if cfg := <-d.got; cfg.Logger != nil || cfg.MeterProvider != nil || cfg.TracerProvider != nil || cfg.Identity != "" || cfg.NameAttribute != nil {
		t.Errorf("driver got %+v without options; want a zero OpenConfig", cfg)
	}
}

func TestOpenOptionErrors(t *testing.T) {
	d := &cfgDriver{m: locktest.NewMemory(), got: make(chan lock.OpenConfig, 1)}
	scheme := uniqueScheme("openbadopts")
	lock.Register(scheme, d)
	var nilMP *metricnoop.MeterProvider
	var nilTP *tracenoop.TracerProvider
	for _, tc := range []struct {
		name string
		opts []lock.OpenOption
		want string
	}{
		{"nil option", []lock.OpenOption{nil}, "option 0: nil"},
		{"nil logger", []lock.OpenOption{lock.WithLogger(nil)}, "logger: nil"},
		{"zero logger", []lock.OpenOption{lock.WithLogger(&slog.Logger{})}, "logger: nil"},
		{"nil meter provider", []lock.OpenOption{lock.WithMeterProvider(nil)}, "meter provider: nil"},
		{"typed nil meter provider", []lock.OpenOption{lock.WithMeterProvider(metric.MeterProvider(nilMP))}, "meter provider: nil"},
		{"nil tracer provider", []lock.OpenOption{lock.WithTracerProvider(nil)}, "tracer provider: nil"},
		{"typed nil tracer provider", []lock.OpenOption{lock.WithTracerProvider(trace.TracerProvider(nilTP))}, "tracer provider: nil"},
		{"bad identity", []lock.OpenOption{lock.WithIdentity("a\nb")}, "control character"},
		{"nil name attribute", []lock.OpenOption{lock.WithNameAttribute(nil)}, "name attribute: nil"},
		{"two errors", []lock.OpenOption{nil, lock.WithLogger(nil)}, "option 0: nil; invalid configuration: logger: nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := lock.Open(context.Background(), scheme+"://h:1/x", tc.opts...)
			if !errors.Is(err, lock.ErrInvalidConfig) || l != nil {
				t.Fatalf("Open() = %v, %v; want nil and an error wrapping %v", l, err, lock.ErrInvalidConfig)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "lock: open: ") || strings.Contains(msg, "\n") {
				t.Errorf("Open() = %q; want one line starting with \"lock: open: \" and containing %q", msg, tc.want)
			}
			select {
			case cfg := <-d.got:
				t.Errorf("driver was called with %+v; want no call after a bad option", cfg)
			default:
			}
		})
	}
}
