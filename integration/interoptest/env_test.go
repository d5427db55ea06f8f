package interoptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// grants is what every mixed fleet must reach (issue 33).
const grants = 500

// hold is how long a fleet's holder keeps the lock: long enough that a
// grant that does not wait for it overlaps it.
const hold = time.Millisecond

// env is one ensemble shared by a test's subtests, and a plain connection
// to look at it behind the clients' backs.
type env struct {
	c       *cluster.Cluster
	admin   *zk.Conn
	barrier func(t testing.TB) // makes admin's reads see every answered write
	root    string             // the lock root of this test: fencelock's WithRoot
}

// newEnv starts a 3-server ensemble for t.
func newEnv(t *testing.T) *env {
	t.Helper()
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	admin := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
	return &env{
		c:       c,
		admin:   admin,
		barrier: testutil.ZKReadBarrier(t, admin),
		root:    "/interop-" + hex.EncodeToString(b),
	}
}

// dir returns a fresh lock name and its directory, the znode every
// recipe's clients share.
func (e *env) dir(t *testing.T) (name, path string) {
	t.Helper()
	name = testutil.UniqueName(t)
	return name, e.root + "/" + name
}

// children lists path's children, sorted; none when path does not exist.
func (e *env) children(t *testing.T, path string) []string {
	t.Helper()
	e.barrier(t)
	kids, _, err := e.admin.Children(path)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("Children(%s) = %v", path, err)
	}
	slices.Sort(kids)
	return kids
}

// closeAll closes every foreign client and checks each exited cleanly,
// then that path was left with no child: every record of the fleet is
// gone once everyone closed.
func (e *env) closeAll(t *testing.T, path string, cs ...*foreign.Client) {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	for _, c := range cs {
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close(%s) = %v", c.Name(), err)
		}
	}
	e.checkEmpty(t, path)
}

// checkEmpty waits until path has no child (a LeaderLatch deletes its
// znode in the background after close), and fails t with what is left
// otherwise.
func (e *env) checkEmpty(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids := e.children(t, path)
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s still has children after every client closed: %s", path, strings.Join(kids, " "))
			return
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// fleetOf returns clients as fleet contenders, and every further group
// after them.
func fleetOf[C fleet.Contender](cs []C, more ...[]fleet.Contender) []fleet.Contender {
	var out []fleet.Contender
	for _, c := range cs {
		out = append(out, c)
	}
	return slices.Concat(append([][]fleet.Contender{out}, more...)...)
}

// run runs a fleet of cs for the given grants and returns what it saw.
func run(t *testing.T, cs []fleet.Contender, n int) fleet.Result {
	t.Helper()
	return fleet.Run(t, cs, fleet.Config{Grants: n, Hold: hold, Timeout: 90 * time.Second})
}

// ctxOf returns a context for a test's steps.
func ctxOf(t *testing.T) context.Context { return testutil.Context(t, 2*time.Minute) }
