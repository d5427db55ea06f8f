package etcdtest

import (
	"testing"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestEtcdPartition runs the partition cases of testutil.RunPartition on
// an etcd cluster: a holder whose member is cut off from its peers
// (follower or leader, both ways or only what it sends) while it still
// reaches the holder.
func TestEtcdPartition(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.Etcd, cluster.WithPeerCuts())
	prefix := "/" + testutil.UniqueName(t) + "/"
	testutil.RunPartition(t, testutil.PartitionBackend{
		Cluster: c,
		Open: func(t *testing.T, servers []string) lock.Locker {
			return newLocker(t, newClient(t, servers), etcdlock.WithPrefix(prefix))
		},
		Period: testTTL / 3, // etcdlock's keepalive interval
	})
}
