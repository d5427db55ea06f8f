package locktest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

func TestMemoryRefusals(t *testing.T) {
	ctx := context.Background()
	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })

	sem, err := a.TryAcquireSemaphore(ctx, "refuse/sem", 2)
	if err != nil {
		t.Fatalf("TryAcquireSemaphore() = %v; want a lease", err)
	}
	rw, err := a.AcquireShared(ctx, "refuse/rw")
	if err != nil {
		t.Fatalf("AcquireShared() = %v; want a lease", err)
	}
	tests := []struct {
		name string
		call func() (lock.Lease, error)
		want error
	}{
		{"limit mismatch", func() (lock.Lease, error) { return b.AcquireSemaphore(ctx, "refuse/sem", 3) }, lock.ErrIncompatible},
		{"lock on a semaphore", func() (lock.Lease, error) { return b.Acquire(ctx, "refuse/sem") }, lock.ErrIncompatible},
		{"shared on a semaphore", func() (lock.Lease, error) { return b.TryAcquireShared(ctx, "refuse/sem") }, lock.ErrIncompatible},
		{"semaphore on a lock", func() (lock.Lease, error) { return b.TryAcquireSemaphore(ctx, "refuse/rw", 2) }, lock.ErrIncompatible},
		{"zero limit", func() (lock.Lease, error) { return b.AcquireSemaphore(ctx, "refuse/zero", 0) }, lock.ErrInvalidConfig},
		{"negative limit", func() (lock.Lease, error) { return b.TryAcquireSemaphore(ctx, "refuse/neg", -3) }, lock.ErrInvalidConfig},
		{"invalid name", func() (lock.Lease, error) { return b.AcquireShared(ctx, "a//b") }, lock.ErrInvalidName},
		{"writer behind a reader", func() (lock.Lease, error) { return b.TryAcquire(ctx, "refuse/rw") }, lock.ErrLocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le, err := tt.call()
			if !errors.Is(err, tt.want) || le != nil {
				t.Errorf("call = %v, %v; want nil, an error wrapping %v", le, err, tt.want)
			}
		})
	}
	for name, n := range map[string]int{"refuse/sem": 1, "refuse/rw": 1, "refuse/zero": 0, "refuse/neg": 0} {
		if got := m.Records(name); len(got) != n {
			t.Errorf("Records(%q) after refusals = %q; want %d records", name, got, n)
		}
	}
	if err := sem.Release(ctx); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
	if err := rw.Release(ctx); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
	// An empty queue forgets what the name was.
	if le, err := b.TryAcquireSemaphore(ctx, "refuse/rw", 5); err != nil {
		t.Errorf("TryAcquireSemaphore() of a name no longer in use as a lock = %v; want a lease", err)
	} else {
		_ = le.Release(ctx)
	}
}

func TestMemoryHolderOfShared(t *testing.T) {
	ctx := context.Background()
	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })

	r1, err := a.AcquireShared(ctx, "holder/rw")
	if err != nil {
		t.Fatalf("AcquireShared() = %v; want a lease", err)
	}
	r2, err := b.TryAcquireShared(ctx, "holder/rw")
	if err != nil {
		t.Fatalf("TryAcquireShared() = %v; want a lease", err)
	}
	want := lock.Holder{Identity: "a", Token: r1.Token(), Shared: true}
	if h, err := b.Holder(ctx, "holder/rw"); err != nil || h != want {
		t.Errorf("Holder() = %+v, %v; want %+v (the earliest reader)", h, err, want)
	}
	_ = r1.Release(ctx)
	want = lock.Holder{Identity: "b", Token: r2.Token(), Shared: true}
	if h, err := a.Holder(ctx, "holder/rw"); err != nil || h != want {
		t.Errorf("Holder() after the first reader released = %+v, %v; want %+v", h, err, want)
	}
	_ = r2.Release(ctx)
	if hs, err := a.Holders(ctx, "holder/rw"); err != nil || hs == nil || len(hs) != 0 {
		t.Errorf("Holders() of a free lock = %#v, %v; want an empty, non-nil list", hs, err)
	}
	_ = a.Close()
	if _, err := a.Holders(ctx, "holder/rw"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Holders() on a closed Locker = %v; want an error wrapping %v", err, lock.ErrClosed)
	}
}
