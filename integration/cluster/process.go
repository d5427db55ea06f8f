package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ProcessProvider returns the provider that runs servers as local
// processes: etcd from FENCELOCK_ETCD_BIN or integration/.cache/bin/etcd
// (built by "make deps"), ZooKeeper with java from JAVA_HOME or PATH and
// the jars in FENCELOCK_ZK_CLASSPATH (default: the Debian zookeeper
// package). Output goes to each member's Logs, not to files.
func ProcessProvider() Provider { return processProvider{} }

type processProvider struct{}

func (processProvider) Name() string { return "process" }

// startTimeout bounds the wait for a new cluster to become healthy.
const startTimeout = 2 * time.Minute

// startAttempts is how often a start is tried with fresh ports when a
// server could not bind its port.
const startAttempts = 3

// logTailLines is how much of each member's output a failed test prints.
const logTailLines = 200

var errPortInUse = errors.New("port already in use")

// errNoPeerCuts says that WithPeerCuts cannot be honoured on this machine.
var errNoPeerCuts = errors.New("cannot cut members off from their peers here")

func (p processProvider) Start(t testing.TB, kind Kind, opts ...Option) *Cluster {
	t.Helper()
	SkipUnlessRequested(t, kind)
	o, err := buildOptions(opts)
	if err != nil {
		t.Fatalf("cluster: start %s: %v", kind, err)
	}
	var lay layout
	switch kind {
	case Etcd:
		lay, err = etcdLayout(o)
	case ZooKeeper:
		lay, err = zkLayout(o)
	default:
		t.Fatalf("cluster: start %q: unknown kind; want %q or %q", kind, Etcd, ZooKeeper)
	}
	if err != nil {
		Unavailable(t, "cluster: start %s with the process provider: %v", kind, err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		begin := time.Now()
		c, err := startProcesses(t, kind, o, lay, filepath.Join(dir, fmt.Sprintf("try%d", attempt)))
		if err == nil {
			t.Logf("cluster: %s cluster of %d started in %v: %s", kind, o.members, time.Since(begin).Round(time.Millisecond), strings.Join(c.Endpoints(), ","))
			return c
		}
		if errors.Is(err, errNoPeerCuts) {
			Unavailable(t, "cluster: start %s: %v", kind, err)
		}
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			t.Logf("cluster: start %s (attempt %d): %v; retrying on other ports", kind, attempt, err)
			continue
		}
		t.Fatalf("cluster: start %s: %v", kind, err)
	}
}

// layout turns a member's place in the cluster into its command line.
type layout struct {
	portsPerMember int
	peerPorts      []int // which of a member's ports its peers connect to
	// files writes the member's configuration into dir and returns its
	// command line. ports[i] are the ports of member i.
	files func(i int, dir string, ports [][]int) ([]string, error)
}

// startProcesses starts one cluster in dir. On error every process it
// started has been killed and its ports released.
func startProcesses(t testing.TB, kind Kind, o options, lay layout, dir string) (*Cluster, error) {
	lease, err := reserveLoopbackPorts(o.members * lay.portsPerMember)
	if err != nil {
		return nil, err
	}
	ports := make([][]int, o.members)
	for i := range ports {
		ports[i] = lease.ports[i*lay.portsPerMember : (i+1)*lay.portsPerMember]
	}
	var pn *peerNet
	if o.peerCuts {
		peer := make([][]int, o.members)
		for i := range peer {
			for _, k := range lay.peerPorts {
				peer[i] = append(peer[i], ports[i][k])
			}
		}
		if pn, err = newPeerNet(peer); err != nil {
			lease.close()
			return nil, fmt.Errorf("%w: %w", errNoPeerCuts, err)
		}
	}
	members := make([]*procMember, o.members)
	for i := range members {
		mdir := filepath.Join(dir, fmt.Sprintf("%s-%d", shortKind(kind), i+1))
		argv, err := memberFiles(lay, i, mdir, ports)
		if err != nil {
			if pn != nil {
				pn.tearDown()
			}
			lease.close()
			return nil, err
		}
		members[i] = &procMember{
			name:       fmt.Sprintf("%s-%d", shortKind(kind), i+1),
			kind:       kind,
			clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[i][0]),
			argv:       argv,
			dir:        mdir,
			log:        newLogBuffer(),
		}
		if pn != nil {
			members[i].cgroup = pn.cgroupDir(i)
		}
	}
	teardown := func() {
		for _, m := range members {
			if m != nil {
				m.teardown()
			}
		}
		if pn != nil {
			pn.tearDown()
		}
		lease.close()
	}

	lease.unhold()
	for _, m := range members {
		if err := m.start(); err != nil {
			teardown()
			return nil, err
		}
	}
	iface := make([]Member, len(members))
	for i, m := range members {
		iface[i] = m
	}
	c := &Cluster{Kind: kind, Members: iface, impl: newMemberHealth(kind, iface), peers: pn}
	c.secureEndpoints = zkSecureAddrs(kind, o, ports)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitStarted(ctx, c, members); err != nil {
		teardown()
		return nil, err
	}
	t.Cleanup(func() {
		teardown()
		if t.Failed() {
			for _, m := range members {
				t.Logf("cluster: last %d lines of %s (%s):\n%s", logTailLines, m.name, m.clientAddr, m.log.tail(logTailLines))
			}
		}
	})
	return c, nil
}

// memberFiles writes member i's files into mdir and returns its command
// line.
func memberFiles(lay layout, i int, mdir string, ports [][]int) ([]string, error) {
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, err
	}
	return lay.files(i, mdir, ports)
}

// waitStarted waits until c is healthy, failing early when a member exits.
func waitStarted(ctx context.Context, c *Cluster, members []*procMember) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	h := c.impl.(*memberHealth)
	for {
		for _, m := range members {
			if err := m.exited(); err != nil {
				out := m.log.String()
				if isAddrInUse(out) {
					return fmt.Errorf("%s exited: %w: %w", m.name, errPortInUse, err)
				}
				return fmt.Errorf("%s exited during start: %w; last lines of output:\n%s", m.name, err, lastLines(out, 40))
			}
		}
		_, err := h.check(ctx, true)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy after %v: %w", startTimeout, err)
		case <-tick.C:
		}
	}
}

func shortKind(k Kind) string {
	if k == ZooKeeper {
		return "zk"
	}
	return string(k)
}

// procMember is one server process. It implements Member.
type procMember struct {
	name       string
	kind       Kind
	clientAddr string
	argv       []string
	dir        string
	log        *logBuffer
	cgroup     string // the cgroup v2 directory it runs in (WithPeerCuts), or ""

	mu      sync.Mutex
	cmd     *exec.Cmd     // nil before the first start
	done    chan struct{} // closed once cmd has been reaped
	waitErr error         // set before done is closed
	stopped bool
}

func (m *procMember) Name() string       { return m.name }
func (m *procMember) ClientAddr() string { return m.clientAddr }
func (m *procMember) Logs() string       { return m.log.String() }

// PID returns the process ID of the running server, or 0 when it is not
// running.
func (m *procMember) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.aliveLocked() {
		return 0
	}
	return m.cmd.Process.Pid
}

// start starts the process. The caller holds no lock.
func (m *procMember) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startLocked()
}

func (m *procMember) startLocked() error {
	if m.aliveLocked() {
		return fmt.Errorf("cluster: start %s: already running", m.name)
	}
	cmd := exec.Command(m.argv[0], m.argv[1:]...)
	cmd.Dir = m.dir
	cmd.Stdout = m.log
	cmd.Stderr = m.log
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Never outlive the test binary, even if it is killed before its
		// cleanups run.
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if m.cgroup != "" {
		// Born in its cgroup: every socket it opens carries it.
		dir, err := os.Open(m.cgroup)
		if err != nil {
			return fmt.Errorf("cluster: start %s: %w", m.name, err)
		}
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	}
	fmt.Fprintf(m.log, "=== %s: starting %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(m.argv, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", m.name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.stopped = cmd, done, false
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(m.log, "=== %s: process %d ended: %v\n", time.Now().Format(time.RFC3339Nano), cmd.Process.Pid, err)
		m.waitErr = err
		close(done)
	}()
	return nil
}

func (m *procMember) aliveLocked() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// exited returns a non-nil error once the process has ended.
func (m *procMember) exited() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.aliveLocked() {
		return nil
	}
	if m.waitErr == nil {
		return errors.New("exit status 0")
	}
	return m.waitErr
}

// Kill sends SIGKILL and waits until the process is reaped. Killing a
// member that is not running does nothing.
func (m *procMember) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killLocked()
}

func (m *procMember) killLocked() error {
	if !m.aliveLocked() {
		return nil
	}
	if m.stopped {
		// SIGKILL ends a stopped process too, but resuming it first keeps
		// the kernel from holding its state any longer than needed.
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
	}
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster: kill %s: %w", m.name, err)
	}
	m.stopped = false
	select {
	case <-m.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("cluster: kill %s: process %d not reaped after 30s", m.name, m.cmd.Process.Pid)
	}
}

// teardown kills the process for good.
func (m *procMember) teardown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.killLocked()
	m.log.release()
}

// Stop sends SIGSTOP and waits until the kernel reports the process
// stopped.
func (m *procMember) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.aliveLocked() {
		return fmt.Errorf("cluster: stop %s: not running", m.name)
	}
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("cluster: stop %s: %w", m.name, err)
	}
	m.stopped = true
	return m.waitState(true)
}

// Continue sends SIGCONT to a member frozen by Stop and waits until the
// kernel reports it running.
func (m *procMember) Continue() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.aliveLocked() {
		return fmt.Errorf("cluster: continue %s: not running", m.name)
	}
	if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("cluster: continue %s: %w", m.name, err)
	}
	m.stopped = false
	return m.waitState(false)
}

// waitState waits until /proc says the process is (or is no longer) in
// the stopped state.
func (m *procMember) waitState(stopped bool) error {
	pid := m.cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := procState(pid)
		if err != nil {
			return fmt.Errorf("cluster: %s: %w", m.name, err)
		}
		if (st == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %s: process %d in state %c after 5s; want stopped=%t", m.name, pid, st, stopped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procState returns the state letter of pid from /proc/pid/stat ('R', 'S',
// 'T', ...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat: %q", pid, s)
	}
	return s[i+2], nil
}

// Restart starts a killed member with the same command line, ports and data,
// and waits until it answers on its client port.
func (m *procMember) Restart(ctx context.Context) error {
	m.mu.Lock()
	if err := m.startLocked(); err != nil {
		m.mu.Unlock()
		return err
	}
	done := m.done
	m.mu.Unlock()

	// Give up as soon as the process exits instead of polling a dead port
	// until ctx ends.
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := memberAnswers(ctx, m.kind, m.clientAddr)
	cancel()
	<-watched
	if err != nil {
		if e := m.exited(); e != nil {
			return fmt.Errorf("cluster: restart %s: exited: %w; last lines of output:\n%s", m.name, e, m.log.tail(40))
		}
		return fmt.Errorf("cluster: restart %s: %w", m.name, err)
	}
	return nil
}

// Running reports whether the process is alive and not stopped.
func (m *procMember) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.aliveLocked() && !m.stopped
}

// randomToken returns a short random hex string.
func randomToken() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
