package testutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.WriteString("ab")
				_, _ = b.Write([]byte("c"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got, want := len(b.String()), 4*100*3; got != want {
		t.Errorf("len(String()) = %d; want %d", got, want)
	}
}

func TestUniqueName(t *testing.T) {
	for _, sub := range []string{"plain", "with space", "with/slash", "odd=chars?#"} {
		t.Run(sub, func(t *testing.T) {
			a, b := UniqueName(t), UniqueName(t)
			if a == b {
				t.Errorf("UniqueName() = %q twice; want different names", a)
			}
			for _, n := range []string{a, b} {
				if err := lock.ValidateName(n); err != nil {
					t.Errorf("ValidateName(%q) = %v; want nil", n, err)
				}
				if strings.Contains(n, "/") {
					t.Errorf("UniqueName() = %q; want a single segment", n)
				}
			}
		})
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, 10*time.Second, "third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond called %d times; want 3", n)
	}
}

func TestContext(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = Context(t, time.Hour)
		if ctx.Err() != nil {
			t.Fatalf("Err() = %v during the test; want nil", ctx.Err())
		}
	})
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("Err() after the test = %v; want %v", ctx.Err(), context.Canceled)
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, ch, time.Second, "a value"); got != 7 {
		t.Errorf("Recv() = %d; want 7", got)
	}
}

func TestStartProc(t *testing.T) {
	tests := []struct {
		name   string
		script string
		stdin  string
		lines  []string
		stderr string
		code   int
	}{
		{"ExitStatus", "read x; echo one; echo $x; echo err >&2; exit 3", "two\n", []string{"one", "two"}, "err\n", 3},
		{"KilledBySignal", "echo up; kill -KILL $$", "", []string{"up"}, "", 128 + int(syscall.SIGKILL)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := StartProc(t, exec.Command("/bin/sh", "-c", tt.script), ProcConfig{})
			if tt.stdin != "" {
				if _, err := p.Stdin.Write([]byte(tt.stdin)); err != nil {
					t.Fatalf("write stdin: %v", err)
				}
			}
			for _, want := range tt.lines {
				if got := Recv(t, p.Lines, 30*time.Second, "a line"); got != want {
					t.Errorf("line = %q; want %q", got, want)
				}
			}
			Recv(t, p.Exited(), 30*time.Second, "exit")
			if got := p.Code(); got != tt.code {
				t.Errorf("Code() = %d; want %d", got, tt.code)
			}
			if got, want := p.Stdout.String(), strings.Join(tt.lines, "\n")+"\n"; got != want {
				t.Errorf("Stdout = %q; want %q", got, want)
			}
			if got := p.Stderr.String(); got != tt.stderr {
				t.Errorf("Stderr = %q; want %q", got, tt.stderr)
			}
			if p.Running() {
				t.Errorf("Running() = true after exit; want false")
			}
		})
	}
}

// TestStartProcCleanup checks that a child still running at the end of
// the test is killed, even while frozen and with unread output.
func TestStartProcCleanup(t *testing.T) {
	var p *Proc
	t.Run("inner", func(t *testing.T) {
		p = StartProc(t, exec.Command("/bin/sh", "-c", "while :; do echo y; done"), ProcConfig{LineBuffer: 1})
		Recv(t, p.Lines, 30*time.Second, "a line")
		if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP: %v", err)
		}
	})
	if p.Running() {
		t.Fatalf("Running() = true after the test's cleanup; want false")
	}
	if got, want := p.Code(), 128+int(syscall.SIGKILL); got != want {
		t.Errorf("Code() = %d; want %d", got, want)
	}
}

func TestStartProcDropLines(t *testing.T) {
	p := StartProc(t, exec.Command("/bin/sh", "-c", "for i in 1 2 3 4 5; do echo $i; done"), ProcConfig{LineBuffer: 2, DropLines: true})
	Recv(t, p.Exited(), 30*time.Second, "exit")
	var got []string
	for l := range p.Lines {
		got = append(got, l)
	}
	if len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("Lines = %q; want the first 2 lines only", got)
	}
	if want := "1\n2\n3\n4\n5\n"; p.Stdout.String() != want {
		t.Errorf("Stdout = %q; want %q", p.Stdout.String(), want)
	}
}

func TestExitCodeNotStarted(t *testing.T) {
	if got := ExitCode(nil, errors.New("not started")); got != -1 {
		t.Errorf("ExitCode(nil, err) = %d; want -1", got)
	}
}

func TestBinaries(t *testing.T) {
	mod := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":        "module example.com/hello\n\ngo 1.22\n",
		"hello/main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n",
	} {
		path := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b Binaries
	dir := b.Build(t, mod, "./hello")
	if again := b.Build(t, mod, "./hello"); again != dir {
		t.Errorf("second Build() = %q; want %q", again, dir)
	}
	out, err := exec.Command(filepath.Join(dir, "hello")).Output()
	if err != nil || string(out) != "hello\n" {
		t.Errorf("built hello = %q, %v; want \"hello\\n\", nil", out, err)
	}
	if err := b.Remove(); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(%s) after Remove = %v; want not exist", dir, err)
	}
}
