// Package lock is the backend-neutral API of fencelock: exclusive, fenced
// locks over etcd (package etcdlock) and ZooKeeper (package zklock), and an
// in-memory implementation for tests (package locktest).
//
// A [Locker] grants [Lease]s on named locks, each with a fencing token
// (see package fencing).
//
// # What is guaranteed
//
//   - At most one lease of a name is held at a time, as far as the backend's
//     quorum is concerned. Two acquisitions on one Locker exclude each other
//     exactly as two Lockers do.
//   - Waiters are served in the order they arrived, and a release wakes only
//     the waiters it may admit.
//   - A lease's Done channel closes, with Err wrapping [ErrLost], no later
//     than the moment the backend could grant the lock to someone else, as
//     long as the local clock does not run slow by more than the configured
//     margin.
//   - Tokens rise with every grant, across all Lockers and sessions, and
//     zero is never handed out. All names draw from one counter per
//     deployment (an etcd cluster, a ZooKeeper ensemble, a locktest.Memory),
//     fixed when the acquisition's record is created: an acquisition that
//     starts after a grant of any name gets a higher token, though a waiter
//     queued earlier may be granted later.
//
// # What is not
//
// A lease can be lost at any moment, and the holder may learn it too late
// to stop a write already on its way (a process paused between checking
// Done and writing). Send [Lease.Token] with every write and have the
// resource enforce it: package fencing, or the backends' guarded writes.
//
// # Optional interfaces
//
// Found by a type assertion on a Locker, implemented by both backends and
// locktest.Memory: [SharedLocker] (read-write locks) and [Semaphore], which
// share one queue per name by the rules on SharedLocker; [HolderLister],
// [QueueLister], [Revoker], [Observer] and [HealthChecker] (readiness).
//
// [Election] runs a candidate over any Locker, with the lease's token as
// its term; [AcquireAll] holds several names at once, all or none, without
// deadlock; [Do] runs a function while holding a lock, with a context
// cancelled if the lease is lost. [Resume] takes over, with its [Ticket],
// the grant of a process that stopped holding it (on a [Resumer]:
// etcdlock's Locker).
//
// # Names, identities and bad input
//
// Names follow [ValidateName] on every backend, namespaces [URLPath],
// identities [ValidateIdentity]. Bad input, a nil included, is an error
// wrapping [ErrInvalidConfig] or [ErrInvalidName], never a panic; only
// [Register] panics.
//
// # Opening by URL and observability
//
// [Open] builds a Locker from a URL ("etcd://…", "zk://…") with the
// options every backend understands. Log lines ([WithLogger]) carry the
// keys backend, lock, token and session, never a password. Metrics and
// spans go through the OpenTelemetry API only when a provider is given
// ([WithMeterProvider], [WithTracerProvider], [WithNameAttribute]).
//
// # Read more
//
// The design notes in the repository's docs/design: queue.md (the queue
// rules), etcd.md and zookeeper.md (how each backend keeps this contract),
// trials.md (the fault trials that check it).
package lock

import (
	"context"

	"github.com/fencelock/fencelock/fencing"
)

// Locker grants leases on named locks. Implementations are safe for
// concurrent use.
type Locker interface {
	// Acquire blocks until it holds the lock called name, ctx is done, or
	// the Locker is closed. It returns an error wrapping [ErrInvalidName],
	// [ErrClosed], [ErrLost] (the session ended while waiting), or ctx's
	// error. A failed or cancelled Acquire leaves no record behind.
	Acquire(ctx context.Context, name string) (Lease, error)

	// TryAcquire is Acquire without waiting: if another lease holds name it
	// returns an error wrapping [ErrLocked] at once and leaves no record.
	TryAcquire(ctx context.Context, name string) (Lease, error)

	// Holder reports the current holder of name, or an error wrapping
	// [ErrNotHeld] when the lock is free.
	Holder(ctx context.Context, name string) (Holder, error)

	// Close ends the Locker's session and every lease granted through it,
	// interrupts waiting Acquire calls with [ErrClosed], and waits for the
	// Locker's goroutines. Later calls return nil.
	Close() error
}

// Lease is one grant of a lock. Its methods are safe for concurrent use.
//
// A lease ends exactly once: by Release, by Close of its Locker, or by loss.
// Done is closed then and Err tells which.
type Lease interface {
	// Name returns the lock's name.
	Name() string

	// Token returns the lease's fencing token: strictly greater than the
	// token of every earlier grant of this name, and never zero.
	Token() fencing.Token

	// Done returns a channel closed when the lease ends.
	Done() <-chan struct{}

	// Err returns nil while the lease is held; afterwards an error wrapping
	// [ErrReleased] or [ErrLost], with the cause of a loss.
	Err() error

	// Release ends the lease and deletes its record. Releasing an ended
	// lease returns an error wrapping [ErrReleased] (released before) or
	// [ErrLost] (lost; what could be cleaned up has been). Release never
	// deletes a record of a later grant.
	Release(ctx context.Context) error
}

// Holder describes a lease that holds a lock. Holders of exclusive grants
// compare equal to Holder{Identity: id, Token: tok}: the fields added for
// shared grants and semaphores are zero for them.
type Holder struct {
	Identity string        // the holding Locker's identity
	Token    fencing.Token // the holding lease's fencing token
	Shared   bool          // a shared grant ([SharedLocker]) or a semaphore permit ([Semaphore])
	Limit    int           // the semaphore's limit for a permit, else 0
}

// Observer is implemented by Lockers that can follow a lock's holder as it
// changes, backed by a watch rather than by polling.
type Observer interface {
	// Observe sends the current holder of name, then every change of
	// holder, in order, until ctx is done or the Locker is closed; a zero
	// Holder (Token 0) means the lock is free, and the same holder is never
	// sent twice in a row. Lost connections, new sessions and watches the
	// server ends do not end the observation. The channel is closed at the
	// end; the error function then tells why (ctx's error or [ErrClosed]).
	// A holder whose whole term falls in a gap of the backend's watch may
	// be missed (see the backend's Observe); the state the lock ends up in
	// is always reported.
	Observe(ctx context.Context, name string) (<-chan Holder, func() error, error)
}
