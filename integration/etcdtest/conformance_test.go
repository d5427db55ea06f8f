package etcdtest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// harness gives the conformance suite Lockers, each with its own client, on
// one cluster, and implements the suite's optional interfaces.
type harness struct {
	endpoints []string
	admin     *clientv3.Client
	prefix    string
	opts      []etcdlock.Option // given to every Locker of NewLocker, after the harness's own
	records   string            // what ends a name's record prefix: "/#", or "/" for LayoutConcurrency

	mu    sync.Mutex
	gates map[*etcdlock.Locker]*testutil.Gate
}

var (
	_ locktest.Harness        = (*harness)(nil)
	_ locktest.SessionExpirer = (*harness)(nil)
	_ locktest.SessionStaller = (*harness)(nil)
	_ locktest.RecordLister   = (*harness)(nil)
	_ locktest.SessionFreezer = (*harness)(nil)
)

// FreezeSession cuts the Locker's client off from every member, as a
// frozen or partitioned process is cut off, until thawed; its session
// lease lives on in the cluster until its TTL runs out.
func (h *harness) FreezeSession(t *testing.T, l lock.Locker) func() {
	t.Helper()
	h.mu.Lock()
	g := h.gates[l.(*etcdlock.Locker)]
	h.mu.Unlock()
	if g == nil {
		t.Fatalf("FreezeSession: the Locker was not made by NewLocker")
	}
	g.Cut()
	return g.Heal
}

// NewLocker returns a Locker with a client of its own, which connects
// through a Gate so that StallSession can cut it off.
func (h *harness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	g := new(testutil.Gate)
	client := testutil.EtcdClient(t, clientv3.Config{
		Endpoints:            h.endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return g.Dial(ctx, "tcp", addr)
		})},
	})
	l := newLocker(t, client, append([]etcdlock.Option{etcdlock.WithPrefix(h.prefix), etcdlock.WithIdentity(identity)}, h.opts...)...)
	h.mu.Lock()
	h.gates[l] = g
	h.mu.Unlock()
	return l
}

// StallSession cuts the Locker's client off from every member until the
// cluster has expired its session lease (TimeToLive reports it gone), as
// it does when a client goes silent, and then lets it reconnect.
func (h *harness) StallSession(t *testing.T, l lock.Locker) {
	t.Helper()
	el := l.(*etcdlock.Locker)
	h.mu.Lock()
	g := h.gates[el]
	h.mu.Unlock()
	if g == nil {
		t.Fatalf("StallSession: the Locker was not made by NewLocker")
	}
	id, ok := testutil.SessionLeaseID(el)
	if !ok {
		t.Fatalf("StallSession: the Locker has no session")
	}
	g.Cut()
	defer g.Heal()
	deadline := time.Now().Add(10 * el.TTL())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := h.admin.TimeToLive(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("TimeToLive(%x) = %v", int64(id), err)
		}
		if resp.TTL == -1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("StallSession: lease %x still alive (TTL %ds) %v after its client was cut off", int64(id), resp.TTL, 10*el.TTL())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ExpireSession revokes the Locker's session lease with another client, as
// the server does when the lease expires.
func (h *harness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	id, ok := testutil.SessionLeaseID(l.(*etcdlock.Locker))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke(%x) = %v", int64(id), err)
	}
}

func (h *harness) Records(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pfx := h.prefix + "/" + name + h.records
	resp, err := h.admin.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

func TestEtcdConformance(t *testing.T) {
	c := startCluster(t)
	h := &harness{endpoints: c.Endpoints(), admin: newClient(t, c.Endpoints()), prefix: "conformance", records: "/#", gates: map[*etcdlock.Locker]*testutil.Gate{}}
	locktest.TestLockerWith(t, h, locktest.Options{RequireOptional: true})
}

// TestEtcdConformanceConcurrency runs the suite on Lockers with the
// records of etcd's concurrency.Mutex: keyed by the session, so that a
// Locker's own acquisitions of a name take turns in it and a name's
// range holds the names below it, and with no shared or semaphore
// requests (the suite checks that they are refused).
func TestEtcdConformanceConcurrency(t *testing.T) {
	c := startCluster(t)
	h := &harness{endpoints: c.Endpoints(), admin: newClient(t, c.Endpoints()), prefix: "conformance-concurrency", records: "/",
		opts: []etcdlock.Option{etcdlock.WithLayout(etcdlock.LayoutConcurrency)}, gates: map[*etcdlock.Locker]*testutil.Gate{}}
	locktest.TestLockerWith(t, h, locktest.Options{RequireOptional: true, RefusesShared: true, RefusesSemaphores: true, SessionKeyed: true})
}
