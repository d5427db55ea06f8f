package lock

import "errors"

// The sentinel errors. Backends wrap them and keep the cause, so callers test
// with [errors.Is], never with ==.
var (
	// ErrLocked is returned by TryAcquire when another lease holds the lock.
	ErrLocked = errors.New("lock: locked by another holder")

	// ErrNotHeld is returned by Holder when nobody holds the lock.
	ErrNotHeld = errors.New("lock: not held")

	// ErrLost is wrapped by Lease.Err, Release and a waiting Acquire when
	// the session that backed the lease or the wait ended (expiry,
	// revocation, deletion of the record by someone else, or a
	// disconnection long enough that the server may have expired it).
	ErrLost = errors.New("lock: lease lost")

	// ErrReleased is wrapped by Lease.Err after Release or Close ended the
	// lease, and by a second Release.
	ErrReleased = errors.New("lock: lease released")

	// ErrClosed is returned by every call on a Locker after Close, and by a
	// waiting Acquire that Close interrupted.
	ErrClosed = errors.New("lock: locker closed")

	// ErrInvalidName is wrapped by every call given a name that breaks the
	// rule documented on [ValidateName].
	ErrInvalidName = errors.New("lock: invalid name")

	// ErrInvalidConfig is wrapped by constructors and [Open] when given a
	// nil client, an empty server list, a malformed URL, an unknown scheme
	// or option, or an option with a bad value.
	ErrInvalidConfig = errors.New("lock: invalid configuration")
)
