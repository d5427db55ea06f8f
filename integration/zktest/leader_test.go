package zktest

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKLeaderKilled kills the ensemble's leader while locks are held and
// waited for. The sessions survive the election (their timeout is longer),
// so the leases stay held, the waiters stay queued, and hand-overs after
// the election carry higher tokens.
func TestZKLeaderKilled(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	ctx := testutil.Context(t, 60*time.Second)
	// Long enough to outlast an election (about 1.5s with tickTime 200ms).
	const timeout = 8 * time.Second
	a := h.dial(t, zklock.WithSessionTimeout(timeout), zklock.WithIdentity("a"))
	b := h.dial(t, zklock.WithSessionTimeout(timeout), zklock.WithIdentity("b"))
	names := []string{lockName(t), lockName(t)}
	var held []*zklock.Lease
	var waiting []<-chan acquired
	for _, name := range names {
		held = append(held, mustAcquire(t, ctx, a, name))
		waiting = append(waiting, goAcquire(ctx, b, name))
		waitRecords(t, h, name, 2, "b queued")
	}

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	if err := c.Members[leader].Kill(); err != nil {
		t.Fatalf("Kill(%s) = %v", c.Members[leader].Name(), err)
	}
	t.Cleanup(func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Members[leader].Restart(rctx); err != nil {
			t.Errorf("Restart(%s) = %v", c.Members[leader].Name(), err)
		}
	})
	killed := time.Now()
	// Wait for a new leader among the others.
	testutil.Eventually(t, 30*time.Second, "a new leader", func() bool {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		i, err := c.Leader(lctx)
		return err == nil && i != leader
	})
	t.Logf("new leader elected %v after the kill", time.Since(killed).Round(time.Millisecond))
	if c.Members[leader].Running() {
		t.Fatalf("%s still running after Kill", c.Members[leader].Name())
	}

	for i, name := range names {
		if err := held[i].Err(); err != nil {
			t.Errorf("lease %q after the election: Err() = %v; want nil (the session outlives the election)", name, err)
		}
		select {
		case r := <-waiting[i]:
			t.Fatalf("b's Acquire(%q) returned during the election: %v, %v; want it still queued", name, r.lease, r.err)
		default:
		}
		if got, err := b.Holder(ctx, name); err != nil || got.Identity != "a" || got.Token != held[i].Token() {
			t.Errorf("Holder(%q) after the election = %+v, %v; want a with token %d", name, got, err, held[i].Token())
		}
		if err := held[i].Release(ctx); err != nil {
			t.Fatalf("Release(%q) after the election = %v", name, err)
		}
		r := <-waiting[i]
		if r.err != nil {
			t.Fatalf("b's Acquire(%q) = %v; want a lease", name, r.err)
		}
		if r.lease.Token() <= held[i].Token() {
			t.Errorf("b's Token() = %d; want > %d", r.lease.Token(), held[i].Token())
		}
		if err := r.lease.Release(ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
	}
	// New acquisitions work on the two remaining servers.
	le := mustAcquire(t, ctx, a, names[0])
	// A zxid carries the leader's epoch in its high 32 bits.
	if le.Token()>>32 <= held[0].Token()>>32 {
		t.Errorf("token after the election has epoch %d; want above the old leader's %d", le.Token()>>32, held[0].Token()>>32)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}
