package httpfence_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// FuzzTokenHeader sends arbitrary Fencing-Token headers (one, or two when
// the input holds a newline) through TokenFromRequest and the Handler.
func FuzzTokenHeader(f *testing.F) {
	for _, s := range []string{"1", "42", "0", "", "-1", "18446744073709551615", "18446744073709551616", "7\n7", "7\n8", " 7", "abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		values := strings.Split(header, "\n")
		r := httptest.NewRequest(http.MethodPut, "/r", nil)
		for _, v := range values {
			r.Header.Add(httpfence.Header, v)
		}
		tok, err := httpfence.TokenFromRequest(r)
		if err == nil {
			want, perr := fencing.ParseToken(values[0])
			if len(values) != 1 || perr != nil || want != tok || tok == 0 {
				t.Fatalf("TokenFromRequest(%q) = %d; want an error or %d (%v)", values, tok, want, perr)
			}
		} else if !errors.Is(err, fencing.ErrInvalidToken) {
			t.Fatalf("TokenFromRequest(%q) = %v; want an error wrapping %v", values, err, fencing.ErrInvalidToken)
		}

		var g fencing.Guard
		ran := false
		h, herr := httpfence.Handler(&g, func(*http.Request) string { return "r" }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			w.WriteHeader(http.StatusNoContent)
		}))
		if herr != nil {
			t.Fatal(herr)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case err == nil && (w.Code != http.StatusNoContent || !ran || g.Highest("r") != tok):
			t.Fatalf("Handler with %s %q = %d (ran %v, highest %d); want 204 and token %d recorded", httpfence.Header, values, w.Code, ran, g.Highest("r"), tok)
		case err != nil && (w.Code != http.StatusBadRequest || ran || g.Highest("r") != 0):
			t.Fatalf("Handler with %s %q = %d (ran %v); want 400 without running the handler", httpfence.Header, values, w.Code, ran)
		}
	})
}
