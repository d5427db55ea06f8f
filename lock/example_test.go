package lock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// A lease is held until it is released; its token goes with every write to
// the resource the lock protects.
func Example() {
	ctx := context.Background()
	mem := locktest.NewMemory() // stands in for an etcd cluster or a ZooKeeper ensemble
	var locker lock.Locker = mem.NewLocker("worker-1")
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "jobs/nightly")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("holding", lease.Name(), "with token", lease.Token())
	// ... write to the resource, sending lease.Token() along ...
	if err := lease.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	fmt.Println("released:", errors.Is(lease.Err(), lock.ErrReleased))

	// The next grant carries a higher token.
	lease, err = locker.Acquire(ctx, "jobs/nightly")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("holding again with token", lease.Token())
	_ = lease.Release(ctx)
	// Output:
	// holding jobs/nightly with token 1
	// released: true
	// holding again with token 2
}

func ExampleLocker_tryAcquire() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	a, b := mem.NewLocker("a"), mem.NewLocker("b")
	defer a.Close()
	defer b.Close()

	lease, err := a.Acquire(ctx, "reports")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	defer lease.Release(ctx)

	// TryAcquire does not wait: someone else holds the lock.
	_, err = b.TryAcquire(ctx, "reports")
	switch {
	case errors.Is(err, lock.ErrLocked):
		fmt.Println("busy, try later")
	case err != nil:
		fmt.Println("try acquire:", err)
	default:
		fmt.Println("acquired")
	}
	// Output:
	// busy, try later
}

func ExampleLocker_holder() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	a, b := mem.NewLocker("scheduler-a"), mem.NewLocker("scheduler-b")
	defer a.Close()
	defer b.Close()

	if _, err := b.Holder(ctx, "cron"); errors.Is(err, lock.ErrNotHeld) {
		fmt.Println("nobody holds cron")
	}
	lease, err := a.Acquire(ctx, "cron")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	h, err := b.Holder(ctx, "cron")
	if err != nil {
		fmt.Println("holder:", err)
		return
	}
	fmt.Printf("cron is held by %s with token %d\n", h.Identity, h.Token)
	_ = lease.Release(ctx)
	// Output:
	// nobody holds cron
	// cron is held by scheduler-a with token 1
}

func ExampleValidateName() {
	for _, name := range []string{"tenant:42/rows", "a//b", "../etc"} {
		if err := lock.ValidateName(name); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%q is valid\n", name)
	}
	// Output:
	// "tenant:42/rows" is valid
	// invalid name: "a//b": empty segment at offset 2
	// invalid name: "../etc": segment ".." at offset 0
}

// Readers share a lock and a writer excludes them. The shared side is an
// optional interface, found by a type assertion on the Locker.
func ExampleSharedLocker() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	var reader, writer lock.Locker = mem.NewLocker("reader"), mem.NewLocker("writer")
	defer reader.Close()
	defer writer.Close()

	rw, ok := reader.(lock.SharedLocker)
	if !ok {
		fmt.Println("this backend has no read-write locks")
		return
	}
	r1, err := rw.AcquireShared(ctx, "cache/config")
	if err != nil {
		fmt.Println("acquire shared:", err)
		return
	}
	r2, err := rw.TryAcquireShared(ctx, "cache/config")
	fmt.Println("second reader admitted:", err == nil)

	// A writer waits for the readers; TryAcquire says so at once.
	_, err = writer.TryAcquire(ctx, "cache/config")
	fmt.Println("writer refused:", errors.Is(err, lock.ErrLocked))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := writer.Acquire(ctx, "cache/config")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("writer token above the readers':", w.Token() > r1.Token() && w.Token() > r2.Token())
	_ = w.Release(ctx)
	// Output:
	// second reader admitted: true
	// writer refused: true
	// writer token above the readers': true
}

// A semaphore admits at most limit holders of a name at once: here, at
// most two exports run together, wherever they run.
func ExampleSemaphore() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	var locker lock.Locker = mem.NewLocker("exporter")
	defer locker.Close()

	sem, ok := locker.(lock.Semaphore)
	if !ok {
		fmt.Println("this backend has no semaphores")
		return
	}
	var leases []lock.Lease
	for i := range 3 {
		le, err := sem.TryAcquireSemaphore(ctx, "exports", 2)
		switch {
		case errors.Is(err, lock.ErrLocked):
			fmt.Println("export", i, "must wait")
			continue
		case err != nil:
			fmt.Println("acquire semaphore:", err)
			return
		}
		fmt.Println("export", i, "runs")
		leases = append(leases, le)
	}
	if hl, ok := locker.(lock.HolderLister); ok {
		hs, _ := hl.Holders(ctx, "exports")
		fmt.Println("holders:", len(hs), "of limit", hs[0].Limit)
	}
	// Every request of a name must give the same limit.
	_, err := sem.TryAcquireSemaphore(ctx, "exports", 5)
	fmt.Println("other limit refused:", errors.Is(err, lock.ErrIncompatible))
	for _, le := range leases {
		_ = le.Release(ctx)
	}
	// Output:
	// export 0 runs
	// export 1 runs
	// export 2 must wait
	// holders: 2 of limit 2
	// other limit refused: true
}
