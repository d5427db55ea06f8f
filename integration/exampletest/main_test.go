// Package exampletest runs the example programs of examples/ against real
// 3-member etcd clusters and 3-server ZooKeeper ensembles started by package
// cluster. The programs are built once with "go build" in the examples
// module and run as subprocesses, so that a test can freeze (SIGSTOP) or
// kill (SIGKILL) one instance while another takes over.
package exampletest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencelock-exampletest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "exampletest:", err)
		os.Exit(1)
	}
	binDir = dir
	defer os.RemoveAll(dir)
	leakcheck.Main(m)
}

// The example programs, as directories of the examples module.
var programs = []string{"cron", "demo", "guarded", "inventory", "leader"}

var (
	buildOnce sync.Once
	buildErr  error
)

// bin builds every example once per test binary and returns the path of
// program's executable.
func bin(t testing.TB, program string) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", "..", "examples"))
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			buildErr = fmt.Errorf("cannot find the examples module: %w", err)
			return
		}
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		for _, p := range programs {
			args = append(args, "./"+p)
		}
		cmd := exec.Command(goTool(), args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, program)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// proc is a running example program.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line; closed at EOF
	stdout *syncBuffer
	stderr *syncBuffer
	exited chan struct{}
	code   int
}

// start runs program with args. It is killed, by its PID, in t.Cleanup if
// still running (and continued first, if a test froze it).
func start(t testing.TB, program string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin(t, program), args...)
	cmd.Env = append(os.Environ(), "FENCELOCK_URL=") // only what the test passes
	p := &proc{t: t, name: program, cmd: cmd, lines: make(chan string, 1000), stdout: new(syncBuffer), stderr: new(syncBuffer), exited: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %q: %v", program, args, err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.stdout.WriteString(sc.Text() + "\n")
			select {
			case p.lines <- sc.Text():
			default: // nobody is reading that far; stdout keeps it all
			}
		}
	}()
	go func() {
		<-readDone
		err := cmd.Wait()
		p.code = exitCode(cmd.ProcessState, err)
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			p.stdin.Close()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s %q: stdout:\n%s\nstderr:\n%s", program, args, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

func exitCode(st *os.ProcessState, err error) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1
	}
	return st.ExitCode()
}

// expect reads stdout lines until one matches re and returns its
// submatches, failing the test after timeout or at EOF.
func (p *proc) expect(timeout time.Duration, re *regexp.Regexp) []string {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("%s: stdout ended without a line matching %q (stderr %q)", p.name, re, p.stderr.String())
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
	case <-p.exited:
		return p.code
	case <-timer.C:
		p.t.Fatalf("%s: still running after %v", p.name, timeout)
	}
	return 0
}

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, s, err)
	}
}

// runProgram runs program to completion and returns its status, stdout
// and stderr.
func runProgram(t testing.TB, timeout time.Duration, program string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, program, args...)
	p.stdin.Close()
	code := p.wait(timeout)
	return code, p.stdout.String(), p.stderr.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var (
	nameSeq      atomic.Int64
	invalidChars = regexp.MustCompile(`[^A-Za-z0-9._:-]`)
)

// unique returns a lock name segment no other test uses.
func unique(t testing.TB) string {
	return fmt.Sprintf("%s-%d-%d", invalidChars.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e9, nameSeq.Add(1))
}
