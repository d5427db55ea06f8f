package zklock

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// TestResumeUnsupported: Ticket and Resume refuse with ErrUnsupported,
// even on nil receivers, so lock.Resume gives the same answer.
func TestResumeUnsupported(t *testing.T) {
	if tk, err := (*Lease)(nil).Ticket(); tk != "" || !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Ticket() = %q, %v; want an error wrapping ErrUnsupported", tk, err)
	}
	var l *Locker
	if le, err := lock.Resume(context.Background(), l, "a", "zk/1"); le != nil || !errors.Is(err, lock.ErrInvalidConfig) {
		t.Errorf("lock.Resume(nil *Locker) = %v, %v; want an error wrapping ErrInvalidConfig", le, err)
	}
	if le, err := l.Resume(context.Background(), "a", "zk/1"); le != nil || !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Resume() = %v, %v; want an error wrapping ErrUnsupported", le, err)
	}
}
