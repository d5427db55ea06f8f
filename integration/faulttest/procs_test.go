package faulttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// clientProc is one client process and what the test knows about it.
type clientProc struct {
	id      int
	cfg     clientConfig
	proxies []*cluster.Proxy // the proxies its Locker talks through
	member  int              // with a single endpoint, the member behind it; else -1

	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *testutil.SyncBuffer
	done  chan struct{} // closed once the process has exited
	werr  error         // cmd.Wait's error, set before done closes

	mu       sync.Mutex
	evs      []event
	off      int64
	partial  []byte
	stopped  bool  // frozen with SIGSTOP
	killed   int64 // when it was killed with SIGKILL, 0 if never
	graceful bool  // asked to stop
}

// startClient starts a client process with cfg. The caller must make sure
// it ends (stop or kill, then wait).
func startClient(cfg clientConfig, proxies []*cluster.Proxy, member int) (*clientProc, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// TestMain runs the client before any test; "-test.run=^$" makes sure
	// that nothing else would run if it did not.
	cmd := exec.Command(exe, "-test.run=^$", "-test.timeout=0")
	cmd.Env = append(os.Environ(), clientEnv+"="+string(b))
	p := &clientProc{id: cfg.ID, cfg: cfg, proxies: proxies, member: member, cmd: cmd, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.werr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *clientProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freeze stops the process with SIGSTOP, as a long garbage-collection
// pause would, and returns once the kernel reports it stopped: a signal
// sent is not yet a process frozen, and a fault that assumed so could
// pass without having happened.
func (p *clientProc) freeze() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP client %d: %w", p.id, err)
	}
	p.stopped = true
	if err := testutil.WaitFrozen(p.cmd.Process.Pid, 5*time.Second); err != nil {
		return fmt.Errorf("SIGSTOP client %d did not take: %w", p.id, err)
	}
	return nil
}

// thaw resumes a frozen process.
func (p *clientProc) thaw() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT client %d: %w", p.id, err)
	}
	p.stopped = false
	return nil
}

// kill ends the process with SIGKILL.
func (p *clientProc) kill(at int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("SIGKILL client %d: %w", p.id, err)
	}
	if p.killed == 0 {
		p.killed = at
	}
	return nil
}

// killedAt returns when the process was killed, 0 if it was not.
func (p *clientProc) killedAt() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// stop asks the process to finish (it releases and closes its Locker)
// and waits up to timeout for it to exit with status 0.
func (p *clientProc) stop(timeout time.Duration) error {
	p.mu.Lock()
	p.graceful = true
	p.mu.Unlock()
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.abort()
		return fmt.Errorf("client %d did not exit within %v of being asked to stop", p.id, timeout)
	}
	if p.werr != nil {
		return fmt.Errorf("client %d exited with %v", p.id, p.werr)
	}
	return nil
}

// abort kills the process if it is still running and waits for it.
func (p *clientProc) abort() {
	if !p.exited() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	p.stdin.Close()
	<-p.done
}

// signaledKill reports whether the process ended by SIGKILL.
func (p *clientProc) signaledKill() bool {
	if !p.exited() {
		return false
	}
	var ee *exec.ExitError
	if !errors.As(p.werr, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// events returns the client's log as far as it has been written.
func (p *clientProc) events() []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.Open(p.cfg.LogPath)
	if err != nil {
		return append([]event(nil), p.evs...)
	}
	defer f.Close()
	if _, err := f.Seek(p.off, io.SeekStart); err == nil {
		b, _ := io.ReadAll(f)
		p.off += int64(len(b))
		data := append(p.partial, b...)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		consumed := 0
		for sc.Scan() {
			line := sc.Bytes()
			if consumed+len(line) >= len(data) || data[consumed+len(line)] != '\n' {
				break // the last line is not complete yet
			}
			consumed += len(line) + 1
			var e event
			if json.Unmarshal(line, &e) == nil {
				p.evs = append(p.evs, e)
			}
		}
		p.partial = append([]byte(nil), data[consumed:]...)
	}
	return append([]event(nil), p.evs...)
}

// tail returns the last n lines of the client's output and log, for
// failure messages.
func (p *clientProc) tail(n int) string {
	var b strings.Builder
	out := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	fmt.Fprintf(&b, "--- client %d output (last %d lines):\n%s\n", p.id, n, strings.Join(out[max(0, len(out)-n):], "\n"))
	evs := p.events()
	fmt.Fprintf(&b, "--- client %d log (last %d events):\n", p.id, n)
	for _, e := range evs[max(0, len(evs)-n):] {
		j, _ := json.Marshal(e)
		fmt.Fprintf(&b, "%s\n", j)
	}
	return b.String()
}
