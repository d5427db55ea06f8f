package httpfence_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/zklock"
)

// TestBadInput: a Transport whose Lease is a typed nil (a nil *etcdlock.Lease
// in the lock.Lease field) used to panic in RoundTrip.
func TestBadInput(t *testing.T) {
	req := func() *http.Request { return httptest.NewRequest(http.MethodGet, "http://127.0.0.1:1/x", nil) }
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	var nilHandler http.HandlerFunc
	tests := []struct {
		call string
		f    func() error
	}{
		{"Transport{Lease: (*etcdlock.Lease)(nil)}.RoundTrip", func() error {
			_, err := (&httpfence.Transport{Lease: (*etcdlock.Lease)(nil)}).RoundTrip(req())
			return err
		}},
		{"Transport{Lease: (*zklock.Lease)(nil)}.RoundTrip", func() error {
			_, err := (&httpfence.Transport{Lease: (*zklock.Lease)(nil)}).RoundTrip(req())
			return err
		}},
		{"Transport{}.RoundTrip", func() error { _, err := (&httpfence.Transport{}).RoundTrip(req()); return err }},
		{"(*Transport)(nil).RoundTrip", func() error { _, err := (*httpfence.Transport)(nil).RoundTrip(req()); return err }},
		{"Transport.RoundTrip(nil)", func() error { _, err := (&httpfence.Transport{}).RoundTrip(nil); return err }},
		{"Transport.RoundTrip(no URL)", func() error { _, err := (&httpfence.Transport{}).RoundTrip(&http.Request{}); return err }},
		{"Handler(nil guard)", func() error {
			_, err := httpfence.Handler(nil, func(*http.Request) string { return "" }, next)
			return err
		}},
		{"Handler(nil resourceOf)", func() error { _, err := httpfence.Handler(new(fencing.Guard), nil, next); return err }},
		{"Handler(nil option)", func() error {
			_, err := httpfence.Handler(new(fencing.Guard), func(*http.Request) string { return "" }, next, nil)
			return err
		}},
		{"Handler(WithMeterProvider(typed nil))", func() error {
			var mp *metricnoop.MeterProvider
			_, err := httpfence.Handler(new(fencing.Guard), func(*http.Request) string { return "" }, next, httpfence.WithMeterProvider(mp))
			return err
		}},
		{"Handler(WithTracerProvider(nil))", func() error {
			_, err := httpfence.Handler(new(fencing.Guard), func(*http.Request) string { return "" }, next, httpfence.WithTracerProvider(nil))
			return err
		}},
		{"Handler(nil next)", func() error {
			_, err := httpfence.Handler(new(fencing.Guard), func(*http.Request) string { return "" }, nil)
			return err
		}},
		{"Handler(typed-nil next)", func() error {
			_, err := httpfence.Handler(new(fencing.Guard), func(*http.Request) string { return "" }, nilHandler)
			return err
		}},
		{"TokenFromRequest(nil)", func() error { _, err := httpfence.TokenFromRequest(nil); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", tt.call, r)
					}
				}()
				err = tt.f()
			}()
			if !errors.Is(err, fencing.ErrInvalidConfig) {
				t.Errorf("%s = %v; want an error wrapping %v", tt.call, err, fencing.ErrInvalidConfig)
			}
		})
	}
	t.Run("WriteError(nil, nil)", func(t *testing.T) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("WriteError panicked: %v", r)
			}
		}()
		httpfence.WriteError(nil, errors.New("x"))
		w := httptest.NewRecorder()
		httpfence.WriteError(w, nil)
		if w.Code != http.StatusInternalServerError {
			t.Errorf("WriteError(w, nil) status %d; want 500", w.Code)
		}
	})
}
