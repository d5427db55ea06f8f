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
// # What a revocation does
//
// Revoke deletes the record of the holder of name whose token is token,
// in one atomic step that checks that the record is still that grant's
// (etcd: a transaction comparing the record's create revision; ZooKeeper:
// a delete of the znode whose czxid is token, guarded by its version). The
// deletion frees the grant at once, exactly as the end of the holder's
// session would: the waiters behind it are admitted by the queue rules
// (see [SharedLocker]), without any help from the holder's process, which
// may be frozen, partitioned or gone.
//
// The revoked lease ends with [Lease.Err] wrapping [ErrLost], and a cause
// that says its record was revoked or deleted by another client, when its
// Locker hears of the deletion: at once if it is running and connected,
// otherwise when it runs and reconnects again (or when its session has
// expired meanwhile, whichever it notices first). Its Release then
// returns an error wrapping ErrLost. A revocation therefore cannot make
// the revoked process stop before the next holder starts: the next grant's
// token is higher, and a resource that enforces tokens (package fencing,
// the backends' guarded writes) refuses the revoked holder's later writes.
// Revoke is for a holder that is stuck; a healthy one should be asked to
// release.
//
// # Which grants can be revoked
//
// With read-write locks and semaphores a name has several holders:
// Revoke ends only the one whose token is token, and the other holders
// keep their grants. A token that is not the token of a current holder of
// name — a waiter's, an ended grant's, another name's, 0 — ends nothing,
// and Revoke returns an error wrapping [ErrNotHeld]. Waiters are refused
// on purpose: a waiter holds nothing to revoke, and its own process can
// cancel its wait. A grant that the server has admitted but whose Acquire
// has not returned yet counts as a holder; its Acquire then fails with
// ErrLost.
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
