package zktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// TestResumeUnsupported: zklock cannot take over another process's
// session (see docs/design/zookeeper.md, "Resume"): a lease's Ticket and
// lock.Resume through its Locker fail with ErrUnsupported, leaving the
// lock as it was.
func TestResumeUnsupported(t *testing.T) {
	h := newHarness(t, startEnsemble(t).Endpoints())
	l := h.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	le, err := l.Acquire(ctx, "job")
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if tk, err := le.(lock.Resumable).Ticket(); tk != "" || !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Ticket() = %q, %v; want an error wrapping %v", tk, err, lock.ErrUnsupported)
	}
	other := h.dial(t)
	got, err := lock.Resume(ctx, other, "job", "zk/1 1 1 /x")
	if got != nil || !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("lock.Resume(zklock) = %v, %v; want nil, an error wrapping %v", got, err, lock.ErrUnsupported)
	}
	if h, err := other.Holder(ctx, "job"); err != nil || h.Token != le.Token() || le.Err() != nil {
		t.Fatalf("after Resume: Holder() = %+v, %v, lease Err() = %v; want the lease still holding", h, err, le.Err())
	}
}
