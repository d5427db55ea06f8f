package lock

import "context"

// SharedLocker is implemented by Lockers that offer read-write locks: the
// shared (read) side is here, the exclusive (write) side is
// [Locker.Acquire] and [Locker.TryAcquire] on the same name. Like
// [Observer], [Semaphore] and [HolderLister], it is found by a type
// assertion on a Locker. The rules below are the contract of these three
// interfaces and of the exclusive side.
//
// # One queue per name
//
// Every request of a name, exclusive ([Locker.Acquire], [Locker.TryAcquire]),
// shared ([SharedLocker]) or semaphore ([Semaphore]), creates one record,
// and the records of a name form one queue in creation order. A request is
// granted when the requests ahead of it allow it, by the rule of its kind:
//
//   - exclusive (the write lock): when no earlier request of the name
//     remains, shared or exclusive;
//   - shared (a read lock): when no earlier exclusive request of the name
//     remains; earlier shared requests do not hold it back;
//   - semaphore with limit n: when fewer than n earlier requests of the
//     name remain.
//
// So grants are first come, first served, and nobody starves: a writer
// queued behind readers is not overtaken by readers that arrive after it,
// the readers queued behind a writer are all admitted together when it
// ends, and a semaphore admits at most n leases at once, in arrival order.
// A request leaves the queue when its lease ends (Release, Close, loss)
// or its wait ends (ctx, Close, loss of the session), and no record is
// left behind.
//
// A name is either a lock or a semaphore, and a semaphore has one limit.
// A request is compared with the requests queued ahead of it: a semaphore
// request whose limit differs from theirs, a semaphore request behind lock
// requests, and a lock request (shared or exclusive) behind semaphore
// requests fail with an error wrapping [ErrIncompatible] and leave no
// record. The earliest request of a queue therefore decides what the name
// is until the queue is empty again; a disagreeing request is refused,
// never admitted beyond the limit it disagrees with. A limit below 1 is an
// error wrapping [ErrInvalidConfig].
//
// A backend may create a request's record before it can compare it with
// the queue, so a refused request's record can exist for a moment. A
// request that arrives then, while that record is the oldest of the name,
// is compared with it and may be refused too; and until it is gone,
// nobody is admitted together with an earlier request it disagrees with
// (a request waits for those as it waits for an earlier exclusive one),
// so the exclusions and limits hold in every queue.
//
// # Leases and tokens
//
// Every grant is a [Lease] with the guarantees of an exclusive one: Done
// and Err report its end, Release deletes only its own record, and a loss
// is reported before the backend can admit anyone else in its place. Its
// token is fixed when its record is created, so tokens rise in request
// order. A writer's token exceeds the token of every reader admitted before
// it, and a reader's token exceeds that of every writer that held the lock
// before it; the tokens of readers holding at the same time, and of
// semaphore permits, order their requests but do not exclude one another.
// A resource shared by concurrent holders is protected by each holder's
// lease still existing (the backends' guarded writes check the lease's own
// record), not by comparing their tokens.
//
// # Herd-free waits
//
// Backends wake only the waiters a change may admit: each waiter watches
// the records named below, and nothing else, and re-examines the queue
// when one of them goes (or, where said, is touched), picking its records
// to watch afresh by the same rule if it is still not admitted.
//
//   - An exclusive waiter watches its immediate predecessor.
//   - A shared waiter watches the nearest earlier exclusive request.
//   - The first waiter of a semaphore with limit n (the request right
//     behind the n holders) watches the n holders: permits are released
//     in any order, and the release of any of them admits it.
//   - Every later semaphore waiter watches its immediate predecessor, for
//     its deletion or its touch.
//
// A permit that is admitted after it may have been seen waiting, and that
// has a permit queued behind it, touches its own record before its grant:
// it rewrites the record unchanged (on etcd a Put of the same value with
// the same lease, on ZooKeeper a SetData of the same bytes), so its token
// (the create revision, the czxid) stays and the waiter behind it wakes
// and becomes the first waiter. A waiter sets its watch so that a touch
// made after the listing it decided on is not missed. The cancellation of
// a semaphore waiter (its record deleted) wakes the one behind it, which
// re-examines the queue. A backend may touch on a guess, to shorten the
// chain of wake-ups when several permits come free at once: zklock's
// waiter woken by a touch touches together with its next listing, and
// when it turns out to be the first waiter rather than admitted, the
// waiter behind it wakes once for nothing and touches again when
// admitted.
//
// So each holder of a semaphore is watched by one waiter, and each
// waiter by at most one: a release wakes only the waiter it admits, whose
// touch wakes one more. A deletion therefore wakes at most one waiter of
// a lock, or the readers right behind a writer, or, of a semaphore, the
// waiter it admits and through the touch its successor, or the successor
// of a deleted waiter; the count does not grow with the length of the
// queue or with the limit. A request leaving from further ahead than the
// records a waiter watches shifts the waiter and those records together,
// so what it watches stays right.
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
