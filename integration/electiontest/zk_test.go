package electiontest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// zkRecords counts the znodes under a lock's parent znode, which holds one
// child per holder and per waiter.
func zkRecords(t *testing.T, eps []string) func(name string) int {
	t.Helper()
	conn := testutil.ZKConn(t, eps, 10*time.Second, nil)
	// A write of its own before each count orders the listing after every
	// write the servers had answered (a record's create or its session's
	// close), on whichever server this connection reaches; a plain read
	// may come from a server that has not applied them yet.
	barrier := fmt.Sprintf("/electiontest-barrier-%d", time.Now().UnixNano())
	if _, err := conn.Create(barrier, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create(%s) = %v", barrier, err)
	}
	t.Cleanup(func() { _ = conn.Delete(barrier, -1) })
	return func(name string) int {
		t.Helper()
		if _, err := conn.Set(barrier, nil, -1); err != nil {
			t.Fatalf("count records of %q: write barrier: %v", name, err)
		}
		children, _, err := conn.Children("/" + prefix + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			return 0
		}
		if err != nil {
			t.Fatalf("count records of %q: %v", name, err)
		}
		return len(children)
	}
}
