package lock

import (
	"context"

	"github.com/fencelock/fencelock/fencing"
)

// Revoker is implemented by Lockers that can end another client's lease,
// named by its fencing token so that a later grant is never ended.
//
// Revoke frees the lock at once. The revoked lease ends with [ErrLost]
// when its Locker hears of it; until then its process may still write,
// and only a resource that enforces tokens refuses those writes. Revoke is
// for a stuck holder; ask a healthy one to release. A grant admitted whose
// Acquire has not returned counts as a holder; that Acquire fails with
// ErrLost.
type Revoker interface {
	// Revoke ends the lease of the current holder of name whose token is
	// token, and returns nil once its record is deleted. It returns an
	// error wrapping [ErrNotHeld] when no current holder has that token
	// (a waiter's included), or one wrapping [ErrInvalidName], [ErrClosed]
	// or ctx's error. Called again after a failed connection, it returns
	// ErrNotHeld if the first call revoked the lease.
	Revoke(ctx context.Context, name string, token fencing.Token) error
}
