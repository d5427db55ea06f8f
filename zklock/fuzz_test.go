package zklock

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencelock/fencelock/internal/queue"
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

// FuzzChildName checks the parsing of a lock's child names, which come
// from the server: whatever it accepts has the layout newPrefix writes,
// and the names newPrefix makes parse back to their request.
func FuzzChildName(f *testing.F) {
	for _, s := range []string{"~0123456789abcdef0123456789abcdef~0000000042", "~0123456789abcdef0123456789abcdef~r~0000000042",
		"~0123456789abcdef0123456789abcdef~s12~0000000001", "~~0000000001", "sub", "~0123456789abcdef0123456789abcdef~s0~0000000042"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		req, ok := parseChild(name)
		if !ok {
			return
		}
		if newPrefix(req)[randLen:]+seqOf(name) != name[randLen:] {
			t.Fatalf("parseChild(%q) = %v, which newPrefix would not write so", name, req)
		}
		if req.Kind == queue.Permit && queue.CheckLimit(req.Limit) != nil {
			t.Fatalf("parseChild(%q) accepted limit %d", name, req.Limit)
		}
	})
}
