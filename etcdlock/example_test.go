package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/lock"
)

// A write to etcd that lands only while the lease still holds the lock: the
// comparison from IsHeld fails as soon as the lease's record is gone, which
// happens before anyone else can be granted the lock.
func ExampleLease_IsHeld() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	lease := l.(*etcdlock.Lease)

	resp, err := client.Txn(ctx).
		If(lease.IsHeld()).
		Then(clientv3.OpPut("myapp/reports/nightly/state", "running", clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	if !resp.Succeeded {
		fmt.Println("lock lost before the write; nothing was written")
		return
	}
	fmt.Printf("written under token %d (key %s)\n", lease.Token(), lease.Key())
}

// Opening a Locker by URL: the Locker owns the client it creates.
func Example_open() {
	locker, err := lock.Open(context.Background(), "etcd://127.0.0.1:2379,127.0.0.1:22379/myapp/locks?ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.TryAcquire(ctx, "jobs/cleanup")
	if errors.Is(err, lock.ErrLocked) {
		fmt.Println("someone else is cleaning up")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	select {
	case <-l.Done():
		fmt.Println("lost the lock:", l.Err())
	default:
		fmt.Println("cleaning up with token", l.Token())
	}
}

// Moving from concurrency.Mutex, one service at a time. A service that
// locks with
//
//	m := concurrency.NewMutex(session, "/myapp/locks/jobs/nightly")
//
// keeps running while its successor takes the same lock through a Locker
// laid out like Mutex ("etcd://…//myapp/locks?layout=concurrency" with
// lock.Open): the prefix is Mutex's pfx without the lock name. The two
// exclude each other, and every grant, the Mutex's too, has a fencing
// token: its key's create revision. Once no Mutex client is left, stop
// every Locker of the name at once, or move to a new name, before
// dropping WithLayout: the default layout does not see these records.
// integration/etcdtest (TestInteropExample) runs these calls against a
// cluster.
func Example_fromConcurrencyMutex() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	// The service not yet moved holds the lock.
	session, err := concurrency.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	old := concurrency.NewMutex(session, "/myapp/locks/jobs/nightly")
	if err := old.Lock(ctx); err != nil {
		log.Fatal(err)
	}

	// The moved one sees it, and waits for it.
	locker, err := etcdlock.New(client, etcdlock.WithPrefix("/myapp/locks"), etcdlock.WithLayout(etcdlock.LayoutConcurrency))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	h, err := locker.Holder(ctx, "jobs/nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held by a Mutex (identity %q)\n", h.Identity)
	if _, err := locker.TryAcquire(ctx, "jobs/nightly"); errors.Is(err, lock.ErrLocked) {
		fmt.Println("TryAcquire: locked")
	}
	if err := old.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	l, err := locker.Acquire(ctx, "jobs/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("acquired after the Mutex, with a greater token:", l.Token() > h.Token)
	// With a cluster at 127.0.0.1:2379, it prints:
	//
	//	held by a Mutex (identity "")
	//	TryAcquire: locked
	//	acquired after the Mutex, with a greater token: true
}
