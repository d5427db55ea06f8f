package lock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		why  string // in the error of an invalid name
	}{
		{"a", true, ""},
		{"jobs/nightly", true, ""},
		{"tenant:42/rows", true, ""},
		{"A-Z_a.z:0-9", true, ""},
		{"...", true, ""},          // only "." and ".." are reserved
		{".hidden/a..b", true, ""}, // dots inside a segment are fine
		{"a/b/c/d/e/f", true, ""},
		{strings.Repeat("a", lock.MaxNameLen), true, ""},
		{strings.Repeat("a/", lock.MaxNameLen/2) + "a", true, ""}, // 255 bytes of segments

		{"", false, "empty"},
		{strings.Repeat("a", lock.MaxNameLen+1), false, "256 bytes, longer than 255"},
		{"/", false, "empty segment"},
		{"/a", false, "empty segment at offset 0"},
		{"a/", false, "empty segment at offset 2"},
		{"a//b", false, "empty segment at offset 2"},
		{".", false, `segment "."`},
		{"..", false, `segment ".."`},
		{"a/.", false, `segment "." at offset 2`},
		{"a/../b", false, `segment ".." at offset 2`},
		{"./a", false, `segment "."`},
		{"a b", false, "byte ' ' at offset 1"},
		{"a\x00", false, `byte '\x00' at offset 1`},
		{"a\tb", false, "offset 1"},
		{"a*", false, "byte '*'"},
		{"a?b", false, "byte '?'"},
		{"a%2Fb", false, "byte '%'"},
		{`a\b`, false, `byte '\\'`},
		{"ä", false, "offset 0"},
		{"日本", false, "offset 0"},
		{"a\xffb", false, "offset 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := lock.ValidateName(tt.name)
			if tt.ok {
				if err != nil {
					t.Errorf("ValidateName(%q) = %v; want nil", tt.name, err)
				}
				return
			}
			if !errors.Is(err, lock.ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v; want an error wrapping %v", tt.name, err, lock.ErrInvalidName)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("ValidateName(%q) = %q; want it to say %q", tt.name, err, tt.why)
			}
		})
	}
}
