package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
)

// asReason is an error whose As method, not its chain, yields a tagged
// error.
type asReason struct{ reason string }

func (e asReason) Error() string { return "as " + e.reason }

func (e asReason) As(target any) bool {
	if p, ok := target.(**reasonError); ok {
		*p = &reasonError{reason: e.reason, err: e}
		return true
	}
	return false
}

func TestReasonOf(t *testing.T) {
	base := errors.New("lease lost")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"untagged", base, ""},
		{"wrapped untagged", fmt.Errorf("a: %w", fmt.Errorf("b: %w", base)), ""},
		{"tagged", WithReason(Expired, base), Expired},
		{"wrapped tagged", fmt.Errorf("lease %q: %w", "x", WithReason(Deleted, base)), Deleted},
		{"outermost tag", WithReason(Closed, fmt.Errorf("a: %w", WithReason(Expired, base))), Closed},
		{"joined", errors.Join(base, fmt.Errorf("b: %w", WithReason(Revoked, base))), Revoked},
		{"two wrapped", fmt.Errorf("%w, %w", base, WithReason(Disconnected, base)), Disconnected},
		{"joined untagged", errors.Join(base, base), ""},
		{"As method", fmt.Errorf("a: %w", asReason{Expired}), Expired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf(%v) = %q; want %q", tc.err, got, tc.want)
			}
			var r *reasonError
			if want := errors.As(tc.err, &r); want != (tc.want != "") || want && r.reason != tc.want {
				t.Errorf("errors.As(%v) disagrees with the table", tc.err)
			}
		})
	}
}

// TestSetsBounded checks that the attribute sets with a mapped name stop
// being kept at maxNamed, while those without one still are, when several
// goroutines record at once.
func TestSetsBounded(t *testing.T) {
	tel, err := New("etcd", Config{MeterProvider: noop.NewMeterProvider(), NameAttribute: func(name string) string { return name }})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	const workers, each = 4, maxNamed
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, a := tel.StartAcquire(context.Background(), fmt.Sprintf("lock-%d-%d", w, i), "exclusive", true)
				a.End(Granted, 1, nil).End("")
				tel.SessionEnded(Closed)
			}
		})
	}
	wg.Wait()
	if n := tel.named.Load(); n < maxNamed || n > maxNamed+workers {
		t.Errorf("sets kept with a name = %d; want %d (up to %d with racing stores)", n, maxNamed, maxNamed+workers)
	}
	if _, ok := tel.sets.Load(setKey{k1: KeyReason, v1: Closed}); !ok {
		t.Errorf("the set of SessionEnded(%q) is not kept", Closed)
	}
	if o1, o2 := tel.opts(setKey{k1: KeyReason, v1: Closed}), tel.opts(setKey{k1: KeyReason, v1: Closed, nameKey: KeyLock}); o1 != o2 {
		t.Errorf("opts() of one set named two ways = %p, %p; want the same", o1, o2)
	}
}
