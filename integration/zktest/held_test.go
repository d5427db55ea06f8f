package zktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKHeldLeasesGoroutines holds many leases on one Locker and checks
// that they cost no goroutine each, and that a held lease whose znode
// someone else deletes still ends, alone and promptly, with lock.ErrLost.
func TestZKHeldLeasesGoroutines(t *testing.T) {
	const (
		few       = 10
		many      = 1000
		maxGrowth = 50
	)
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	ctx := testutil.Context(t, 2*time.Minute)
	l := h.dial(t)
	base := lockName(t)
	leases := make([]*zklock.Lease, many)
	acquireRange(t, ctx, l, base, leases, 0, few)
	atFew := settledGoroutines()
	acquireRange(t, ctx, l, base, leases, few, many)
	atMany, deadline := runtime.NumGoroutine(), time.Now().Add(10*time.Second)
	for atMany-atFew >= maxGrowth && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling with a deadline
		atMany = runtime.NumGoroutine()
	}
	if atMany-atFew >= maxGrowth {
		t.Fatalf("runtime.NumGoroutine() = %d with %d leases held, %d with %d; want fewer than %d more", atMany, many, atFew, few, maxGrowth)
	}
	t.Logf("goroutines: %d with %d leases held, %d with %d", atFew, few, atMany, many)

	// Someone else deletes one lease's znode; and sets the data of
	// another (which spends its watch) before deleting it.
	plain, changed := leases[many/2], leases[many/2+1]
	if _, err := h.admin.conn.Set(changed.Path(), []byte("meddled"), -1); err != nil {
		t.Fatalf("Set(%s) = %v", changed.Path(), err)
	}
	for _, le := range []*zklock.Lease{plain, changed} {
		start := time.Now()
		if err := h.admin.conn.Delete(le.Path(), -1); err != nil {
			t.Fatalf("Delete(%s) = %v", le.Path(), err)
		}
		testutil.Recv(t, le.Done(), 2*time.Second, "Done of the lease whose znode was deleted")
		if err := le.Err(); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Err() after its znode was deleted = %v; want an error wrapping %v", err, lock.ErrLost)
		}
		t.Logf("lease %s ended %v after its znode was deleted", le.Name(), time.Since(start))
	}
	for i, le := range leases {
		if le == plain || le == changed {
			continue
		}
		if err := le.Err(); err != nil {
			t.Fatalf("lease %d: Err() = %v; want nil (only other leases' znodes were deleted)", i, err)
		}
	}

	// Release the rest: each release's own deletion must not end
	// anything else.
	var wg sync.WaitGroup
	errs := make(chan error, many)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < many; i += 16 {
				le := leases[i]
				if le == plain || le == changed {
					continue
				}
				if err := le.Release(ctx); err != nil {
					errs <- fmt.Errorf("Release(%s) = %v; want nil", le.Name(), err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestZKHeldLeaseWatchAfterReconnect checks that a Locker keeps
// watching its held leases' znodes across a new connection in the same
// session. The server drops a connection's watches with it, and
// go-zookeeper sets again only the watches it keeps itself, which the
// Locker's lease watches are not: the Locker must set them again, or a
// znode deleted after the reconnect would leave its lease held.
func TestZKHeldLeaseWatchAfterReconnect(t *testing.T) {
	const n = 40
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	proxy := cluster.NewProxy(t, c.Members[0].ClientAddr())
	l := (&harness{servers: []string{proxy.Addr()}, root: h.root, admin: h.admin, sess: h.sess}).dial(t)
	ctx := testutil.Context(t, 2*time.Minute)
	base := lockName(t)
	leases := make([]*zklock.Lease, n)
	acquireRange(t, ctx, l, base, leases, 0, n)
	// A lease's first watch is set 50ms after its grant.
	time.Sleep(500 * time.Millisecond)

	before := proxy.Stats()
	proxy.ResetConns()
	// The next request goes out on the new connection, in the same
	// session (every lease is still held below).
	probe, err := l.Acquire(ctx, base+"-probe")
	if err != nil {
		t.Fatalf("Acquire after the reset = %v; want nil", err)
	}
	if err := probe.Release(ctx); err != nil {
		t.Fatalf("Release after the reset = %v; want nil", err)
	}
	after := proxy.Stats()
	if after.Resets <= before.Resets || after.Accepted <= before.Accepted {
		t.Fatalf("proxy: resets %d -> %d, connections accepted %d -> %d; want both to grow (the fault did not happen)",
			before.Resets, after.Resets, before.Accepted, after.Accepted)
	}
	for i, le := range leases {
		if err := le.Err(); err != nil {
			t.Fatalf("lease %d: Err() after the reconnect = %v; want nil (same session)", i, err)
		}
	}

	// Let the Locker's own work settle, then delete every other znode.
	time.Sleep(500 * time.Millisecond)
	for i := 0; i < n; i += 2 {
		le := leases[i]
		start := time.Now()
		if err := h.admin.conn.Delete(le.Path(), -1); err != nil {
			t.Fatalf("Delete(%s) = %v", le.Path(), err)
		}
		testutil.Recv(t, le.Done(), 5*time.Second, "Done of a lease whose znode was deleted after a reconnect")
		if err := le.Err(); !errors.Is(err, lock.ErrLost) {
			t.Errorf("lease %d: Err() after its znode was deleted = %v; want an error wrapping %v", i, err, lock.ErrLost)
		}
		if d := time.Since(start); d > time.Second {
			t.Logf("lease %d ended %v after its znode was deleted", i, d)
		}
	}
	for i := 1; i < n; i += 2 {
		if err := leases[i].Err(); err != nil {
			t.Errorf("lease %d: Err() = %v; want nil (only other leases' znodes were deleted)", i, err)
		}
		if err := leases[i].Release(ctx); err != nil {
			t.Errorf("lease %d: Release() = %v; want nil", i, err)
		}
	}
}

// acquireRange acquires base-i for i in [from, to) on l, 16 at a time,
// into leases[i].
func acquireRange(t *testing.T, ctx context.Context, l lock.Locker, base string, leases []*zklock.Lease, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + w; i < to; i += 16 {
				name := fmt.Sprintf("%s-%d", base, i)
				le, err := l.Acquire(ctx, name)
				if err != nil {
					errs <- fmt.Errorf("Acquire(%q) = %v; want nil", name, err)
					continue
				}
				leases[i] = le.(*zklock.Lease)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// settledGoroutines returns the number of goroutines once it has stayed
// the same for a few readings (at most about a second).
func settledGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for range 100 {
		time.Sleep(10 * time.Millisecond) // polling, not ordering
		m := runtime.NumGoroutine()
		if m == n {
			if same++; same == 5 {
				break
			}
			continue
		}
		n, same = m, 0
	}
	return n
}
