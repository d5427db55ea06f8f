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
		"~0123456789abcdef0123456789abcdef~s12~0000000001", "~~0000000001", "sub", "~0123456789abcdef0123456789abcdef~s0~0000000042",
		"_c_0123456789abcdef0123456789abcdef-lock-0000000001", "_c_5bd6ab9e-2ba5-4e0a-8a47-7c6c8a0c1f3d-__READ__0000000001",
		"0123456789abcdef0123456789abcdef__rlock__0000000003", "x-latch-000000001", "~delay~~01~0000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		req, ok := parseChild(name)
		if !ok {
			return
		}
		if strings.Trim(seqOf(name), "0123456789") != "" {
			t.Fatalf("parseChild(%q) = %v, true; its sequence number is not 10 digits", name, req)
		}
		for _, y := range []Layout{LayoutCurator, LayoutCuratorReadWrite, LayoutCuratorLatch} {
			if _, ok := recipeName(y, req); ok {
				if back, ok := parseChild(newPrefix(y, req) + seqOf(name)); !ok || back != req {
					t.Fatalf("layout %s writes a record of %v that parses as %v, %v", y, req, back, ok)
				}
			}
		}
		if name[0] != marker {
			// Another recipe's record: its name before the sequence says its kind.
			i := len(recipeKinds) - 1
			for i >= 0 && !strings.HasSuffix(prefixOf(name), recipeKinds[i].name) {
				i--
			}
			if i < 0 || recipeKinds[i].req != req {
				t.Fatalf("parseChild(%q) = %v, true; it has no recipe's name for that kind", name, req)
			}
			return
		}
		if newPrefix(LayoutFencelock, req)[randLen:]+seqOf(name) != name[randLen:] {
			t.Fatalf("parseChild(%q) = %v, which newPrefix would not write so", name, req)
		}
		if req.Kind == queue.Permit && queue.CheckLimit(req.Limit) != nil {
			t.Fatalf("parseChild(%q) accepted limit %d", name, req.Limit)
		}
	})
}
