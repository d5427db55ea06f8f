package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The harness tests check that each fault the harness claims to inject
// really happens, on whichever provider FENCELOCK_PROVIDER selects.

// kvClient is the smallest real client of either backend: it writes and
// reads one value.
type kvClient interface {
	put(ctx context.Context, key, val string) error
	get(ctx context.Context, key string) (string, error)
}

// dialKV connects a real client of kind to endpoints; it is closed in
// t.Cleanup.
func dialKV(t *testing.T, kind Kind, endpoints []string) kvClient {
	t.Helper()
	switch kind {
	case Etcd:
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("clientv3.New(%v) = %v", endpoints, err)
		}
		t.Cleanup(func() { cli.Close() })
		return etcdKV{cli}
	case ZooKeeper:
		conn, _, err := zk.Connect(endpoints, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietLogger{}))
		if err != nil {
			t.Fatalf("zk.Connect(%v) = %v", endpoints, err)
		}
		c := &zkKV{conn: conn}
		t.Cleanup(c.close)
		return c
	}
	t.Fatalf("dialKV: unknown kind %q", kind)
	return nil
}

type etcdKV struct{ cli *clientv3.Client }

func (e etcdKV) put(ctx context.Context, key, val string) error {
	_, err := e.cli.Put(ctx, key, val)
	return err
}

func (e etcdKV) get(ctx context.Context, key string) (string, error) {
	resp, err := e.cli.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("get %q: not found", key)
	}
	return string(resp.Kvs[0].Value), nil
}

// zkKV bounds go-zookeeper's blocking calls with a context: a call that
// outlives its context keeps running in the background until the
// connection closes, and close waits for it.
type zkKV struct {
	conn *zk.Conn
	wg   sync.WaitGroup
}

func (z *zkKV) close() {
	z.conn.Close()
	z.wg.Wait()
}

func (z *zkKV) do(ctx context.Context, f func() error) error {
	errc := make(chan error, 1)
	z.wg.Add(1)
	go func() {
		defer z.wg.Done()
		errc <- f()
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func zkPath(key string) string { return "/" + strings.ReplaceAll(key, "/", "_") }

func (z *zkKV) put(ctx context.Context, key, val string) error {
	return z.do(ctx, func() error {
		_, err := z.conn.Create(zkPath(key), []byte(val), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			_, err = z.conn.Set(zkPath(key), []byte(val), -1)
		}
		return err
	})
}

func (z *zkKV) get(ctx context.Context, key string) (string, error) {
	var val string
	err := z.do(ctx, func() error {
		b, _, err := z.conn.Get(zkPath(key))
		val = string(b)
		return err
	})
	return val, err
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// eventually calls f until it succeeds or timeout passes, and returns its
// last error.
func eventually(timeout time.Duration, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := f(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		timer := time.NewTimer(100 * time.Millisecond)
		<-timer.C
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustPut writes key through c, retrying for up to 30s (a client may need to
// find the new leader or reconnect first).
func mustPut(t *testing.T, c kvClient, key, val string) {
	t.Helper()
	if err := eventually(30*time.Second, func(ctx context.Context) error { return c.put(ctx, key, val) }); err != nil {
		t.Fatalf("put(%q) = %v; want nil", key, err)
	}
}

// mustGet reads key through c, retrying for up to 30s, and checks its value.
func mustGet(t *testing.T, c kvClient, key, want string) {
	t.Helper()
	var got string
	err := eventually(30*time.Second, func(ctx context.Context) error {
		var err error
		got, err = c.get(ctx, key)
		return err
	})
	if err != nil || got != want {
		t.Fatalf("get(%q) = %q, %v; want %q, nil", key, got, err, want)
	}
}

// wantNoAnswer checks that member m does not answer within d.
func wantNoAnswer(t *testing.T, kind Kind, m Member, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := probeMember(ctx, kind, m.ClientAddr())
	if err == nil {
		t.Fatalf("probe %s = %+v, nil; want an error (the member should not answer)", m.Name(), s)
	}
	return err
}

func without(eps []string, i int) []string {
	var out []string
	for j, e := range eps {
		if j != i {
			out = append(out, e)
		}
	}
	return out
}

func TestHarness(t *testing.T) {
	for _, kind := range []Kind{Etcd, ZooKeeper} {
		t.Run(string(kind), func(t *testing.T) {
			p := FromEnv(t)
			c := p.Start(t, kind)
			if got := len(c.Members); got != 3 {
				t.Fatalf("len(Members) = %d; want 3", got)
			}
			if c.Kind != kind {
				t.Fatalf("Kind = %q; want %q", c.Kind, kind)
			}
			prefix := fmt.Sprintf("harness-%s-%s-%d", p.Name(), kind, time.Now().UnixNano())
			if p.Name() == "process" {
				t.Run("pid", func(t *testing.T) { testPID(t, c) })
			}

			t.Run("serves", func(t *testing.T) { testServes(t, c, prefix+"-serves") })
			t.Run("leader", func(t *testing.T) { testLeader(t, c) })
			t.Run("kill", func(t *testing.T) { testKill(t, c, prefix+"-kill") })
			t.Run("stop", func(t *testing.T) { testStop(t, c, prefix+"-stop") })
			t.Run("blackhole", func(t *testing.T) { testBlackhole(t, c, prefix+"-blackhole") })
			t.Run("reset", func(t *testing.T) { testReset(t, c, prefix+"-reset") })
		})
	}
}

// testPID checks that PID names each member's own server process: one
// that runs, a different one per member.
func testPID(t *testing.T, c *Cluster) {
	seen := map[int]bool{}
	for i, m := range c.Members {
		pid := PID(m)
		if pid <= 0 || seen[pid] {
			t.Fatalf("PID(Members[%d]) = %d; want a positive PID of its own (seen %v)", i, pid, seen)
		}
		seen[pid] = true
		if state, err := procState(pid); err != nil || state == 'Z' {
			t.Errorf("process %d of Members[%d]: state %q, %v; want a running process", pid, i, state, err)
		}
	}
}

func testServes(t *testing.T, c *Cluster, key string) {
	for i, m := range c.Members {
		if !m.Running() {
			t.Errorf("Members[%d].Running() = false; want true", i)
		}
		if !strings.HasPrefix(m.ClientAddr(), "127.0.0.1:") {
			t.Errorf("Members[%d].ClientAddr() = %q; want 127.0.0.1:port", i, m.ClientAddr())
		}
		if m.Logs() == "" {
			t.Errorf("Members[%d].Logs() is empty; want the server's output", i)
		}
	}
	// Every member, on its own, serves the value written through another.
	w := dialKV(t, c.Kind, c.Endpoints()[:1])
	mustPut(t, w, key, "v1")
	for i := range c.Members {
		mustGet(t, dialKV(t, c.Kind, c.Endpoints()[i:i+1]), key, "v1")
	}
}

func testLeader(t *testing.T, c *Cluster) {
	ctx := ctxTimeout(t, 30*time.Second)
	i, err := c.Leader(ctx)
	if err != nil || i < 0 || i >= len(c.Members) {
		t.Fatalf("Leader() = %d, %v; want a member index", i, err)
	}
	s, err := probeMember(ctx, c.Kind, c.Members[i].ClientAddr())
	if err != nil || !s.isLeader(c.Kind) {
		t.Fatalf("probe of leader %s = %+v, %v; want it to report itself leader", c.Members[i].Name(), s, err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() = %v; want nil", err)
	}
}

func testKill(t *testing.T, c *Cluster, key string) {
	ctx := ctxTimeout(t, 90*time.Second)
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	m := c.Members[old]
	if err := m.Kill(); err != nil {
		t.Fatalf("Kill(%s) = %v; want nil", m.Name(), err)
	}
	if m.Running() {
		t.Fatalf("%s.Running() = true after Kill; want false", m.Name())
	}
	if pid := PID(m); pid != 0 {
		t.Errorf("PID(%s) = %d after Kill; want 0", m.Name(), pid)
	}
	err = wantNoAnswer(t, c.Kind, m, 2*time.Second)
	t.Logf("killed %s (leader); probe: %v", m.Name(), err)

	// Two of three still form a quorum: a new leader, and writes.
	surv := dialKV(t, c.Kind, without(c.Endpoints(), old))
	mustPut(t, surv, key, "during")
	nl, err := c.Leader(ctx)
	if err != nil || nl == old {
		t.Fatalf("Leader() after killing %d = %d, %v; want another member", old, nl, err)
	}

	if err := m.Restart(ctx); err != nil {
		t.Fatalf("Restart(%s) = %v; want nil", m.Name(), err)
	}
	if !m.Running() {
		t.Fatalf("%s.Running() = false after Restart; want true", m.Name())
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() after restart = %v; want nil", err)
	}
	// It kept its data and caught up with what it missed.
	mustGet(t, dialKV(t, c.Kind, []string{m.ClientAddr()}), key, "during")
}

func testStop(t *testing.T, c *Cluster, key string) {
	ctx := ctxTimeout(t, 90*time.Second)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	i := (leader + 1) % len(c.Members) // a follower: no election needed
	m := c.Members[i]
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop(%s) = %v; want nil", m.Name(), err)
	}
	if m.Running() {
		t.Fatalf("%s.Running() = true after Stop; want false", m.Name())
	}
	// A frozen server still has its port open: the request hangs instead
	// of being refused.
	err = wantNoAnswer(t, c.Kind, m, time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("probe of stopped %s = %v; want context.DeadlineExceeded", m.Name(), err)
	}
	mustPut(t, dialKV(t, c.Kind, without(c.Endpoints(), i)), key, "frozen")

	if err := m.Continue(); err != nil {
		t.Fatalf("Continue(%s) = %v; want nil", m.Name(), err)
	}
	if !m.Running() {
		t.Fatalf("%s.Running() = false after Continue; want true", m.Name())
	}
	if err := memberAnswers(ctx, c.Kind, m.ClientAddr()); err != nil {
		t.Fatalf("%s after Continue: %v", m.Name(), err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() after Continue = %v; want nil", err)
	}
	mustGet(t, dialKV(t, c.Kind, []string{m.ClientAddr()}), key, "frozen")
}

func testBlackhole(t *testing.T, c *Cluster, key string) {
	ps := NewProxies(t, c)
	cli := dialKV(t, c.Kind, ps.Endpoints())
	mustPut(t, cli, key, "before")
	before := ps.Stats()
	if before.BytesUp == 0 || before.BytesDown == 0 || before.Active == 0 {
		t.Fatalf("Stats() after a put through the proxies = %+v; want bytes both ways and an open connection", before)
	}

	ps.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	// Another key: the write may still be applied once delivered, and
	// must not race with the one below.
	err := cli.put(ctx, key+"-held", "partitioned")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put through blackholed proxies = %v; want context.DeadlineExceeded", err)
	}
	during := ps.Stats()
	if during.HeldWhileBlackholed == 0 {
		t.Fatalf("Stats() while blackholed = %+v; want HeldWhileBlackholed > 0", during)
	}

	ps.Heal()
	mustPut(t, cli, key, "after")
	mustGet(t, cli, key, "after")
	if after := ps.Stats(); after.BytesUp <= during.BytesUp {
		t.Fatalf("Stats().BytesUp after Heal = %d; want more than %d", after.BytesUp, during.BytesUp)
	}
}

func testReset(t *testing.T, c *Cluster, key string) {
	ps := NewProxies(t, c)
	cli := dialKV(t, c.Kind, ps.Endpoints())
	mustPut(t, cli, key, "before")
	accepted := ps.Stats().Accepted
	ps.ResetConns()
	if s := ps.Stats(); s.Resets == 0 {
		t.Fatalf("Stats() after ResetConns = %+v; want Resets > 0", s)
	}
	// The client notices, reconnects through a proxy and carries on.
	mustPut(t, cli, key, "after")
	if s := ps.Stats(); s.Accepted <= accepted {
		t.Fatalf("Stats().Accepted after reset and put = %d; want more than %d (a new connection)", s.Accepted, accepted)
	}
}

func TestHarnessSingleMember(t *testing.T) {
	for _, kind := range []Kind{Etcd, ZooKeeper} {
		t.Run(string(kind), func(t *testing.T) {
			c := FromEnv(t).Start(t, kind, WithMembers(1))
			if got := len(c.Members); got != 1 {
				t.Fatalf("len(Members) = %d; want 1", got)
			}
			ctx := ctxTimeout(t, 30*time.Second)
			if i, err := c.Leader(ctx); err != nil || i != 0 {
				t.Fatalf("Leader() = %d, %v; want 0, nil", i, err)
			}
			key := fmt.Sprintf("harness-single-%s-%d", kind, time.Now().UnixNano())
			cli := dialKV(t, kind, c.Endpoints())
			mustPut(t, cli, key, "v")
			mustGet(t, cli, key, "v")
		})
	}
}
