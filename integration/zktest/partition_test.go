package zktest

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// The partition ensemble has the shape of a common production one
// (tickTime 2s, syncLimit 5, so that a member notices the loss of its
// peers 10s after it), five times faster: tickTime 400ms, syncLimit 5
// ticks (2s). The session timeout, four ticks, is shorter than that, as
// it is in production (4s against 10s).
const (
	partitionTick    = 400 * time.Millisecond
	partitionTimeout = 4 * partitionTick
)

// TestZKPartition runs the partition cases of testutil.RunPartition on a
// ZooKeeper ensemble: a holder whose server is cut off from its peers
// (follower or leader, both ways or only what it sends) while it still
// reaches the holder. For the first pair of each cut it also logs the servers' side: the holder's last
// answered request, the leader's expiry of its session and the cut
// member's loss of its peers, against the cut.
func TestZKPartition(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper, cluster.WithTickTime(partitionTick), cluster.WithPeerCuts())
	root, sess := uniqueRoot(t), newSessions()
	var mu sync.Mutex
	wires := map[lock.Locker]*wireLog{}
	testutil.RunPartition(t, testutil.PartitionBackend{
		Cluster: c,
		Open: func(t *testing.T, servers []string) lock.Locker {
			wire := newWireLog()
			l := (&harness{servers: servers, root: root, sess: sess}).dial(t,
				zklock.WithSessionTimeout(partitionTimeout), zklock.WithDialer(wire.dialer()))
			if got := l.SessionTimeout(); got != partitionTimeout {
				t.Fatalf("negotiated session timeout %v; want %v", got, partitionTimeout)
			}
			mu.Lock()
			wires[l] = wire
			mu.Unlock()
			return l
		},
		Period: partitionTimeout / 12, // the keepalive interval: a twelfth of the session timeout
		Evidence: func(l lock.Locker, le lock.Lease, cutAt time.Time, member cluster.Member) string {
			mu.Lock()
			wire := wires[l]
			mu.Unlock()
			lastAck := wire.lastAcked()
			expiry, expiredAt, _, ok := expiryEvidence(c, sessionID(le), lastAck, partitionTimeout)
			if ok {
				expiry = fmt.Sprintf("%+dms: %s", expiredAt.Sub(cutAt).Milliseconds(), expiry)
			}
			return fmt.Sprintf("last answered request sent %+dms after the cut; leader's expiry %s; %s noticed the cut %s",
				lastAck.Sub(cutAt).Milliseconds(), expiry, member.Name(), peersLost(member.Logs(), cutAt))
		},
	})
}

// peersLostLine matches what a server logs when it stops following or
// leading for want of its peers.
var peersLostLine = regexp.MustCompile(`(\d\d:\d\d:\d\d\.\d\d\d) .*(Exception when following the leader|Not sufficient followers synced|shutdown Leader! reason|Peer state changed: looking)`)

// peersLost finds the first such line after cutAt, as its offset from
// the cut and its text.
func peersLost(logs string, cutAt time.Time) string {
	for _, sm := range peersLostLine.FindAllStringSubmatch(logs, -1) {
		clock, err := time.ParseInLocation("15:04:05.000", sm[1], time.Local)
		if err != nil {
			continue
		}
		y, mo, d := cutAt.Date()
		at := time.Date(y, mo, d, clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), time.Local)
		if at.Before(cutAt.Truncate(time.Millisecond)) {
			continue
		}
		return fmt.Sprintf("at %+dms (%q)", at.Sub(cutAt).Milliseconds(), sm[2])
	}
	return "(no such line found)"
}
