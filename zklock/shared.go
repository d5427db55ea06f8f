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
	_ lock.MultiLocker  = (*Locker)(nil)
)

// AcquireShared implements [lock.SharedLocker]: it blocks until it holds
// a shared (read) grant of name, and returns a *Lease.
func (l *Locker) AcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire shared", name, queue.SharedRequest, false)
}

// TryAcquireShared is AcquireShared without waiting.
func (l *Locker) TryAcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire shared", name, queue.SharedRequest, true)
}

// AcquireSemaphore implements [lock.Semaphore]: it blocks until it holds
// one of the limit permits of name, and returns a *Lease.
func (l *Locker) AcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "acquire semaphore", name, queue.PermitRequest(limit), false)
}

// TryAcquireSemaphore is AcquireSemaphore without waiting.
func (l *Locker) TryAcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire semaphore", name, queue.PermitRequest(limit), true)
}

// Holders implements [lock.HolderLister] after a sync.
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
