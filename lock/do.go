package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/nilcheck"
)

// DefaultDoReleaseTimeout bounds the release at the end of [Do] and [TryDo].
const DefaultDoReleaseTimeout = 10 * time.Second

// Do acquires the lock called name through l, waiting as [Locker.Acquire]
// does, runs fn while holding it, and releases it.
//
// fn's context is cancelled the moment the lease ends — lost, or its Locker
// closed — or when ctx ends; context.Cause then says which. fn must return
// promptly once its context is done. The lease is released after fn has
// returned, on a fresh context bounded by [DefaultDoReleaseTimeout], so
// that a cancelled ctx still hands the lock over at once.
//
// Do returns the error of the acquisition, or else fn's error joined with
// the lease's error if the lease ended while fn ran (wrapping [ErrLost] for
// a loss) or with the release's error. A lost lease does not stop code that
// is already running; fn should send [Lease.Token] with its writes and have
// the resource enforce it (package fencing).
//
// A nil ctx, Locker or fn is an error wrapping [ErrInvalidConfig].
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	if err := checkDo(ctx, l, fn); err != nil {
		return fmt.Errorf("lock: do %q: %w", name, err)
	}
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	return hold(ctx, lease, fn)
}

// TryDo is [Do] without waiting: if another lease holds the lock it returns
// an error wrapping [ErrLocked] at once, without calling fn.
func TryDo(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	if err := checkDo(ctx, l, fn); err != nil {
		return fmt.Errorf("lock: try do %q: %w", name, err)
	}
	lease, err := l.TryAcquire(ctx, name)
	if err != nil {
		return err
	}
	return hold(ctx, lease, fn)
}

func checkDo(ctx context.Context, l Locker, fn func(context.Context, Lease) error) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	case nilcheck.IsNil(l):
		return fmt.Errorf("%w: nil Locker", ErrInvalidConfig)
	case fn == nil:
		return fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	return nil
}

// hold runs fn under lease and releases it, even if fn panics.
func hold(ctx context.Context, lease Lease, fn func(context.Context, Lease) error) (err error) {
	lctx, stop := LeaseContext(ctx, lease)
	defer func() {
		stop()
		err = finish(ctx, lease, err)
	}()
	return fn(lctx, lease)
}

// finish releases lease after fn returned ferr and returns Do's error.
func finish(ctx context.Context, lease Lease, ferr error) error {
	var ended error
	select {
	case <-lease.Done():
		ended = lease.Err()
	default:
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultDoReleaseTimeout)
	defer cancel()
	rerr := lease.Release(rctx)
	switch {
	case ended != nil:
		// The lease's error says which lease ended and why, with its
		// backend's prefix; another prefix would only stutter.
		return errors.Join(ferr, ended)
	case rerr != nil:
		return errors.Join(ferr, rerr)
	}
	return ferr
}

// LeaseContext returns a context derived from parent that is cancelled when
// lease ends, with lease.Err() as its cause, or when parent is done. Call
// stop once the context is no longer needed: it cancels the context and
// waits for the goroutine that watches the lease. Stopping does not release
// the lease.
//
// A nil parent or lease is a programming error that LeaseContext reports
// without a panic and without starting a goroutine: the context it returns
// is already cancelled, with a cause wrapping [ErrInvalidConfig] (see
// context.Cause), so that code running under it stops at once.
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
