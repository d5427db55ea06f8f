// Package cluster starts real 3-member etcd clusters and 3-server ZooKeeper
// ensembles on 127.0.0.1 for tests, and injects faults into them.
//
// Two providers start the same clusters behind one interface: local
// processes (etcd built from its Go module, ZooKeeper from the Debian
// package) and testcontainers-go (locally built or official images, host
// networking). FENCELOCK_PROVIDER selects one ("process", the default, or
// "containers").
//
// When CI=true a missing server binary or Docker engine fails the test;
// otherwise the test is skipped with a message saying what to install.
//
// Faults: a Member can be killed, frozen and restarted, [NewProxy] and
// [NewProxies] put a TCP proxy in front of members that can blackhole,
// delay or reset client connections, and [Cluster.CutPeers] cuts a member
// off from its peers while its clients still reach it. Proxies count what they did
// ([Proxy.Stats]) and members report their state ([Member.Running]), so
// that a test can check that a fault really happened instead of assuming
// it.
//
// Ports are drawn below the kernel's ephemeral range and claimed with a
// file lock, so that concurrent test binaries do not collide; a start that
// still loses a port race is retried on other ports.
package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Kind names a backend.
type Kind string

// The backends.
const (
	Etcd      Kind = "etcd"
	ZooKeeper Kind = "zookeeper"
)

// Member is one server of a cluster. Its methods are safe for concurrent
// use.
type Member interface {
	// Name is a short label such as "etcd-2" or "zk-1".
	Name() string
	// ClientAddr is the member's client address, "127.0.0.1:port".
	ClientAddr() string
	// Kill stops the member at once (SIGKILL, docker kill), keeping its
	// data for Restart.
	Kill() error
	// Stop freezes the member (SIGSTOP, docker pause); Continue resumes it.
	Stop() error
	// Continue resumes a member frozen by Stop.
	Continue() error
	// Restart starts a killed member again on the same ports and data, and
	// returns once it answers on its client port.
	Restart(ctx context.Context) error
	// Running reports whether the member's process or container is alive
	// and not frozen.
	Running() bool
	// Logs returns what the member has written so far.
	Logs() string
}

// PID returns the process ID of m's server when m is a local process
// (the process provider) that is running, and 0 otherwise (a container,
// or a member that was killed).
func PID(m Member) int {
	if p, ok := m.(interface{ PID() int }); ok {
		return p.PID()
	}
	return 0
}

// Cluster is a running cluster. Teardown is registered with t.Cleanup by
// the provider; when the test failed, every member's log is printed.
type Cluster struct {
	Kind    Kind
	Members []Member
	// impl carries provider-neutral helpers (leader lookup, health).
	impl clusterImpl
	// secureEndpoints are the TLS client addresses (WithZKSecurity).
	secureEndpoints []string
	// peers makes CutPeers possible (WithPeerCuts); nil otherwise.
	peers *peerNet
}

type clusterImpl interface {
	leader(ctx context.Context) (int, error)
	waitHealthy(ctx context.Context) error
}

// Endpoints returns every member's client address.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.ClientAddr()
	}
	return eps
}

// Leader returns the index in Members of the current leader (etcd: the
// Raft leader; ZooKeeper: the server whose "srvr" reports Mode: leader).
// Only running members are asked. While an election is under way it keeps
// asking until a leader is known or ctx ends.
func (c *Cluster) Leader(ctx context.Context) (int, error) { return c.impl.leader(ctx) }

// WaitHealthy waits until every running member answers and the cluster has
// a leader that every running member agrees on, or ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context) error { return c.impl.waitHealthy(ctx) }

// Provider starts clusters.
type Provider interface {
	// Name is "process" or "containers".
	Name() string
	// Start starts a 3-member cluster of kind and registers its teardown
	// with t.Cleanup. It fails (CI=true) or skips the test when the
	// provider cannot run here.
	Start(t testing.TB, kind Kind, opts ...Option) *Cluster
}

// Option tunes a cluster.
type Option func(*options)

type options struct {
	members int
	// etcd
	etcdArgs []string
	etcdSec  *EtcdSecurity // TLS for clients and peers (secure_etcd.go)
	// zookeeper
	tickTime       time.Duration
	maxSessionTime time.Duration
	maxClientConns int         // maxClientCnxns; -1: ZooKeeper's default (60)
	juteMaxBuffer  int         // jute.maxbuffer in bytes; 0: ZooKeeper's default (1 MiB)
	zkSecurity     *ZKSecurity // secure_zk.go
	peerCuts       bool        // peercut.go
}

// WithMembers sets the number of members (default 3).
func WithMembers(n int) Option { return func(o *options) { o.members = n } }

// WithEtcdArgs appends flags to every etcd member's command line.
func WithEtcdArgs(args ...string) Option {
	return func(o *options) { o.etcdArgs = append(o.etcdArgs, args...) }
}

// WithTickTime sets ZooKeeper's tickTime (default 200ms, so that session
// timeouts down to 400ms can be negotiated).
func WithTickTime(d time.Duration) Option { return func(o *options) { o.tickTime = d } }

// WithMaxSessionTimeout sets ZooKeeper's maxSessionTimeout (default 60s,
// so that tests can ask for long sessions; ZooKeeper's own default of
// 20 ticks would cap them at 4s).
func WithMaxSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.maxSessionTime = d }
}

// WithMaxClientConns sets ZooKeeper's maxClientCnxns: how many connections
// one client address may open to one server. ZooKeeper's default is 60,
// and every client of a test connects from 127.0.0.1, so a test that opens
// more connections than that to one server raises it; 0 means no limit.
func WithMaxClientConns(n int) Option { return func(o *options) { o.maxClientConns = n } }

// WithJuteMaxBuffer sets the servers' jute.maxbuffer, the largest record
// (request, reply or transaction) a ZooKeeper server accepts, in bytes;
// ZooKeeper's default is 1 MiB less one byte. ZooKeeper 3.8 writes the
// paths of all of a session's ephemeral znodes into the transaction that
// closes it, so a session that holds more than about ten thousand of them
// makes a close transaction the followers and the log reader refuse, and
// the ensemble falls apart (the leader steps down and cannot read its own
// log back; ZOOKEEPER-4306, open for 3.8 and 3.9). A test that closes or
// expires such a session raises the limit.
func WithJuteMaxBuffer(n int) Option { return func(o *options) { o.juteMaxBuffer = n } }

// Defaults of the options.
const (
	defaultMembers        = 3
	defaultTickTime       = 200 * time.Millisecond
	defaultMaxSessionTime = 60 * time.Second
)

// buildOptions applies opts over the defaults and rejects values no
// cluster can be started with.
func buildOptions(opts []Option) (options, error) {
	o := options{
		members:        defaultMembers,
		tickTime:       defaultTickTime,
		maxSessionTime: defaultMaxSessionTime,
		maxClientConns: -1,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.members < 1 || o.members > 9:
		return o, fmt.Errorf("cluster: %d members: want 1 to 9", o.members)
	case o.tickTime < time.Millisecond:
		return o, fmt.Errorf("cluster: tick time %v: want at least 1ms", o.tickTime)
	case o.maxSessionTime < 2*o.tickTime:
		return o, fmt.Errorf("cluster: max session timeout %v: want at least two ticks (%v)", o.maxSessionTime, 2*o.tickTime)
	case o.juteMaxBuffer < 0:
		return o, fmt.Errorf("cluster: jute.maxbuffer %d: want a positive size, or 0 for the default", o.juteMaxBuffer)
	case o.maxClientConns < -1:
		return o, fmt.Errorf("cluster: %d connections per client address: want 0 (no limit) or more", o.maxClientConns)
	}
	if err := checkZKSecurity(o.zkSecurity); err != nil {
		return o, err
	}
	return o, nil
}
