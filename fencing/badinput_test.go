package fencing_test

import (
	"errors"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/fencelock/fencelock/fencing"
)

// TestBadInputGuard: a nil *Guard used to panic in Apply, Highest and Len.
func TestBadInputGuard(t *testing.T) {
	var g *fencing.Guard
	ran := false
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("(*Guard)(nil) panicked: %v", r)
			}
		}()
		err := g.Apply("r", 1, func() error { ran = true; return nil })
		if !errors.Is(err, fencing.ErrInvalidConfig) || ran {
			t.Errorf("(*Guard)(nil).Apply() = %v, ran %v; want an error wrapping %v and no write", err, ran, fencing.ErrInvalidConfig)
		}
		if h := g.Highest("r"); h != 0 {
			t.Errorf("(*Guard)(nil).Highest() = %d; want 0", h)
		}
		if n := g.Len(); n != 0 {
			t.Errorf("(*Guard)(nil).Len() = %d; want 0", n)
		}
	}()
	if got := (*fencing.StaleTokenError)(nil).Error(); got == "" {
		t.Errorf("(*StaleTokenError)(nil).Error() = %q; want a message", got)
	}
	var zero fencing.Guard
	for _, tt := range []struct {
		call string
		err  error
		want error
	}{
		{"Apply(zero token)", zero.Apply("r", 0, func() error { return nil }), fencing.ErrInvalidToken},
		{"Apply(nil fn)", zero.Apply("r", 1, nil), fencing.ErrInvalidConfig},
		{"NewGuard(0)", func() error { _, err := fencing.NewGuard(0); return err }(), fencing.ErrInvalidConfig},
		{"NewGuard(nil option)", func() error { _, err := fencing.NewGuard(1, nil); return err }(), fencing.ErrInvalidConfig},
		{"NewGuard(WithMeterProvider(nil))", func() error { _, err := fencing.NewGuard(1, fencing.WithMeterProvider(nil)); return err }(), fencing.ErrInvalidConfig},
		{"NewGuard(WithMeterProvider(typed nil))", func() error {
			var mp *metricnoop.MeterProvider
			_, err := fencing.NewGuard(1, fencing.WithMeterProvider(mp))
			return err
		}(), fencing.ErrInvalidConfig},
		{"ParseToken(empty)", func() error { _, err := fencing.ParseToken(""); return err }(), fencing.ErrInvalidToken},
		{"ParseToken(0)", func() error { _, err := fencing.ParseToken("0"); return err }(), fencing.ErrInvalidToken},
		{"ParseToken(-1)", func() error { _, err := fencing.ParseToken("-1"); return err }(), fencing.ErrInvalidToken},
		{"ParseToken(2^64)", func() error { _, err := fencing.ParseToken("18446744073709551616"); return err }(), fencing.ErrInvalidToken},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s = %v; want an error wrapping %v", tt.call, tt.err, tt.want)
		}
	}
}
