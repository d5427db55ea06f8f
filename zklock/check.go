package zklock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

// Exported methods refuse a nil or zero receiver and a nil context with an
// error wrapping lock.ErrInvalidConfig, or return zero values.

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

var errNotLease = fmt.Errorf("%w: *zklock.Lease not granted by a Locker", lock.ErrInvalidConfig)
