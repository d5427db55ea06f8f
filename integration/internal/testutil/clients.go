package testutil

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdClient returns a plain etcd client made from cfg, closed in
// t.Cleanup. A zero cfg.DialTimeout means 5s and a nil cfg.Logger means
// one that discards everything; the rest of cfg is used as given.
func EtcdClient(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("clientv3.New(%v) = %v", cfg.Endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// QuietLogger is a zk.Logger that discards everything, for connections
// whose reconnects during fault tests would otherwise flood the output.
type QuietLogger struct{}

// Printf discards its arguments.
func (QuietLogger) Printf(string, ...any) {}

// sessionWait bounds how long ZKConn waits for a session.
const sessionWait = 30 * time.Second

// ZKConn returns a plain go-zookeeper connection to servers with the given
// session timeout, once it has a session; it is closed in t.Cleanup. A nil
// dialer means net.DialTimeout. The connection logs nothing.
func ZKConn(t testing.TB, servers []string, sessionTimeout time.Duration, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(QuietLogger{}), zk.WithLogInfo(false), zk.WithDialer(dialer))
	if err != nil {
		t.Fatalf("zk.Connect(%v) = %v", servers, err)
	}
	t.Cleanup(conn.Close)
	Eventually(t, sessionWait, "a ZooKeeper session on "+strings.Join(servers, ","), func() bool { return conn.State() == zk.StateHasSession })
	return conn
}

var barrierSeq atomic.Int64

// ZKReadBarrier returns a function that makes conn's next reads see every
// write the servers had answered before it was called, whichever server
// conn reaches: it writes a znode of its own (created here, deleted in
// t.Cleanup). A plain read can come from a server that has not applied
// such a write yet, and a sync is no barrier either when conn reaches
// the leader, which serves a sync like a read (its commit processor does
// not match syncs, ZooKeeper 3.8); a write is ordered after every write
// answered before it, on every server, and the connection's later reads
// after it.
func ZKReadBarrier(t testing.TB, conn *zk.Conn) func(t testing.TB) {
	t.Helper()
	path := fmt.Sprintf("/fencelock-test-barrier-%d-%d", time.Now().UnixNano(), barrierSeq.Add(1))
	if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Delete(path, -1) })
	return func(t testing.TB) {
		t.Helper()
		if _, err := conn.Set(path, nil, -1); err != nil {
			t.Fatalf("read barrier: Set(%s) = %v", path, err)
		}
	}
}
