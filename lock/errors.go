package lock

import (
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/sentinel"
)

// The sentinel errors. Backends wrap them and keep the cause, so callers test
// with [errors.Is], never with ==.
//
// Their texts carry no package prefix: an error gets one prefix, from the
// package whose exported function returned it ("etcdlock: lease "x"
// (token 5): lease lost: …"), however many layers wrapped it on the way.
var (
	// ErrLocked is returned by TryAcquire when another lease holds the lock,
	// and by TryAcquireShared and TryAcquireSemaphore when the request
	// would have to wait (see [SharedLocker] and [Semaphore]).
	ErrLocked = sentinel.Locked

	// ErrNotHeld is returned by Holder when nobody holds the lock, and by
	// [Revoker.Revoke] when no current holder has the token it names.
	ErrNotHeld = sentinel.NotHeld

	// ErrLost is wrapped by Lease.Err, Release and a waiting Acquire when
	// the session that backed the lease or the wait ended (expiry,
	// revocation, deletion of the record by someone else, or a
	// disconnection long enough that the server may have expired it).
	ErrLost = sentinel.Lost

	// ErrReleased is wrapped by Lease.Err after Release or Close ended the
	// lease, and by a second Release.
	ErrReleased = sentinel.Released

	// ErrClosed is returned by every call on a Locker after Close, and by a
	// waiting Acquire that Close interrupted.
	ErrClosed = sentinel.Closed

	// ErrIncompatible is wrapped by the calls of [SharedLocker] and
	// [Semaphore], and by Acquire and TryAcquire, when the request cannot
	// join the queue of its name: it asks for a semaphore with a limit
	// other than the limit of the requests queued before it, or it mixes
	// semaphore requests with lock (shared or exclusive) requests on one
	// name. Such a request is never granted and leaves no record.
	ErrIncompatible = sentinel.Incompatible

	// ErrPermission is wrapped by every call that the server refused for
	// want of permission: missing or wrong credentials, a client
	// certificate it does not trust, a role or ACL that does not allow
	// the request. Such a call fails at once; it is not retried.
	ErrPermission = sentinel.Permission

	// ErrInvalidName is wrapped by every call given a name that breaks the
	// rule documented on [ValidateName].
	ErrInvalidName = sentinel.InvalidName

	// ErrInvalidConfig is wrapped by constructors and [Open] when given a
	// nil client, an empty server list, a malformed URL, an unknown scheme
	// or option, or an option with a bad value, and by every call given a
	// nil context. It is the same value as [fencing.ErrInvalidConfig]: one
	// sentinel for one meaning, whichever package a caller imports.
	ErrInvalidConfig = fencing.ErrInvalidConfig
)
