package lock

import "context"

// SharedLocker is implemented by Lockers that offer read-write locks: the
// shared (read) side is here, the exclusive (write) side is
// [Locker.Acquire] and [Locker.TryAcquire] on the same name. Like
// [Semaphore] and [HolderLister], it is found by a type assertion.
//
// Every request of a name, exclusive, shared or semaphore, creates one
// record, and the records of a name form one queue in creation order. A
// request is granted when the requests ahead of it allow it:
//
//   - exclusive: when no earlier request of the name remains;
//   - shared: when no earlier exclusive request remains;
//   - semaphore with limit n: when fewer than n earlier requests remain.
//
// So grants are first come, first served, nobody starves, and a release
// wakes only the waiters it may admit. A name is either a lock or a
// semaphore of one limit: a request that disagrees with the requests
// queued ahead of it fails with an error wrapping [ErrIncompatible] and
// leaves no record (while such a refused record is still on its way out,
// a request that arrives behind it may be refused too). Every grant is a
// [Lease] with the guarantees of an exclusive one. Tokens rise in request
// order: a writer's token exceeds every token admitted before it, but the
// tokens of holders holding at once (readers, permits) do not exclude one
// another, so protect what they share with the backends' guarded writes.
// The rules in full, and which records a waiter watches:
// docs/design/queue.md in the repository.
type SharedLocker interface {
	// AcquireShared blocks until it holds a shared grant of name: until no
	// exclusive request that arrived before it remains. It fails like
	// [Locker.Acquire], and with [ErrIncompatible] when name is in use as
	// a semaphore.
	AcquireShared(ctx context.Context, name string) (Lease, error)

	// TryAcquireShared is AcquireShared without waiting: if it would have
	// to wait (an exclusive request holds name or is queued for it), it
	// returns an error wrapping [ErrLocked] at once and leaves no record.
	TryAcquireShared(ctx context.Context, name string) (Lease, error)
}

// Semaphore is implemented by Lockers that offer counting semaphores: at
// most limit leases of a name at once, granted in arrival order. Every
// request of a name must give the same limit. The queue, token and
// herd-free rules are on [SharedLocker].
type Semaphore interface {
	// AcquireSemaphore blocks until it holds one of the limit permits of
	// name: until fewer than limit requests that arrived before it
	// remain. It fails like [Locker.Acquire], with [ErrIncompatible] when
	// the requests queued ahead of it disagree about the limit or name is
	// in use as a lock, and with [ErrInvalidConfig] when limit < 1.
	AcquireSemaphore(ctx context.Context, name string, limit int) (Lease, error)

	// TryAcquireSemaphore is AcquireSemaphore without waiting: if limit
	// or more requests of name exist, it returns an error wrapping
	// [ErrLocked] at once and leaves no record.
	TryAcquireSemaphore(ctx context.Context, name string, limit int) (Lease, error)
}

// HolderLister is implemented by Lockers that can list every holder of a
// name, for read-write locks and semaphores where [Locker.Holder] reports
// only the earliest one.
type HolderLister interface {
	// Holders returns every current holder of name in grant order, which
	// is token order: the shared grants or the semaphore permits, or the
	// one exclusive grant. Waiters are not listed. A name nobody holds
	// gives an empty list and a nil error.
	Holders(ctx context.Context, name string) ([]Holder, error)
}
