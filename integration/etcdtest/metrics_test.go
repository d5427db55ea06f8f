package etcdtest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestEtcdMetrics checks the metrics and spans of etcdlock on a real
// cluster with the OpenTelemetry SDK's manual reader: the backend-neutral
// checks (grants, holds, a loss by session expiry, the name attribute, an
// election failover), then GuardedTxn's fencing decisions. The Lockers come
// from lock.Open with its options, as a user would make them.
func TestEtcdMetrics(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	testutil.RunObservability(t, testutil.ObsBackend{
		Name: "etcd",
		NewLocker: func(t *testing.T, mp metric.MeterProvider, tp trace.TracerProvider, nameAttr func(string) string) lock.Locker {
			return openLocker(t, c, mp, tp, nameAttr)
		},
		ExpireSession: func(t *testing.T, l lock.Locker) { revokeSession(t, admin, l) },
	})
	t.Run("GuardedTxn", func(t *testing.T) { testEtcdGuardedMetrics(t, c, admin) })
}

// openLocker opens a Locker with lock.Open and the given providers.
func openLocker(t *testing.T, c *cluster.Cluster, mp metric.MeterProvider, tp trace.TracerProvider, nameAttr func(string) string) lock.Locker {
	t.Helper()
	opts := []lock.OpenOption{lock.WithMeterProvider(mp), lock.WithLogger(slog.New(slog.DiscardHandler))}
	if tp != nil {
		opts = append(opts, lock.WithTracerProvider(tp))
	}
	if nameAttr != nil {
		opts = append(opts, lock.WithNameAttribute(nameAttr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "etcd://"+strings.Join(c.Endpoints(), ",")+"/metrics?ttl="+testTTL.String(), opts...)
	if err != nil {
		t.Fatalf("lock.Open() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// revokeSession revokes l's session lease with another client, as the
// server does when it expires.
func revokeSession(t *testing.T, admin *clientv3.Client, l lock.Locker) {
	t.Helper()
	id, ok := testutil.SessionLeaseID(l.(*etcdlock.Locker))
	if !ok {
		t.Fatalf("the Locker has no live session")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke(%x) = %v", int64(id), err)
	}
}

// testEtcdGuardedMetrics checks that GuardedTxn counts an accepted write
// and a stale one refused, and records a span with the token.
func testEtcdGuardedMetrics(t *testing.T, c *cluster.Cluster, admin *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := testutil.NewMetrics(t)
	tp, spans := testutil.Spans(t)
	l := openLocker(t, c, m.Provider, tp, nil)
	le, err := l.Acquire(ctx, testutil.UniqueName(t))
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	key := "metrics-data/" + testutil.UniqueName(t)
	if _, err := etcdlock.GuardedTxn(ctx, admin, le, clientv3.OpPut(key, "v1")); err != nil {
		t.Fatalf("GuardedTxn() while held = %v", err)
	}
	revokeSession(t, admin, l)
	// The server refuses it whether or not the lease has noticed yet.
	if _, err := etcdlock.GuardedTxn(ctx, admin, le, clientv3.OpPut(key, "stale")); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("GuardedTxn() after the session ended = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	testutil.CheckGuardedWrites(t, m, spans, "etcdlock.GuardedTxn", le.Token())
}
