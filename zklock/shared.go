package zklock

import (
	"context"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var (
	_ lock.SharedLocker = (*Locker)(nil)
	_ lock.Semaphore    = (*Locker)(nil)
	_ lock.HolderLister = (*Locker)(nil)
)

// AcquireShared blocks until it holds a shared (read) grant of name (see
// [lock.SharedLocker]; [Locker.Acquire] is the write side). It returns a
// *Lease. Errors wrap what Acquire's do, or [lock.ErrIncompatible] when
// name is in use as a semaphore.
func (l *Locker) AcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire shared", name, queue.SharedRequest, false)
}

// TryAcquireShared is AcquireShared without waiting: it returns an error
// wrapping [lock.ErrLocked] at once when it would wait.
func (l *Locker) TryAcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire shared", name, queue.SharedRequest, true)
}

// AcquireSemaphore blocks until it holds one of the limit permits of name
// (see [lock.Semaphore]). It returns a *Lease. Errors wrap what Acquire's
// do, [lock.ErrIncompatible] when name is in use as a lock or with another
// limit, or [lock.ErrInvalidConfig] when limit is below 1.
func (l *Locker) AcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "acquire semaphore", name, queue.PermitRequest(limit), false)
}

// TryAcquireSemaphore is AcquireSemaphore without waiting: it returns an
// error wrapping [lock.ErrLocked] at once when it would wait.
func (l *Locker) TryAcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire semaphore", name, queue.PermitRequest(limit), true)
}

// Holders returns every current holder of name in grant order, or an
// empty list, after a sync (see [lock.HolderLister]).
func (l *Locker) Holders(ctx context.Context, name string) ([]lock.Holder, error) {
	zs, err := l.read(ctx, "holders", name, queue.Admitted)
	if err != nil {
		return nil, err
	}
	hs := make([]lock.Holder, len(zs))
	for i, z := range zs {
		hs[i] = z.holder()
	}
	return hs, nil
}
