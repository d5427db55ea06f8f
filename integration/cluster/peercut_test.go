package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPeerCut cuts a ZooKeeper follower off from its peers: its client
// port must go on answering while it reports that it serves no requests
// (it lost its leader), the other two must go on serving writes, the cut
// must have dropped packets, and after Heal the follower must rejoin.
func TestPeerCut(t *testing.T) {
	c := FromEnv(t).Start(t, ZooKeeper, WithPeerCuts())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	f := (leader + 1) % len(c.Members)
	var others []string
	for i, m := range c.Members {
		if i != f {
			others = append(others, m.ClientAddr())
		}
	}
	cut, err := c.CutPeers(f, CutBoth)
	if err != nil {
		t.Fatalf("CutPeers(%d) = %v", f, err)
	}
	defer cut.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := FourLetterWord(ctx, c.Members[f].ClientAddr(), "srvr")
		if err != nil {
			t.Fatalf("srvr on the cut member = %v; want an answer: its clients must still reach it", err)
		}
		if strings.Contains(out, "not currently serving requests") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cut member still serves requests 30s after the cut: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	kv := dialKV(t, ZooKeeper, others)
	if err := kv.put(ctx, "/peercut", "x"); err != nil {
		t.Errorf("write through the other members during the cut = %v", err)
	}
	if n, err := cut.Dropped(); err != nil || n == 0 {
		t.Errorf("Dropped() = %d, %v; want packets dropped", n, err)
	}
	if err := cut.Heal(); err != nil {
		t.Fatalf("Heal() = %v", err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() after Heal = %v", err)
	}
	if _, err := (&Cluster{}).CutPeers(0, CutBoth); err == nil {
		t.Errorf("CutPeers on a cluster started without WithPeerCuts = nil; want an error")
	}
}
