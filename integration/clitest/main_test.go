// Package clitest runs the fencelock command (cmd/fencelock) end to end:
// the binary is built once with "go build", and every test runs it as a
// subprocess against a real 3-member etcd cluster or 3-server ZooKeeper
// ensemble started by package cluster.
package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// bins holds the fencelock binary, built by the first test that runs it.
var bins testutil.Binaries

func TestMain(m *testing.M) { testutil.Main(m, bins.Remove) }

// fencelockBin builds cmd/fencelock once per test binary and returns its
// path.
func fencelockBin(t testing.TB) string {
	t.Helper()
	return filepath.Join(bins.Build(t, filepath.Join("..", ".."), "./cmd/fencelock"), "fencelock")
}

// proc is a running fencelock subprocess.
type proc struct {
	*testutil.Proc
	t testing.TB
}

// start runs fencelock with args and FENCELOCK_URL=url (unless url is "").
// The process is killed, by its PID, in t.Cleanup if it is still running.
func start(t testing.TB, url string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(fencelockBin(t), args...)
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCELOCK_URL=") {
			env = append(env, kv)
		}
	}
	if url != "" {
		env = append(env, "FENCELOCK_URL="+url)
	}
	cmd.Env = env
	return &proc{Proc: testutil.StartProc(t, cmd, testutil.ProcConfig{}), t: t}
}

// line returns the next stdout line, failing the test after timeout or at
// EOF.
func (p *proc) line(timeout time.Duration) string {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case l, ok := <-p.Lines:
		if !ok {
			p.t.Fatalf("fencelock %q: stdout ended; want another line (stderr %q)", p.Cmd.Args[1:], p.Stderr.String())
		}
		return l
	case <-timer.C:
		p.t.Fatalf("fencelock %q: no line on stdout after %v (stdout so far %q, stderr %q)", p.Cmd.Args[1:], timeout, p.Stdout.String(), p.Stderr.String())
	}
	return ""
}

// wait waits for the process to exit and returns its status and stderr,
// draining the rest of stdout.
func (p *proc) wait(timeout time.Duration) (int, string) {
	p.t.Helper()
	p.DrainLines()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.Exited():
		return p.Code(), p.Stderr.String()
	case <-timer.C:
		p.t.Fatalf("fencelock %q: still running after %v (stdout %q, stderr %q)", p.Cmd.Args[1:], timeout, p.Stdout.String(), p.Stderr.String())
	}
	return 0, ""
}

// fencelock runs fencelock to completion and returns its status, stdout
// and stderr.
func fencelock(t testing.TB, url string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, url, args...)
	p.Stdin.Close()
	code, stderr := p.wait(60 * time.Second)
	return code, p.Stdout.String(), stderr
}

// oneLine checks that s is one line starting with "fencelock: " and
// containing want.
func oneLine(t testing.TB, what, s, want string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasPrefix(s, "fencelock: ") || !strings.Contains(s, want) {
		t.Errorf("%s: stderr = %q; want one line \"fencelock: ...%s...\"", what, s, want)
	}
}
