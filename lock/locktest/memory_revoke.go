package locktest

import (
	"context"
	"fmt"
	"slices"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Revoker = (*MemLocker)(nil)

// Revoke implements [lock.Revoker]: it deletes the record of name's
// holder whose token is token, under the Memory's lock, so the check and
// the delete are one step. The revoked lease ends at once (a Memory has no
// network: its Lockers hear of every deletion the moment it happens), with
// Err wrapping [lock.ErrLost] and saying who revoked it, and the waiters
// behind it are admitted. A token that is not a current holder's (a
// waiter's, an ended grant's, 0) returns an error wrapping
// [lock.ErrNotHeld] and changes nothing.
func (l *MemLocker) Revoke(ctx context.Context, name string, token fencing.Token) error {
	if err := l.enter(ctx, "revoke", name); err != nil {
		return err
	}
	m := l.m
	defer m.mu.Unlock()
	q := m.queues[name]
	i := slices.IndexFunc(q, func(r *record) bool { return r.token == token })
	switch {
	case i < 0:
		return fmt.Errorf("locktest: revoke %q token %d: %w: no request of the name has that token", name, token, lock.ErrNotHeld)
	case !queue.Admitted(requests(q), i):
		return fmt.Errorf("locktest: revoke %q token %d: %w: the request is waiting, not holding", name, token, lock.ErrNotHeld)
	}
	cause := fmt.Errorf("%w: revoked by %q", lock.ErrLost, l.identity)
	m.dropLocked(q[i], cause, cause)
	return nil
}
