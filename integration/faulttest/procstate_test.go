package faulttest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procState returns the state letter of pid from /proc/pid/stat ('R',
// 'S', 'T' for stopped, ...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name, in parentheses, may itself hold spaces or ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("cannot parse /proc/%d/stat: %q", pid, s)
	}
	return s[i+2], nil
}

// cgroupFrozen reports whether pid's cgroup (v2) is frozen, as docker
// pause freezes a container: its processes then sleep in the freezer
// rather than show the 'T' state of SIGSTOP.
func cgroupFrozen(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		rel, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		ev, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", rel, "cgroup.events"))
		if err != nil {
			return false
		}
		for _, l := range strings.Split(string(ev), "\n") {
			if l == "frozen 1" {
				return true
			}
		}
	}
	return false
}

// waitFrozen waits up to timeout until the kernel reports pid stopped
// (SIGSTOP: state 'T') or frozen by its cgroup, and says what it saw if
// neither happened: a freeze is confirmed, never assumed from the signal
// having been sent.
func waitFrozen(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := procState(pid)
		if err != nil {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		if st == 'T' || cgroupFrozen(pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d in state %c, not stopped, %v after it was frozen", pid, st, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// listenerPID returns the process that listens on addr ("127.0.0.1:port"),
// found from the socket's inode in /proc/net/tcp and the processes' open
// files. It lets the test check a server's state itself, whichever
// provider started it.
func listenerPID(addr string) (int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return 0, err
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return 0, fmt.Errorf("%s: not an IPv4 address", addr)
	}
	// /proc/net/tcp prints the address as the hex of its in-memory
	// (network order) bytes read as a little-endian word.
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], port)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	inode := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local remote st tx:rx tr:when retrnsmt uid timeout inode
		if len(fields) >= 10 && fields[1] == local && fields[3] == "0A" {
			inode = fields[9]
			break
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if inode == "" {
		return 0, fmt.Errorf("nothing listens on %s", addr)
	}
	want := "socket:[" + inode + "]"
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && l == want {
				return pid, nil
			}
		}
	}
	return 0, errors.New("no process holds the socket listening on " + addr)
}
