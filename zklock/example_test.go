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
