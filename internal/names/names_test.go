package names

import (
	"testing"
	"unsafe"
)

func TestWithin(t *testing.T) {
	tests := []struct {
		s    string
		at   int
		name string
		want string
		part bool // the result shares s's bytes
	}{
		{"locks/a/b/#0001", 6, "a/b", "a/b", true},
		{"/root/x/~abc~0000000001", 6, "x", "x", true},
		{"locks/a/#1", 6, "b", "b", false},
		{"locks/a", 6, "a/b", "a/b", false},
		{"short", 9, "a", "a", false},
		{"short", -1, "a", "a", false},
		{"", 0, "", "", false},
	}
	for _, tt := range tests {
		got := Within(tt.s, tt.at, tt.name)
		if got != tt.want {
			t.Errorf("Within(%q, %d, %q) = %q; want %q", tt.s, tt.at, tt.name, got, tt.want)
			continue
		}
		if tt.part && unsafe.StringData(got) != unsafe.StringData(tt.s[tt.at:]) {
			t.Errorf("Within(%q, %d, %q) is a copy; want a part of s", tt.s, tt.at, tt.name)
		}
	}
}
