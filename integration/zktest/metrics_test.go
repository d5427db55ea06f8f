package zktest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKMetrics checks the metrics and spans of zklock on a real ensemble
// with the OpenTelemetry SDK's manual reader: the backend-neutral checks
// (grants, holds, a loss by session expiry, the name attribute, an
// election failover), then GuardedMulti's fencing decisions. The Lockers
// come from zklock.Dial with the backend's own options.
func TestZKMetrics(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	testutil.RunObservability(t, testutil.ObsBackend{
		Name: "zookeeper",
		NewLocker: func(t *testing.T, mp metric.MeterProvider, tp trace.TracerProvider, nameAttr func(string) string) lock.Locker {
			return dialObserved(t, h, mp, tp, nameAttr)
		},
		ExpireSession: h.ExpireSession,
	})
	t.Run("GuardedMulti", func(t *testing.T) { testZKGuardedMetrics(t, h) })
}

// dialObserved dials a Locker that records metrics on mp and spans on tp.
func dialObserved(t *testing.T, h *harness, mp metric.MeterProvider, tp trace.TracerProvider, nameAttr func(string) string) *zklock.Locker {
	t.Helper()
	opts := []zklock.Option{zklock.WithMeterProvider(mp), zklock.WithLogger(slog.New(slog.DiscardHandler))}
	if tp != nil {
		opts = append(opts, zklock.WithTracerProvider(tp))
	}
	if nameAttr != nil {
		opts = append(opts, zklock.WithNameAttribute(nameAttr))
	}
	return h.dial(t, opts...)
}

// testZKGuardedMetrics checks that GuardedMulti counts an accepted write
// and a stale one refused, and records a span with the token.
func testZKGuardedMetrics(t *testing.T, h *harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := testutil.NewMetrics(t)
	tp, spans := testutil.Spans(t)
	l := dialObserved(t, h, m.Provider, tp, nil)
	le, err := l.Acquire(ctx, testutil.UniqueName(t))
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	conn := testutil.ZKConn(t, h.servers, sessionTimeout, nil)
	data := h.root + "-data-" + randHex(4)
	if _, err := zklock.GuardedMulti(ctx, conn, le, &zk.CreateRequest{Path: data, Data: []byte("v1"), Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		t.Fatalf("GuardedMulti() while held = %v", err)
	}
	t.Cleanup(func() { _ = conn.Delete(data, -1) })
	h.ExpireSession(t, l)
	// The server refuses it whether or not the lease has noticed yet.
	if _, err := zklock.GuardedMulti(ctx, conn, le, &zk.SetDataRequest{Path: data, Data: []byte("stale"), Version: -1}); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("GuardedMulti() after the session expired = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	testutil.CheckGuardedWrites(t, m, spans, "zklock.GuardedMulti", le.Token())
}
