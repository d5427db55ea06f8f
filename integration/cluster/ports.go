package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// portLease is a set of loopback ports reserved for one cluster.
//
// Picking a port by listening on 127.0.0.1:0 and closing it races with every
// other test binary doing the same, and with the kernel handing the same
// port out for an outgoing connection. So ports are drawn at random from
// below the kernel's ephemeral range and each is claimed with an exclusive
// flock on a file under the temporary directory, held for the life of the
// cluster (and dropped by the kernel if the test binary dies). Until the
// servers start, each port is also held by a listener, so that a process
// that does not take part in the locking cannot take it either.
type portLease struct {
	ports []int
	locks []*os.File
	holds []net.Listener
}

// reserveLoopbackPorts reserves n free ports on 127.0.0.1.
func reserveLoopbackPorts(n int) (*portLease, error) {
	lo, hi := portRange()
	dir := filepath.Join(os.TempDir(), "fencelock-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("cluster: reserve ports: %w", err)
	}
	l := &portLease{}
	for tries := 0; len(l.ports) < n; tries++ {
		if tries > 1000 {
			l.close()
			return nil, fmt.Errorf("cluster: reserve ports: no free port in %d-%d after %d tries", lo, hi, tries)
		}
		port := lo + rand.IntN(hi-lo+1)
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("cluster: reserve ports: %w", err)
		}
		// flock locks belong to the open file description, so a second
		// claim from this same process conflicts too.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue
		}
		l.ports = append(l.ports, port)
		l.locks = append(l.locks, f)
		l.holds = append(l.holds, ln)
	}
	return l, nil
}

// unhold closes the placeholder listeners so that servers can bind the
// ports; the flocks stay.
func (l *portLease) unhold() {
	for _, ln := range l.holds {
		ln.Close()
	}
	l.holds = nil
}

// close gives every port back.
func (l *portLease) close() {
	l.unhold()
	for _, f := range l.locks {
		f.Close()
	}
	l.locks = nil
}

// portRange returns the range ports are drawn from: below the kernel's
// ephemeral range when there is room, above it otherwise.
func portRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			b, errB := strconv.Atoi(f[1])
			if errA == nil && errB == nil && a <= b {
				elo, ehi = a, b
			}
		}
	}
	const floor = 15000
	if elo-1-floor >= 2000 {
		return floor, elo - 1
	}
	if 65000-(ehi+1) >= 2000 {
		return ehi + 1, 65000
	}
	return 10000, 65000 // the kernel may hand these out too; retries cover it
}

// isAddrInUse reports whether a server's output or error says it could not
// bind its port.
func isAddrInUse(s string) bool {
	return strings.Contains(strings.ToLower(s), "address already in use")
}
