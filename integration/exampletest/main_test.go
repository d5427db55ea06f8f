// Package exampletest runs the example programs of examples/ against real
// 3-member etcd clusters and 3-server ZooKeeper ensembles started by package
// cluster. The programs are built once with "go build" in the examples
// module and run as subprocesses, so that a test can freeze (SIGSTOP) or
// kill (SIGKILL) one instance while another takes over.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// bins holds the example programs, built by the first test that runs one.
var bins testutil.Binaries

func TestMain(m *testing.M) { testutil.Main(m, bins.Remove) }

// The example programs, as directories of the examples module.
var programs = []string{"cache", "cron", "demo", "guarded", "inventory", "leader", "metrics", "pool"}

// bin builds every example once per test binary and returns the path of
// program's executable.
func bin(t testing.TB, program string) string {
	t.Helper()
	pkgs := make([]string, len(programs))
	for i, p := range programs {
		pkgs[i] = "./" + p
	}
	return filepath.Join(bins.Build(t, filepath.Join("..", "..", "examples"), pkgs...), program)
}

// proc is a running example program.
type proc struct {
	*testutil.Proc
	t    testing.TB
	name string
}

// start runs program with args. It is killed, by its PID, in t.Cleanup if
// still running (and continued first, if a test froze it).
func start(t testing.TB, program string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin(t, program), args...)
	cmd.Env = append(os.Environ(), "FENCELOCK_URL=") // only what the test passes
	return &proc{Proc: testutil.StartProc(t, cmd, testutil.ProcConfig{LineBuffer: 1000, DropLines: true}), t: t, name: program}
}

// expect reads stdout lines until one matches re and returns its
// submatches, failing the test after timeout or at EOF.
func (p *proc) expect(timeout time.Duration, re *regexp.Regexp) []string {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.Lines:
			if !ok {
				p.t.Fatalf("%s: stdout ended without a line matching %q (stderr %q)", p.name, re, p.Stderr.String())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timer.C:
			p.t.Fatalf("%s: no line matching %q after %v", p.name, re, timeout)
		}
	}
}

// wait waits for the process to exit and returns its status.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.Exited():
		return p.Code()
	case <-timer.C:
		p.t.Fatalf("%s: still running after %v", p.name, timeout)
	}
	return 0
}

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, s, err)
	}
}

// runProgram runs program to completion and returns its status, stdout
// and stderr.
func runProgram(t testing.TB, timeout time.Duration, program string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, program, args...)
	p.Stdin.Close()
	code := p.wait(timeout)
	return code, p.Stdout.String(), p.Stderr.String()
}
