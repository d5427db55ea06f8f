package testutil

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

// ProcState returns the state letter of pid from /proc/pid/stat ('R',
// 'S', 'T' for stopped, ...).
func ProcState(pid int) (byte, error) {
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

// CgroupFrozen reports whether pid's cgroup is frozen, as docker pause
// freezes a container: its processes then sleep in the freezer (state
// 'D' or 'S') rather than show the 'T' of SIGSTOP. Both cgroup versions
// are read: v2's cgroup.events ("frozen 1") and v1's freezer controller
// (freezer.state "FROZEN").
func CgroupFrozen(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			ev, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.events"))
			if err == nil && hasLine(string(ev), "frozen 1") {
				return true
			}
		case hasController(parts[1], "freezer"):
			st, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"))
			if err == nil && strings.TrimSpace(string(st)) == "FROZEN" {
				return true
			}
		}
	}
	return false
}

func hasLine(text, want string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == want {
			return true
		}
	}
	return false
}

func hasController(list, want string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == want {
			return true
		}
	}
	return false
}

// WaitFrozen waits up to timeout until the kernel reports pid stopped
// (SIGSTOP: state 'T') or frozen by its cgroup (docker pause), and says
// what it saw if neither happened: a freeze is confirmed, never assumed
// from the signal having been sent.
func WaitFrozen(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := ProcState(pid)
		if err != nil {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		if st == 'T' || CgroupFrozen(pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d in state %c, neither stopped nor in a frozen cgroup, %v after it was frozen", pid, st, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// ListenerPID returns the process that listens on addr ("127.0.0.1:port"),
// found from the socket's inode in /proc/net/tcp and the processes' open
// files. It lets a test check a server's state itself, whichever provider
// started it (a container on the host network shares the host's sockets).
func ListenerPID(addr string) (int, error) {
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
		if len(fields) >= 10 && fields[1] == local && fields[3] == "0A" { // 0A: LISTEN
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
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && l == want {
				pid, _ := strconv.Atoi(p.Name())
				return pid, nil
			}
		}
	}
	return 0, errors.New("no process holds the socket listening on " + addr)
}
