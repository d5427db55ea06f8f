package zklock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

// The checks below make every exported method refuse a nil or zero
// receiver (a *Locker or *Lease not made by this package) and a nil
// context with an error wrapping lock.ErrInvalidConfig instead of a panic.
// Methods without an error result return zero values for such receivers.

// usable reports whether l was made by Dial or lock.Open, and ctx is set.
func (l *Locker) usable(ctx context.Context) error {
	if l == nil || l.o == nil {
		return fmt.Errorf("%w: Locker not created by Dial or lock.Open", lock.ErrInvalidConfig)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", lock.ErrInvalidConfig)
	}
	return nil
}

// valid reports whether le was granted by a Locker.
func (le *Lease) valid() bool { return le != nil && le.l != nil && le.s != nil }

// errNotLease is the error of a nil or zero *Lease.
func errNotLease() error {
	return fmt.Errorf("%w: *zklock.Lease not granted by a Locker", lock.ErrInvalidConfig)
}
