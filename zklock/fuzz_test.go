package zklock

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencelock/fencelock/lock"
)

func FuzzZnodePath(f *testing.F) {
	for _, s := range []string{"/a", "/a/b", "/", "", "a", "/a/", "//a", "/a/../b", "/a/.", "/a\x00b", "/a\x7fb", "/\xff", "/\ue000", "/\ufff0", "/é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := checkZnodePath(p)
		if ferr := checkFencedArgs(t.Context(), nil, p); !errors.Is(ferr, lock.ErrInvalidConfig) {
			t.Fatalf("checkFencedArgs(nil conn, %q) = %v; want an error wrapping %v", p, ferr, lock.ErrInvalidConfig)
		}
		if err != nil {
			return
		}
		// Accepted: absolute, already clean, not the root, and only
		// characters ZooKeeper accepts.
		if !strings.HasPrefix(p, "/") || p == "/" || path.Clean(p) != p || !utf8.ValidString(p) {
			t.Fatalf("checkZnodePath(%q) = nil; want an error (not a clean absolute path)", p)
		}
		for _, r := range p {
			if r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0xd800 && r <= 0xf8ff || r >= 0xfff0 {
				t.Fatalf("checkZnodePath(%q) = nil; it has %U, which ZooKeeper refuses", p, r)
			}
		}
	})
}

// FuzzRoot checks WithRoot against the namespace rule of lock.URLPath: a
// root is accepted exactly when it is accepted as a URL path.
func FuzzRoot(f *testing.F) {
	for _, s := range []string{"app/locks", "/app/locks/", "/", "", "//a", "a//b", "/zookeeper/x", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, root string) {
		o, err := buildOptions([]Option{WithRoot(root)})
		if err != nil {
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Fatalf("WithRoot(%q) = %v; want an error wrapping %v", root, err, lock.ErrInvalidConfig)
			}
			return
		}
		if checkZnodePath(o.root) != nil {
			t.Fatalf("WithRoot(%q) gave root %q, which is not a valid znode path", root, o.root)
		}
		if want := "/" + strings.Trim(root, "/"); o.root != want {
			t.Fatalf("WithRoot(%q) gave root %q; want %q", root, o.root, want)
		}
		if lock.ValidateName(strings.TrimPrefix(o.root, "/")) != nil {
			t.Fatalf("WithRoot(%q) gave root %q, which is not a lock name below /", root, o.root)
		}
	})
}
