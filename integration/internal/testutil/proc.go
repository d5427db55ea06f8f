package testutil

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// GoTool returns the path of the go command: the one on PATH, else the one
// of the toolchain that built the test binary.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// ExitCode returns the status of a process that has been waited for, the
// way a shell reports it: its exit code, 128+N if signal N killed it, and
// -1 if it did not run or waiting for it failed for another reason. st and
// err are what exec.Cmd.Wait left in ProcessState and returned.
func ExitCode(st *os.ProcessState, err error) int {
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

// ProcConfig tunes StartProc. The zero value is the default.
type ProcConfig struct {
	// LineBuffer is the capacity of Proc.Lines. Zero means 100.
	LineBuffer int
	// DropLines makes the reader drop a stdout line when Proc.Lines is
	// full, instead of waiting until the test takes one (which stops the
	// child once its pipe is full too). Proc.Stdout keeps every line
	// either way.
	DropLines bool
}

// Proc is a child process started by StartProc, with its standard input
// open for the test to write and its output captured. Its fields are set
// by StartProc and must not be changed; the buffers and channels are safe
// for concurrent use.
type Proc struct {
	// Cmd is the running command; Cmd.Process is valid.
	Cmd *exec.Cmd
	// Stdin is the child's standard input. Closing it tells a child that
	// reads it to finish.
	Stdin io.WriteCloser
	// Lines delivers the child's standard output line by line, and is
	// closed at the end of that output.
	Lines <-chan string
	// Stdout holds every line the child wrote to its standard output, each
	// ended by "\n".
	Stdout *SyncBuffer
	// Stderr holds everything the child wrote to its standard error.
	Stderr *SyncBuffer

	exited chan struct{}
	code   int
}

// StartProc starts cmd, whose Stdin, Stdout and Stderr must be unset, with
// pipes to its standard input and output and its standard error collected
// in Proc.Stderr. A goroutine reads the output until it ends and then
// waits for the child. In t.Cleanup a child still running is sent SIGCONT
// (in case the test froze it) and SIGKILL, by its PID, and waited for; if
// the test failed, the child's output is logged.
func StartProc(t testing.TB, cmd *exec.Cmd, cfg ProcConfig) *Proc {
	t.Helper()
	if cfg.LineBuffer == 0 {
		cfg.LineBuffer = 100
	}
	lines := make(chan string, cfg.LineBuffer)
	p := &Proc{Cmd: cmd, Lines: lines, Stdout: new(SyncBuffer), Stderr: new(SyncBuffer), exited: make(chan struct{})}
	var err error
	if p.Stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatalf("StdinPipe() = %v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe() = %v", err)
	}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", cmd.Args, err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.Stdout.WriteString(sc.Text() + "\n")
			if cfg.DropLines {
				select {
				case lines <- sc.Text():
				default: // nobody is reading that far; Stdout keeps it all
				}
			} else {
				lines <- sc.Text()
			}
		}
		close(lines)
		// Wait only after the last read, as StdoutPipe requires.
		err := cmd.Wait()
		p.code = ExitCode(cmd.ProcessState, err)
	}()
	t.Cleanup(func() {
		if p.Running() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = p.Stdin.Close()
			p.DrainLines()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%q: stdout:\n%s\nstderr:\n%s", cmd.Args, p.Stdout.String(), p.Stderr.String())
		}
	})
	return p
}

// Exited is closed once the child has exited and been waited for.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Code waits until the child has exited and returns its status as
// ExitCode reports it.
func (p *Proc) Code() int {
	<-p.exited
	return p.code
}

// Running reports whether the child has not been waited for yet.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// DrainLines discards, in a goroutine of its own, every line on Lines that
// the test has not taken, so that the child is never held up writing its
// output. Proc.Stdout still gets every line.
func (p *Proc) DrainLines() {
	go func() {
		for range p.Lines {
		}
	}()
}
