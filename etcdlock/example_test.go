package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

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
