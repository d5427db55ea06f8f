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
