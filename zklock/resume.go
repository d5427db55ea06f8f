package zklock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

var _ lock.Resumer = (*Locker)(nil)

// Ticket always fails with an error wrapping [lock.ErrUnsupported]: a
// grant lives as long as its session, and go-zookeeper cannot attach a
// new process to a session (docs/design/zookeeper.md, "Resume").
func (le *Lease) Ticket() (lock.Ticket, error) {
	return "", fmt.Errorf("zklock: ticket: %w: a session cannot be handed to another process", lock.ErrUnsupported)
}

// Resume always fails with an error wrapping [lock.ErrUnsupported], and
// changes nothing: see [Lease.Ticket].
func (l *Locker) Resume(ctx context.Context, name string, t lock.Ticket) (lock.Lease, error) {
	return nil, fmt.Errorf("zklock: resume %q: %w: a session cannot be handed to another process", name, lock.ErrUnsupported)
}
