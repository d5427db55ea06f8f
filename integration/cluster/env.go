package cluster

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// containersProvider builds the testcontainers provider. containers.go sets
// it from an init function; it is a variable so that this file does not
// depend on that one being compiled in.
var containersProvider func() Provider

// FromEnv returns the provider named by FENCELOCK_PROVIDER: "process" (the
// default when unset or empty) or "containers". Any other value fails the
// test, as does "containers" when that provider is not compiled in.
func FromEnv(t testing.TB) Provider {
	t.Helper()
	switch name := strings.TrimSpace(os.Getenv("FENCELOCK_PROVIDER")); name {
	case "", "process":
		return ProcessProvider()
	case "containers":
		if containersProvider == nil {
			t.Fatalf("cluster: FENCELOCK_PROVIDER=containers, but the containers provider is not built into this binary")
		}
		return containersProvider()
	default:
		t.Fatalf("cluster: FENCELOCK_PROVIDER=%q: want \"process\" or \"containers\"", name)
	}
	return nil
}

// BackendsEnv names the variable that limits the backends the tests start
// clusters of: a comma-separated list of "etcd" and "zookeeper"; unset or
// empty means both.
const BackendsEnv = "FENCELOCK_BACKENDS"

// SkipUnlessRequested skips the test when FENCELOCK_BACKENDS is set and does
// not list kind. The reason starts with "not requested: FENCELOCK_BACKENDS=",
// which is how the summary of "make test" tells an exclusion somebody asked
// for from a skip that nobody did. An unknown name in the list fails the
// test rather than quietly running nothing. Both providers call it from
// Start; a test that needs a backend before starting a cluster calls it
// itself.
func SkipUnlessRequested(t testing.TB, kind Kind) {
	t.Helper()
	list := strings.TrimSpace(os.Getenv(BackendsEnv))
	if list == "" {
		return
	}
	found := false
	for _, name := range strings.Split(list, ",") {
		switch Kind(strings.TrimSpace(name)) {
		case kind:
			found = true
		case Etcd, ZooKeeper:
		default:
			t.Fatalf("cluster: %s=%q: unknown backend %q; want a comma-separated list of %q and %q", BackendsEnv, list, strings.TrimSpace(name), Etcd, ZooKeeper)
		}
	}
	if !found {
		t.Skipf("not requested: %s=%s (this test needs %s)", BackendsEnv, list, kind)
	}
}

// InCI reports whether CI=true: missing servers then fail tests instead of
// skipping them.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable fails the test under CI and skips it otherwise, so that a
// developer without the servers or tools installed can still run "go
// test" by hand.
// "make test" fails on such a skip too: its summary fails the run on every
// skip that does not start with "not requested:".
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// repoRoot returns the root of the fencelock repository, or "" if it cannot
// be found. It looks up from this source file's location (absent under
// -trimpath) and then from the working directory, which "go test" sets to
// the package directory.
func repoRoot() string {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "integration", "go.mod")); err == nil {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}
