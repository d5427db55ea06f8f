package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// Main is leakcheck.Main with a teardown for what the test binary shares
// between its tests (a built binary, a database server): it runs the
// tests, then cleanup if it is not nil, then, if everything passed, waits
// up to five seconds for every goroutine the tests started to end, and
// exits. An error from cleanup is printed and fails the binary. Call it
// from TestMain.
func Main(m *testing.M, cleanup func() error) {
	code := m.Run()
	if cleanup != nil {
		if err := cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 {
		if leaked := leakcheck.Wait(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines still running after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Binaries builds the commands a test binary runs as child processes, once
// per test binary, into a temporary directory of its own. The zero value is
// ready to use. Build is safe for concurrent use; call Remove, in Main's
// cleanup, once the tests have run.
type Binaries struct {
	once sync.Once
	dir  string
	err  error
}

// Build runs "go build -o DIR/ pkgs..." in moduleDir (relative to the test's
// working directory) the first time it is called, and returns DIR, where
// each package's command is named after its directory. Every call must
// pass the same arguments; a build failure fails every test that calls
// Build.
func (b *Binaries) Build(t testing.TB, moduleDir string, pkgs ...string) string {
	t.Helper()
	b.once.Do(func() { b.dir, b.err = build(moduleDir, pkgs) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.dir
}

func build(moduleDir string, pkgs []string) (string, error) {
	mod, err := filepath.Abs(moduleDir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(mod, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the module in %s: %w", moduleDir, err)
	}
	dir, err := os.MkdirTemp("", "fencelock-bin-")
	if err != nil {
		return "", err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command(GoTool(), args...)
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), mod, err, out)
	}
	return dir, nil
}

// Remove deletes the directory Build made, if any.
func (b *Binaries) Remove() error {
	if b.dir == "" {
		return nil
	}
	return os.RemoveAll(b.dir)
}
