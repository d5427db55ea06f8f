package lock_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// The token rules that package lock's contract relies on: tokens print and
// parse losslessly, zero is never a token, and a stale write is reported as
// one error type that matches the sentinel.

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want fencing.Token
		ok   bool
	}{
		{"1", 1, true},
		{"42", 42, true},
		{"007", 7, true},
		{strconv.FormatUint(math.MaxUint64, 10), math.MaxUint64, true},
		{"", 0, false},
		{"0", 0, false},
		{"000", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"0x10", 0, false},
		{"1e3", 0, false},
		{"1.0", 0, false},
		{"18446744073709551616", 0, false}, // MaxUint64+1
		{"١", 0, false},                    // a non-ASCII digit
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := fencing.ParseToken(tt.in)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Errorf("ParseToken(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
				}
				if s := got.String(); tt.in[0] != '0' && s != tt.in {
					t.Errorf("Token(%d).String() = %q; want %q", got, s, tt.in)
				}
				return
			}
			if !errors.Is(err, fencing.ErrInvalidToken) || got != 0 {
				t.Errorf("ParseToken(%q) = %d, %v; want 0, an error wrapping %v", tt.in, got, err, fencing.ErrInvalidToken)
			}
		})
	}
}

func TestStaleTokenError(t *testing.T) {
	var err error = &fencing.StaleTokenError{Resource: "accounts/7", Token: 3, Highest: 5}
	wrapped := fmt.Errorf("write: %w", err)
	for _, e := range []error{err, wrapped} {
		if !errors.Is(e, fencing.ErrStaleToken) {
			t.Errorf("errors.Is(%v, ErrStaleToken) = false; want true", e)
		}
		if errors.Is(e, fencing.ErrInvalidToken) {
			t.Errorf("errors.Is(%v, ErrInvalidToken) = true; want false", e)
		}
		var stale *fencing.StaleTokenError
		if !errors.As(e, &stale) {
			t.Fatalf("errors.As(%v, *StaleTokenError) = false; want true", e)
		}
		if want := (fencing.StaleTokenError{Resource: "accounts/7", Token: 3, Highest: 5}); *stale != want {
			t.Errorf("errors.As gave %+v; want %+v", *stale, want)
		}
	}
	if got, want := err.Error(), `fencing: stale token 3 for "accounts/7": highest accepted is 5`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if errors.Is(errors.New("fencing: stale token"), fencing.ErrStaleToken) {
		t.Errorf("an unrelated error with the same text matches ErrStaleToken; want only the sentinel and *StaleTokenError")
	}
}
