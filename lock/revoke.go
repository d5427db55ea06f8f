package lock

import (
	"context"

	"github.com/fencelock/fencelock/fencing"
)

// Revoker is implemented by Lockers that can end another client's lease,
// named by its fencing token so that a later grant is never ended. Like
// [Observer] it is found by a type assertion on a Locker.
//
// Revoke deletes the holder's record in one atomic step that checks it is
// still that grant's, freeing the lock at once. The revoked lease ends
// with [ErrLost] when its Locker hears of the deletion; until then its
// process may still write, and only a resource that enforces tokens
// refuses those writes. Revoke is for a stuck holder; ask a healthy one to
// release. A grant admitted whose Acquire has not returned counts as a
// holder; that Acquire then fails with ErrLost.
type Revoker interface {
	// Revoke ends the lease of the current holder of name whose token is
	// token, and returns nil once its record is deleted. It returns an
	// error wrapping [ErrNotHeld] when no current holder has that token (a
	// waiter's, an ended grant's, 0: nothing is deleted), or one wrapping
	// [ErrInvalidName], [ErrClosed] or ctx's error. When the connection
	// fails under the request, call again: ErrNotHeld then means it was
	// revoked.
	Revoke(ctx context.Context, name string, token fencing.Token) error
}
