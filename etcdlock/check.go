package etcdlock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

// Exported methods refuse a nil or zero receiver and a nil context with an
// error wrapping lock.ErrInvalidConfig, or return zero values.

// usable reports whether l was made by New or lock.Open, and ctx is set.
func (l *Locker) usable(ctx context.Context) error {
	if l == nil || l.opts == nil {
		return fmt.Errorf("%w: Locker not created by New or lock.Open", lock.ErrInvalidConfig)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", lock.ErrInvalidConfig)
	}
	return nil
}

// begin checks the receiver, the context and the lock name of a call on a
// lock name, and prefixes its error for op.
func (l *Locker) begin(ctx context.Context, op, name string) error {
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("etcdlock: %s %q: %w", op, name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return fmt.Errorf("etcdlock: %s: %w", op, err)
	}
	return nil
}

// valid reports whether le was granted by a Locker.
func (le *Lease) valid() bool { return le != nil && le.l != nil && le.s != nil }

var errNotLease = fmt.Errorf("%w: *etcdlock.Lease not granted by a Locker", lock.ErrInvalidConfig)
