package lock

import (
	"errors"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/sentinel"
)

// The sentinel errors. Backends wrap them, so test with [errors.Is]. Their
// texts carry no package prefix: an error gets one prefix, from the package
// whose exported function returned it.
var (
	// ErrLocked is returned by TryAcquire when another lease holds the lock,
	// and by TryAcquireShared and TryAcquireSemaphore when the request
	// would have to wait (see [SharedLocker] and [Semaphore]).
	ErrLocked = sentinel.Locked

	// ErrNotHeld is returned by Holder when nobody holds the lock, and by
	// [Revoker.Revoke] when no current holder has the token it names.
	ErrNotHeld = sentinel.NotHeld

	// ErrLost is wrapped by Lease.Err, Release and a waiting Acquire when
	// the session behind them ended (expiry, revocation, deletion of the
	// record, or a disconnection the server may have expired it for).
	ErrLost = sentinel.Lost

	// ErrReleased is wrapped by Lease.Err after Release or Close ended the
	// lease, and by a second Release.
	ErrReleased = sentinel.Released

	// ErrClosed is returned by every call on a Locker after Close, and by a
	// waiting Acquire that Close interrupted.
	ErrClosed = sentinel.Closed

	// ErrIncompatible is wrapped by a request that cannot join its name's
	// queue: a semaphore limit other than that of the requests queued
	// before it, or semaphore and lock requests mixed on one name. Such a
	// request is never granted and leaves no record (while its record is
	// on its way out, a request behind it may be refused too).
	ErrIncompatible = sentinel.Incompatible

	// ErrPermission is wrapped by every call the server refused for want
	// of permission (credentials, an untrusted client certificate, a role
	// or ACL). Such a call fails at once; it is not retried.
	ErrPermission = sentinel.Permission

	// ErrInvalidName is wrapped by every call given a name that breaks the
	// rule documented on [ValidateName].
	ErrInvalidName = sentinel.InvalidName

	// ErrInvalidConfig is wrapped by constructors and [Open] given a bad
	// value (a nil client, an empty server list, a malformed URL, an
	// unknown scheme or option), and by every call given a nil context. It
	// is the same value as [fencing.ErrInvalidConfig].
	ErrInvalidConfig = fencing.ErrInvalidConfig

	// ErrUnsupported is wrapped by a call the Locker cannot serve, such as
	// [Resume] on a backend that cannot take over another process's
	// session. It is the same value as [errors.ErrUnsupported].
	ErrUnsupported = errors.ErrUnsupported
)
