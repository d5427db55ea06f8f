package names

import (
	"strings"
	"testing"
)

func FuzzParseNamespace(f *testing.F) {
	for _, s := range []string{"app/locks", "/app/locks/", "/", "", "//a", "a//b", "a/", "/zookeeper", "zookeeper2/x", "/a/./b", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ns string) {
		got, err := ParseNamespace(ns)
		if err != nil {
			if got != (Namespace{}) {
				t.Fatalf("ParseNamespace(%q) = %+v, %v; want the zero Namespace with an error", ns, got, err)
			}
			return
		}
		// Accepted: a valid name, the slashes recorded as given, and the
		// canonical forms parse to the same namespace.
		if err := Check(got.Path); err != nil {
			t.Fatalf("ParseNamespace(%q).Path = %q, which is not a valid name: %v", ns, got.Path, err)
		}
		if got.Rooted != strings.HasPrefix(ns, "/") {
			t.Fatalf("ParseNamespace(%q).Rooted = %v", ns, got.Rooted)
		}
		if strings.TrimSuffix(strings.TrimPrefix(ns, "/"), "/") != got.Path {
			t.Fatalf("ParseNamespace(%q).Path = %q; want the input without its outer slashes", ns, got.Path)
		}
		if first, _, _ := strings.Cut(got.Path, "/"); first == "zookeeper" {
			t.Fatalf("ParseNamespace(%q) accepted the reserved /zookeeper", ns)
		}
		for _, form := range []string{got.Path, "/" + got.Path, got.Path + "/", "/" + got.Path + "/"} {
			again, err := ParseNamespace(form)
			if err != nil || again.Path != got.Path {
				t.Fatalf("ParseNamespace(%q) = %+v, %v; want path %q", form, again, err, got.Path)
			}
		}
	})
}
