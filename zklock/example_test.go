package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/zklock"
)

// A guarded write: the multi applies only while the lease's znode exists,
// so a holder whose session expired cannot overwrite the data, however
// late its write arrives. (It needs a ZooKeeper ensemble, so it has no
// Output and is compiled but not run.)
func ExampleLease_CheckOp() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	servers := []string{"127.0.0.1:2181"}
	l, err := zklock.Dial(ctx, servers, zklock.WithRoot("/myapp/locks"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	lease, err := l.Acquire(ctx, "config")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.Background())

	conn, _, err := zk.Connect(servers, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	_, err = conn.Multi(
		lease.(*zklock.Lease).CheckOp(), // first: the lease still holds
		&zk.SetDataRequest{Path: "/myapp/config", Data: []byte("v2"), Version: -1},
	)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		fmt.Println("lease lost: nothing written")
	case err != nil:
		fmt.Println(err)
	}
}

// Moving from Curator one service at a time: a Java service locks
// "/myapp/locks/orders" with new InterProcessMutex(client,
// "/myapp/locks/orders"). A Go service given layout curator
// ("zk://...?layout=curator" with lock.Open) writes the same records in
// the same znode, so the two exclude each other, in arrival order, and
// zk.Lock or Kazoo (extra_lock_patterns=["-lock-"]) clients too. Once the
// last Curator client is gone, drop the layout Locker by Locker: every
// layout reads the others' records. (It needs a ZooKeeper ensemble, so
// it has no Output and is compiled but not run.)
func Example_fromCurator() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := zklock.Dial(ctx, []string{"127.0.0.1:2181"},
		zklock.WithRoot("/myapp/locks"), zklock.WithLayout(zklock.LayoutCurator))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	// Waits while a Curator client holds /myapp/locks/orders.
	lease, err := l.Acquire(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.Background())
	// The token rises across both kinds of holder: it is the czxid of the
	// grant's znode, whoever created it (Holder reports a Curator
	// holder's), so a resource that checks tokens can fence both.
	fmt.Println("holding orders with token", lease.Token())
}
