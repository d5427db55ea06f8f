package names

import (
	"testing"
	"unsafe"
)

func TestBetween(t *testing.T) {
	tests := []struct {
		s, sep string
		at     int
		want   string
	}{
		{"locks/a/b/#0001-2", "/#", 6, "a/b"},
		{"locks/a/b/#0001-2~s3", "/#", 6, "a/b"},
		{"/root/x/y/~abc~0000000001", "/", 6, "x/y"},
		{"/x/~abc~0000000001", "/", 1, "x"},
		{"locks/a", "/#", 6, ""},
		{"k1", "/#", 0, ""},
		{"locks/#1", "/#", 6, ""},
		{"short/#", "/#", -1, ""},
		{"", "/", 0, ""},
	}
	for _, tt := range tests {
		got := Between(tt.s, tt.at, tt.sep)
		if got != tt.want {
			t.Errorf("Between(%q, %d, %q) = %q; want %q", tt.s, tt.at, tt.sep, got, tt.want)
			continue
		}
		if got != "" && unsafe.StringData(got) != unsafe.StringData(tt.s[tt.at:]) {
			t.Errorf("Between(%q, %d, %q) is a copy; want a part of s", tt.s, tt.at, tt.sep)
		}
	}
}
