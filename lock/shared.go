package lock

import "context"

// SharedLocker is implemented by Lockers that offer read-write locks: the
// shared (read) side is here, the exclusive (write) side is
// [Locker.Acquire] on the same name.
//
// Every request of a name, exclusive, shared or semaphore, creates one
// record, and the records of a name form one queue in creation order. A
// request is granted when the requests ahead of it allow it:
//
//   - exclusive: when no earlier request of the name remains;
//   - shared: when no earlier exclusive request remains;
//   - semaphore with limit n: when fewer than n earlier requests remain.
//
// So nobody starves, and a release wakes only the waiters it may admit. A
// name is either a lock or a semaphore of one limit (see
// [ErrIncompatible]). Every grant is a [Lease] with the guarantees of an
// exclusive one; tokens rise in request order, but holders holding at
// once do not exclude one another by token (see package fencing). The
// rules in full: docs/design/queue.md.
type SharedLocker interface {
	// AcquireShared blocks until no exclusive request that arrived before
	// it remains. It fails like [Locker.Acquire], and with
	// [ErrIncompatible] when name is in use as a semaphore.
	AcquireShared(ctx context.Context, name string) (Lease, error)

	// TryAcquireShared is AcquireShared without waiting: it returns an
	// error wrapping [ErrLocked] instead, and leaves no record.
	TryAcquireShared(ctx context.Context, name string) (Lease, error)
}

// Semaphore is implemented by Lockers that offer counting semaphores: at
// most limit leases of a name at once, in arrival order, with the queue
// rules on [SharedLocker]. Every request of a name must give the same
// limit.
type Semaphore interface {
	// AcquireSemaphore blocks until fewer than limit requests that arrived
	// before it remain. It fails like [Locker.Acquire], with
	// [ErrIncompatible] when the requests ahead disagree about the limit
	// or name is a lock, and with [ErrInvalidConfig] when limit < 1.
	AcquireSemaphore(ctx context.Context, name string, limit int) (Lease, error)

	// TryAcquireSemaphore is AcquireSemaphore without waiting: it returns
	// an error wrapping [ErrLocked] instead, and leaves no record.
	TryAcquireSemaphore(ctx context.Context, name string, limit int) (Lease, error)
}

// HolderLister is implemented by Lockers that can list every holder of a
// name, where [Locker.Holder] reports only the earliest one.
type HolderLister interface {
	// Holders returns every current holder of name in grant (token) order;
	// waiters are not listed. A name nobody holds gives an empty list.
	Holders(ctx context.Context, name string) ([]Holder, error)
}
