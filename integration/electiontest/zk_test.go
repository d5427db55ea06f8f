package electiontest

import (
	"errors"
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
	barrier := testutil.ZKReadBarrier(t, conn)
	return func(name string) int {
		t.Helper()
		barrier(t)
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
