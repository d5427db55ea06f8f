package fencing_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "42", "18446744073709551615", "18446744073709551616", "0", "00", "007", "", "-1", "+1", " 1", "1 ", "0x10", "1e3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencing.ParseToken(s)
		v, perr := strconv.ParseUint(s, 10, 64)
		if err != nil {
			if !errors.Is(err, fencing.ErrInvalidToken) {
				t.Fatalf("ParseToken(%q) = %v; want an error wrapping %v", s, err, fencing.ErrInvalidToken)
			}
			if perr == nil && v != 0 {
				t.Fatalf("ParseToken(%q) = %v; want %d", s, err, v)
			}
			return
		}
		if perr != nil || v == 0 || fencing.Token(v) != tok {
			t.Fatalf("ParseToken(%q) = %d; want an error (strconv says %d, %v)", s, tok, v, perr)
		}
		// Round trip through the canonical form.
		again, err := fencing.ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("ParseToken(%q) = %d, %v; want %d", tok.String(), again, err, tok)
		}
	})
}
