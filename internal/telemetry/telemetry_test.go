package telemetry

import (
	"errors"
	"fmt"
	"testing"
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
