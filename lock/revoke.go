package lock

import (
	"context"

	"github.com/fencelock/fencelock/fencing"
)

// Revoker is implemented by Lockers that can end another client's lease
// from anywhere, safely: a revocation names the grant it ends by its
// fencing token, so it never ends a later grant of the same name. Like
// [Observer] it is found by a type assertion on a Locker.
//
// Revoke deletes the holder's record in one atomic step that checks it is
// still that grant's, which frees the grant at once without the holder's
// help. The revoked lease ends with Err wrapping [ErrLost] when its Locker
// hears of the deletion; until then its process may still write, and only
// a resource that enforces tokens refuses those late writes. Revoke is for
// a holder that is stuck; ask a healthy one to release.
//
// Revoke ends only the holder whose token is token; other holders of a
// read-write lock or semaphore keep their grants. A token that is not a
// current holder's (a waiter's, an ended grant's, another name's, 0) ends
// nothing, and Revoke returns an error wrapping [ErrNotHeld]: a waiter
// holds nothing to revoke and can cancel its own wait. A grant the server
// has admitted but whose Acquire has not returned yet counts as a holder;
// its Acquire then fails with ErrLost.
type Revoker interface {
	// Revoke ends the lease of the current holder of name whose token is
	// token. It returns nil once the holder's record is deleted, an error
	// wrapping [ErrNotHeld] when no current holder of name has that token
	// (nothing was deleted), or an error wrapping [ErrInvalidName],
	// [ErrClosed] or ctx's error. When the connection fails under the
	// request, the grant may or may not have been revoked: call again
	// (ErrNotHeld then means it was).
	Revoke(ctx context.Context, name string, token fencing.Token) error
}
