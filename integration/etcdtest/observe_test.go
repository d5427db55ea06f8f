package etcdtest

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestObserveCloseWhileUnreachable closes a Locker whose Observe goroutine
// is waiting for the cluster's answer to a read that will never come: the
// holder's record was deleted, the observer got the delete event and asked
// who holds the lock next, and its only member was cut off before the
// request got through. Close must interrupt that read instead of waiting
// for it, so it returns within a bound derived from the per-attempt
// timeout, not after a TCP timeout (or never, as the read has no deadline
// of its own while the connection stays open).
func TestObserveCloseWhileUnreachable(t *testing.T) {
	const ttl = 3 * time.Second
	// One attempt of a request gets ttl/3 (at least a second); Close may
	// take one such attempt plus its own bounded steps, never more.
	const attempt = max(ttl/3, time.Second)
	const closeBound = 3 * attempt

	c := startCluster(t)
	p := cluster.NewProxy(t, c.Members[0].ClientAddr())
	// No client keepalive: the proxy's byte counters below must move only
	// for the watch and the read.
	oc := testutil.EtcdClient(t, clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 5 * time.Second})
	obs, err := etcdlock.New(oc, etcdlock.WithTTL(ttl), etcdlock.WithIdentity("observer"))
	if err != nil {
		t.Fatalf("etcdlock.New() = %v", err)
	}
	t.Cleanup(func() { obs.Close() })
	holder := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity("holder"))
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)

	// The caller's context never ends: only Close can stop the observation.
	ch, errf, err := obs.Observe(t.Context(), name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	next := func(what string) lock.Holder {
		t.Helper()
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("Observe channel closed before %s: %v", what, errf())
			}
			return h
		case <-ctx.Done():
			t.Fatalf("no %s observed", what)
		}
		return lock.Holder{}
	}
	if h := next("first holder"); h != (lock.Holder{}) {
		t.Fatalf("first observed holder = %+v; want free", h)
	}
	a, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	// A create event comes through the watch itself, so receiving it
	// proves the watch is established.
	if h := next("grant"); h != (lock.Holder{Identity: "holder", Token: a.Token()}) {
		t.Fatalf("observed %+v; want {holder %d}", h, a.Token())
	}

	// Slow the proxy so that the observer's read of the next holder, sent
	// when the delete event arrives, is still in the proxy when the
	// blackhole starts: the proxy holds a delayed chunk if a blackhole
	// began during its delay.
	const delay = 500 * time.Millisecond
	p.SetDelay(delay)
	down := p.Stats().BytesDown
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	// HTTP/2 control frames (a ping's ack, a window update) are under 20
	// bytes each and the client has at most one ping out; a watch response
	// carrying the delete event (headers, key, revisions) is well over 64.
	const eventBytes = 64
	testutil.Eventually(t, 10*time.Second, "delete event delivered to the observer", func() bool {
		return p.Stats().BytesDown-down >= eventBytes
	})
	p.Blackhole()
	t.Cleanup(p.Heal)

	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- obs.Close() }()
	select {
	case err := <-closed:
		took := time.Since(start)
		t.Logf("Close returned in %v (bound %v)", took, closeBound)
		if err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
		if took > closeBound {
			t.Errorf("Close took %v with the cluster unreachable; want at most %v", took, closeBound)
		}
	case <-time.After(closeBound + 10*time.Second):
		// Let the held read through so that the Locker's goroutine, and
		// Close, can end before the leak check.
		p.Heal()
		<-closed
		t.Fatalf("Close did not return within %v with the cluster unreachable", closeBound+10*time.Second)
	}
	for range ch {
	}
	if err := errf(); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Observe end error = %v; want an error wrapping %v", err, lock.ErrClosed)
	}
}

// TestObserveShortGrants holds etcd observations to what the package doc
// promises (testutil.RunObserveShortGrants with every grant required):
// a watch delivers every event, so each of 40 grants released at once,
// each free moment between them, a grant held for 300ms and the final
// free state are reported, in order, once each.
func TestObserveShortGrants(t *testing.T) {
	c := startCluster(t)
	prefix := "observe-" + testutil.UniqueName(t)
	obs := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithPrefix(prefix), etcdlock.WithIdentity("observer"))
	holder := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithPrefix(prefix), etcdlock.WithIdentity("holder"))
	testutil.RunObserveShortGrants(t, obs, holder, "holder", testutil.ObserveBurst)
}
