// Package postgres starts a throwaway PostgreSQL server on 127.0.0.1 for
// tests, from the binaries of the Debian package (apt-get install
// postgresql).
//
// Each server gets its own temporary directory (data, socket and log) and a
// free loopback port, runs with fsync off, trusts every local connection and
// is stopped by its PID. PostgreSQL refuses to run as root, so when the test
// binary is root the server runs as the "postgres" system user that the
// Debian package creates.
//
// The binaries are looked up under /usr/lib/postgresql/*/bin (the highest
// version wins), or in the directory named by FENCELOCK_POSTGRES_BIN. When
// they are missing, [Start] skips the test — or fails it when CI=true, so
// that CI never passes by skipping.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNotInstalled is wrapped by [Launch] when the PostgreSQL server binaries
// (or, for a root test binary, the postgres system user) are missing.
var ErrNotInstalled = errors.New("postgres: server not installed")

// Server is a running PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	// URL connects to the "postgres" database as the superuser "postgres",
	// over TCP on 127.0.0.1, without TLS or password.
	URL string
	// Port is the server's TCP port on 127.0.0.1.
	Port int

	dir      string
	portLock *os.File
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	logPath  string

	stopOnce sync.Once
	stopErr  error
}

// Start launches a server for the test and stops it in t.Cleanup. It skips
// the test when PostgreSQL is not installed, unless CI=true, in which case it
// fails it; any other failure to start fails the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("postgres: stop: %v", err)
		}
	})
	return s
}

// Unavailable ends the test for an error from [Launch]: a skip when the
// server is not installed and CI is not "true", a failure otherwise.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("%v (apt-get install postgresql; under CI=true this fails)", err)
	}
	t.Fatalf("%v", err)
}

// Launch starts a server that is not tied to a test, for use from TestMain.
// The caller must call [Server.Stop]. It returns an error wrapping
// [ErrNotInstalled] when PostgreSQL is not installed.
func Launch() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: launch: %w", err)
	}
	// MkdirTemp makes the directory 0700 and root's; the server's user
	// must own it.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: launch: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: launch: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := command(bin, "initdb", dir, cred, "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(bin, dir, data, cred)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

var errPortInUse = errors.New("port in use")

// start runs the server on a fresh port and waits until it accepts
// connections.
func start(bin, dir, data string, cred *syscall.Credential) (*Server, error) {
	port, lockFile, err := reservePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL:      fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		Port:     port,
		dir:      dir,
		portLock: lockFile,
		exited:   make(chan struct{}),
		logPath:  filepath.Join(dir, fmt.Sprintf("server-%d.log", port)),
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		lockFile.Close()
		return nil, fmt.Errorf("postgres: start: %w", err)
	}
	s.cmd = command(bin, "postgres", dir, cred, "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=64", "-c", "shared_buffers=16MB")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		lockFile.Close()
		return nil, fmt.Errorf("postgres: start: %w", err)
	}
	go func() {
		s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.exited:
			lockFile.Close()
			log, _ := os.ReadFile(s.logPath)
			if bytes.Contains(bytes.ToLower(log), []byte("address already in use")) {
				return nil, fmt.Errorf("postgres: start on port %d: %w", port, errPortInUse)
			}
			return nil, fmt.Errorf("postgres: server exited during start: %v\n%s", s.cmd.ProcessState, log)
		default:
		}
		if ready(bin, port) {
			return s, nil
		}
		if time.Now().After(deadline) {
			err := s.Stop()
			return nil, fmt.Errorf("postgres: not ready on port %d after 60s (stop: %v)", port, err)
		}
		select {
		case <-s.exited:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready reports whether the server accepts connections, as pg_isready sees
// it: a TCP connect alone succeeds while the server is still starting up.
func ready(bin string, port int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-t", "2")
	return cmd.Run() == nil
}

// Stop shuts the server down by its PID (fast shutdown, then immediate,
// then SIGKILL), waits for it, and removes its directory. Later calls
// return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		defer s.portLock.Close()
		defer os.RemoveAll(s.dir)
		for _, step := range []struct {
			sig  syscall.Signal
			wait time.Duration
		}{{syscall.SIGINT, 30 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}} {
			select {
			case <-s.exited:
				return
			default:
			}
			if err := s.cmd.Process.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				s.stopErr = fmt.Errorf("postgres: stop pid %d: %w", s.cmd.Process.Pid, err)
			}
			select {
			case <-s.exited:
				return
			case <-time.After(step.wait):
			}
		}
		s.stopErr = fmt.Errorf("postgres: pid %d did not exit", s.cmd.Process.Pid)
	})
	return s.stopErr
}

// PID returns the process ID of the server (the postmaster).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir returns the server's temporary directory, removed by Stop.
func (s *Server) Dir() string { return s.dir }

// Log returns what the server has written to its log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// command builds a PostgreSQL command that runs in dir as cred's user (nil:
// the current user), with a minimal environment.
func command(bin, name, dir string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C", "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	return cmd
}

// binDir finds the directory of the server binaries.
func binDir() (string, error) {
	if d := os.Getenv("FENCELOCK_POSTGRES_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("postgres: FENCELOCK_POSTGRES_BIN=%s: %w: %w", d, ErrNotInstalled, err)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var dirs []string
	for _, m := range matches {
		if _, err := os.Stat(filepath.Join(filepath.Dir(m), "initdb")); err == nil {
			dirs = append(dirs, filepath.Dir(m))
		}
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("postgres: %w: no /usr/lib/postgresql/*/bin/{postgres,initdb}", ErrNotInstalled)
	}
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs[0], nil
}

// credential returns the user the server must run as: nil to run as the
// current user, or the postgres system user when the current user is root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root needs the postgres system user: %w: %w", ErrNotInstalled, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres: user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reservePort picks a free loopback port below the kernel's ephemeral range
// and claims it with an flock in the directory the cluster harness uses for
// the same purpose, so that parallel test binaries never pick the same port.
// The lock is held until the server stops.
func reservePort() (int, *os.File, error) {
	lo, hi := portRange()
	dir := filepath.Join(os.TempDir(), "fencelock-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, fmt.Errorf("postgres: reserve port: %w", err)
	}
	for tries := 0; tries < 1000; tries++ {
		port := lo + rand.IntN(hi-lo+1)
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, nil, fmt.Errorf("postgres: reserve port: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue
		}
		ln.Close()
		return port, f, nil
	}
	return 0, nil, fmt.Errorf("postgres: reserve port: no free port in %d-%d", lo, hi)
}

// portRange returns the ports to draw from: below the kernel's ephemeral
// range, where no outgoing connection takes them.
func portRange() (lo, hi int) {
	elo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				elo = v
			}
		}
	}
	if elo-1 >= 17000 {
		return 15000, elo - 1
	}
	return 10000, 14999
}
