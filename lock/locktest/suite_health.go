package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// testHealthy checks lock.HealthChecker on a Locker's whole life: healthy
// before its first call and while it holds a lease, refusing a nil
// context, and reporting ErrClosed once closed.
func (s *suite) testHealthy(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	l := ls[0]
	h := l.(lock.HealthChecker)
	if err := h.Healthy(ctx); err != nil {
		t.Fatalf("Healthy() of a new Locker = %v; want nil", err)
	}
	le := s.mustAcquire(t, ctx, l, name)
	if err := h.Healthy(ctx); err != nil {
		t.Errorf("Healthy() while holding a lease = %v; want nil", err)
	}
	var nilCtx context.Context
	if err := h.Healthy(nilCtx); !errors.Is(err, lock.ErrInvalidConfig) {
		t.Errorf("Healthy(nil) = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
	}
	mustRelease(t, ctx, le)
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := h.Healthy(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Healthy() after Close = %v; want an error wrapping %v", err, lock.ErrClosed)
	}
}

// testHealthyAfterExpiry checks that a Locker whose session the server
// ended becomes healthy again, on a new session, without any other call.
func (s *suite) testHealthyAfterExpiry(t *testing.T) {
	ctx, name, ls, _ := s.setup(t, 1)
	l := ls[0]
	h := l.(lock.HealthChecker)
	le := s.mustAcquire(t, ctx, l, name)
	s.expirer.ExpireSession(t, l)
	s.waitDone(t, le, "lease of an expired session")
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.Healthy(hctx); err != nil {
		t.Errorf("Healthy() after the session expired = %v; want nil once a new session is up", err)
	}
	again := s.mustAcquire(t, ctx, l, name+"-again")
	checkAfter(t, again, le, "grant after Healthy on a new session")
	mustRelease(t, ctx, again)
}
