// Package clitest runs the fencelock command (cmd/fencelock) end to end:
// the binary is built once with "go build", and every test runs it as a
// subprocess against a real 3-member etcd cluster or 3-server ZooKeeper
// ensemble started by package cluster.
package clitest

import (
	"bufio"
	"bytes"
	"context"
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
	dir, err := os.MkdirTemp("", "fencelock-clitest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "clitest:", err)
		os.Exit(1)
	}
	binDir = dir
	defer os.RemoveAll(dir)
	leakcheck.Main(m)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// fencelockBin builds cmd/fencelock once per test binary and returns its
// path.
func fencelockBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "cmd", "fencelock", "main.go")); err != nil {
			buildErr = fmt.Errorf("cannot find cmd/fencelock from %s: %w", root, err)
			return
		}
		buildPath = filepath.Join(binDir, "fencelock")
		cmd := exec.Command(goTool(), "build", "-o", buildPath, "./cmd/fencelock")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/fencelock: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// proc is a running fencelock subprocess.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line; closed at EOF
	stderr *syncBuffer
	stdout *syncBuffer // every stdout line, for failure messages
	exited chan struct{}
	code   int
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
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 100), stderr: new(syncBuffer), stdout: new(syncBuffer), exited: make(chan struct{})}
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
		t.Fatalf("start fencelock %q: %v", args, err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.stdout.WriteString(sc.Text() + "\n")
			p.lines <- sc.Text()
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
			cmd.Process.Kill()
			p.stdin.Close()
			go func() {
				for range p.lines {
				}
			}()
			<-p.exited
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

// line returns the next stdout line, failing the test after timeout or at
// EOF.
func (p *proc) line(timeout time.Duration) string {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("fencelock %q: stdout ended; want another line (stderr %q)", p.cmd.Args[1:], p.stderr.String())
		}
		return l
	case <-timer.C:
		p.t.Fatalf("fencelock %q: no line on stdout after %v (stdout so far %q, stderr %q)", p.cmd.Args[1:], timeout, p.stdout.String(), p.stderr.String())
	}
	return ""
}

// wait waits for the process to exit and returns its status and stderr,
// draining the rest of stdout.
func (p *proc) wait(timeout time.Duration) (int, string) {
	p.t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.code, p.stderr.String()
	case <-timer.C:
		p.t.Fatalf("fencelock %q: still running after %v (stdout %q, stderr %q)", p.cmd.Args[1:], timeout, p.stdout.String(), p.stderr.String())
	}
	return 0, ""
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// fencelock runs fencelock to completion and returns its status, stdout
// and stderr.
func fencelock(t testing.TB, url string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, url, args...)
	p.stdin.Close()
	code, stderr := p.wait(60 * time.Second)
	return code, p.stdout.String(), stderr
}

// oneLine checks that s is one line starting with "fencelock: " and
// containing want.
func oneLine(t testing.TB, what, s, want string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasPrefix(s, "fencelock: ") || !strings.Contains(s, want) {
		t.Errorf("%s: stderr = %q; want one line \"fencelock: ...%s...\"", what, s, want)
	}
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
	nameSeq          atomic.Int64
	invalidNameChars = regexp.MustCompile(`[^A-Za-z0-9._:-]`)
)

// uniqueName returns a lock name no other test uses.
func uniqueName(t testing.TB) string {
	base := invalidNameChars.ReplaceAllString(t.Name(), "_")
	return fmt.Sprintf("%s/%d-%d", base, time.Now().UnixNano(), nameSeq.Add(1))
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
