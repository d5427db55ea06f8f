package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// A partition between servers cuts a member off from its peers while its
// clients still reach it. On one machine every server listens on
// 127.0.0.1, so the cut is made with the kernel's packet filter: each
// member of a cluster started WithPeerCuts runs in a cgroup (v2) of its
// own, and an iptables chain of the cluster's, on the loopback interface,
//
//   - marks each new connection to a peer port (etcd's peer port,
//     ZooKeeper's quorum and election ports) with a bit per member it
//     involves: the member whose cgroup opened it, and the member whose
//     peer port it goes to;
//   - drops, during a cut of member i, the packets of connections marked
//     with i's bit (both directions, or only those i's cgroup sends, or
//     only those it receives).
//
// Client connections carry no mark, so they are never touched. The drop
// rules also name the cluster's own peer ports, so that clusters of other
// test binaries, whose connections carry the same bits, are left alone.

// WithPeerCuts prepares the cluster for [Cluster.CutPeers]. Only the
// process provider can (a container's processes are not in a cgroup the
// harness controls); it needs root, iptables and a cgroup v2 hierarchy.
func WithPeerCuts() Option { return func(o *options) { o.peerCuts = true } }

// CutMode says which of a member's peer packets a cut drops.
type CutMode int

const (
	// CutBoth drops everything between the member and its peers.
	CutBoth CutMode = iota
	// CutSend drops what the member sends to its peers; it still
	// receives what they send.
	CutSend
	// CutReceive drops what the peers send to the member; what it sends
	// still reaches them.
	CutReceive
)

func (m CutMode) String() string {
	switch m {
	case CutBoth:
		return "both ways"
	case CutSend:
		return "its sends"
	case CutReceive:
		return "its receives"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// peerNet is the packet filter state of one cluster started WithPeerCuts.
type peerNet struct {
	chain   string
	root    string   // the cgroup v2 mount
	group   string   // the cluster's cgroup, relative to root
	members []string // each member's cgroup, relative to root
	ports   [][]int  // each member's peer ports
	all     string   // every peer port, for multiport

	mu sync.Mutex // orders rule changes and counter reads
}

var peerNetSeq atomic.Int64

// cgroup2Root returns where the cgroup v2 hierarchy is mounted: the
// whole of /sys/fs/cgroup, or its "unified" part beside the v1
// controllers.
func cgroup2Root() (string, error) {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy under /sys/fs/cgroup")
}

// iptables runs iptables with args, waiting for the lock that concurrent
// test binaries share.
func iptables(args ...string) (string, error) {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// newPeerNet creates the cgroups and the chain for a cluster whose
// member i has the peer ports ports[i]. Members must then start in
// cgroupDir(i).
func newPeerNet(ports [][]int) (*peerNet, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("peer cuts need root (cgroups and iptables)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("peer cuts need iptables (apt-get install -y iptables): %w", err)
	}
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	sweepPeerNets(root)
	n := peerNetSeq.Add(1)
	pn := &peerNet{
		chain: fmt.Sprintf("FL-%d-%d", os.Getpid(), n),
		root:  root,
		group: fmt.Sprintf("fencelock-%d-%d", os.Getpid(), n),
		ports: ports,
	}
	var all []string
	for i, ps := range ports {
		pn.members = append(pn.members, fmt.Sprintf("%s/m%d", pn.group, i+1))
		for _, p := range ps {
			all = append(all, strconv.Itoa(p))
		}
	}
	pn.all = strings.Join(all, ",")
	if err := pn.setUp(); err != nil {
		pn.tearDown()
		return nil, err
	}
	return pn, nil
}

// memberBit is the connection mark bit of member i.
func memberBit(i int) string { return fmt.Sprintf("0x%x", 1<<(16+i)) }

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func (pn *peerNet) setUp() error {
	for _, d := range append([]string{pn.group}, pn.members...) {
		if err := os.Mkdir(filepath.Join(pn.root, d), 0o755); err != nil {
			return err
		}
	}
	if _, err := iptables("-N", pn.chain); err != nil {
		return err
	}
	for i, cg := range pn.members {
		bit := memberBit(i)
		if _, err := iptables("-A", pn.chain, "-p", "tcp", "-m", "conntrack", "--ctstate", "NEW",
			"-m", "cgroup", "--path", cg, "-m", "multiport", "--dports", pn.all,
			"-j", "CONNMARK", "--or-mark", bit); err != nil {
			return err
		}
		if _, err := iptables("-A", pn.chain, "-p", "tcp", "-m", "conntrack", "--ctstate", "NEW",
			"-m", "multiport", "--dports", joinPorts(pn.ports[i]),
			"-j", "CONNMARK", "--or-mark", bit); err != nil {
			return err
		}
	}
	_, err := iptables("-I", "OUTPUT", "-o", "lo", "-j", pn.chain)
	return err
}

// tearDown removes the chain and the cgroups; the members must have
// exited.
func (pn *peerNet) tearDown() {
	removeChain(pn.chain)
	for i := len(pn.members) - 1; i >= 0; i-- {
		_ = os.Remove(filepath.Join(pn.root, pn.members[i]))
	}
	_ = os.Remove(filepath.Join(pn.root, pn.group))
}

func removeChain(chain string) {
	_, _ = iptables("-D", "OUTPUT", "-o", "lo", "-j", chain)
	_, _ = iptables("-F", chain)
	_, _ = iptables("-X", chain)
}

// sweepPeerNets removes the chains and cgroups of test binaries that died
// before their cleanups ran.
func sweepPeerNets(root string) {
	out, err := iptables("-S")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "FL-") && !pidAlive(f[1], "FL-") {
			removeChain(f[1])
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "fencelock-*"))
	for _, d := range dirs {
		if pidAlive(filepath.Base(d), "fencelock-") {
			continue
		}
		subs, _ := filepath.Glob(filepath.Join(d, "m*"))
		for _, s := range subs {
			_ = os.Remove(s)
		}
		_ = os.Remove(d)
	}
}

// pidAlive reports whether the process named by name (prefix, then the
// PID, then "-" and more) is alive.
func pidAlive(name, prefix string) bool {
	s, _, _ := strings.Cut(strings.TrimPrefix(name, prefix), "-")
	pid, err := strconv.Atoi(s)
	if err != nil {
		return true // not ours to judge
	}
	return syscall.Kill(pid, 0) == nil
}

// cgroupDir returns the cgroup directory member i starts in.
func (pn *peerNet) cgroupDir(i int) string { return filepath.Join(pn.root, pn.members[i]) }

// PeerCut is one cut made by [Cluster.CutPeers].
type PeerCut struct {
	pn      *peerNet
	member  int
	mode    CutMode
	comment string
	rule    []string
	healed  bool
	final   int64 // Dropped at Heal
}

// CanCutPeers reports whether c was started WithPeerCuts.
func (c *Cluster) CanCutPeers() bool { return c.peers != nil }

// CutPeers cuts member i off from its peers as mode says, while every
// client still reaches it, until Heal. Packets are dropped, not refused:
// the member and its peers see nothing but silence.
func (c *Cluster) CutPeers(i int, mode CutMode) (*PeerCut, error) {
	pn := c.peers
	if pn == nil {
		return nil, errors.New("cluster: cut peers: the cluster was not started WithPeerCuts")
	}
	if i < 0 || i >= len(pn.members) {
		return nil, fmt.Errorf("cluster: cut peers: no member %d", i)
	}
	cut := &PeerCut{pn: pn, member: i, mode: mode, comment: fmt.Sprintf("cut-m%d-%d", i+1, peerNetSeq.Add(1))}
	bit := memberBit(i)
	cut.rule = []string{"-p", "tcp", "-m", "connmark", "--mark", bit + "/" + bit,
		"-m", "multiport", "--ports", pn.all}
	switch mode {
	case CutBoth:
	case CutSend:
		cut.rule = append(cut.rule, "-m", "cgroup", "--path", pn.members[i])
	case CutReceive:
		cut.rule = append(cut.rule, "-m", "cgroup", "!", "--path", pn.members[i])
	default:
		return nil, fmt.Errorf("cluster: cut peers: unknown mode %v", mode)
	}
	cut.rule = append(cut.rule, "-m", "comment", "--comment", cut.comment, "-j", "DROP")
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if _, err := iptables(append([]string{"-A", pn.chain}, cut.rule...)...); err != nil {
		return nil, fmt.Errorf("cluster: cut peers of member %d: %w", i, err)
	}
	return cut, nil
}

// Member returns the index of the member cut off, and Mode how.
func (p *PeerCut) Member() int   { return p.member }
func (p *PeerCut) Mode() CutMode { return p.mode }

// Dropped returns how many packets the cut has dropped so far (until
// Heal, once healed): the proof that it took effect.
func (p *PeerCut) Dropped() (int64, error) {
	p.pn.mu.Lock()
	defer p.pn.mu.Unlock()
	if p.healed {
		return p.final, nil
	}
	return p.droppedLocked()
}

func (p *PeerCut) droppedLocked() (int64, error) {
	out, err := iptables("-L", p.pn.chain, "-v", "-x", "-n")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "/* "+p.comment+" */") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("cluster: rule %s not found in chain %s", p.comment, p.pn.chain)
}

// Heal ends the cut; a second call does nothing.
func (p *PeerCut) Heal() error {
	p.pn.mu.Lock()
	defer p.pn.mu.Unlock()
	if p.healed {
		return nil
	}
	n, err := p.droppedLocked()
	if err != nil {
		return fmt.Errorf("cluster: heal the cut of member %d: %w", p.member, err)
	}
	if _, err := iptables(append([]string{"-D", p.pn.chain}, p.rule...)...); err != nil {
		return fmt.Errorf("cluster: heal the cut of member %d: %w", p.member, err)
	}
	p.healed, p.final = true, n
	return nil
}
