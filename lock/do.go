package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/nilcheck"
)

// DefaultDoReleaseTimeout bounds the release at the end of [Do] and [TryDo].
const DefaultDoReleaseTimeout = 10 * time.Second

// Do acquires the lock called name through l as [Locker.Acquire] does,
// runs fn while holding it, and releases it on a fresh context bounded by
// [DefaultDoReleaseTimeout], so that a cancelled ctx still hands the lock
// over. fn's context is cancelled when the lease ends or ctx ends
// (context.Cause says which); fn must then return promptly.
//
// Do returns the acquisition's error, or else fn's error joined with the
// lease's error if the lease ended while fn ran (wrapping [ErrLost] for a
// loss) or with the release's error. A nil ctx, Locker or fn is an error
// wrapping [ErrInvalidConfig].
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, l, "do", name, fn, Locker.Acquire)
}

// TryDo is [Do] without waiting: if another lease holds the lock it returns
// an error wrapping [ErrLocked] at once, without calling fn.
func TryDo(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, l, "try do", name, fn, Locker.TryAcquire)
}

// do is Do or TryDo by acquire; it releases the lease even if fn panics.
func do(ctx context.Context, l Locker, op, name string, fn func(context.Context, Lease) error,
	acquire func(Locker, context.Context, string) (Lease, error)) (err error) {
	switch {
	case ctx == nil:
		return fmt.Errorf("lock: %s %q: %w: nil context", op, name, ErrInvalidConfig)
	case nilcheck.IsNil(l):
		return fmt.Errorf("lock: %s %q: %w: nil Locker", op, name, ErrInvalidConfig)
	case fn == nil:
		return fmt.Errorf("lock: %s %q: %w: nil function", op, name, ErrInvalidConfig)
	}
	lease, err := acquire(l, ctx, name)
	if err != nil {
		return err
	}
	lctx, stop := LeaseContext(ctx, lease)
	defer func() {
		stop()
		// The lease's error has its backend's prefix: join it unwrapped.
		ended := endedErr(lease)
		rerr := release(ctx, lease, DefaultDoReleaseTimeout)
		if after := cmp.Or(ended, rerr); after != nil {
			err = errors.Join(err, after)
		}
	}()
	return fn(lctx, lease)
}

// endedErr returns lease's error if it has ended, else nil.
func endedErr(lease Lease) error {
	select {
	case <-lease.Done():
		return lease.Err()
	default:
		return nil
	}
}

// release releases lease on a fresh context bounded by timeout.
func release(ctx context.Context, lease Lease, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return lease.Release(rctx)
}

// LeaseContext returns a context derived from parent that is cancelled
// when lease ends, with lease.Err() as its cause, or when parent is done.
// stop cancels it and waits for its goroutine; it does not release the
// lease. A nil parent or lease gives a context already cancelled with a
// cause wrapping [ErrInvalidConfig], and no goroutine.
func LeaseContext(parent context.Context, lease Lease) (ctx context.Context, stop func()) {
	if parent == nil || nilcheck.IsNil(lease) {
		what := "nil lease"
		if parent == nil {
			what, parent = "nil parent context", context.Background()
		}
		ctx, cancel := context.WithCancelCause(parent)
		cancel(fmt.Errorf("lock: lease context: %w: %s", ErrInvalidConfig, what))
		return ctx, func() { cancel(context.Canceled) }
	}
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-lease.Done():
			cancel(lease.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(context.Canceled)
		<-done
	}
}
