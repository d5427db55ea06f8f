package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// testHealthy checks lock.HealthChecker over a Locker's life: healthy
// before its first call and while it holds a lease, refusing a nil
// context, and reporting ErrClosed once closed.
func (s *suite) testHealthy(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	h := ls[0].(lock.HealthChecker)
	if err := h.Healthy(ctx); err != nil {
		t.Fatalf("Healthy() of a new Locker = %v; want nil", err)
	}
	le := s.mustAcquire(t, ctx, ls[0], name)
	if err := h.Healthy(ctx); err != nil {
		t.Errorf("Healthy() while holding a lease = %v; want nil", err)
	}
	var nilCtx context.Context
	wantErr(t, "Healthy(nil)", h.Healthy(nilCtx), lock.ErrInvalidConfig)
	mustRelease(t, ctx, le)
	if err := ls[0].Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	wantErr(t, "Healthy() after Close", h.Healthy(ctx), lock.ErrClosed)
}

// testHealthyAfterExpiry checks that a Locker whose session the server
// ended becomes healthy again, on a new session, without any other call.
func (s *suite) testHealthyAfterExpiry(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	le := s.mustAcquire(t, ctx, ls[0], name)
	s.expirer.ExpireSession(t, ls[0])
	await(t, s, le.Done(), "lease of an expired session: Done()")
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ls[0].(lock.HealthChecker).Healthy(hctx); err != nil {
		t.Errorf("Healthy() after the session expired = %v; want nil once a new session is up", err)
	}
	again := s.mustAcquire(t, ctx, ls[0], name+"-again")
	checkAfter(t, again, le, "grant after Healthy on a new session")
	mustRelease(t, ctx, again)
}
