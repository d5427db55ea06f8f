package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// TestContainersProvider checks what is particular to the containers
// provider: host networking, Kill keeping the container for Restart, and
// teardown removing every container. The behaviour shared with the process
// provider is covered by TestHarness.
func TestContainersProvider(t *testing.T) {
	// Leaving this test out is an explicit choice: another provider named
	// in FENCELOCK_PROVIDER. Under CI=true an unset variable is a failure,
	// so that no run passes without anyone having chosen.
	switch p := os.Getenv("FENCELOCK_PROVIDER"); {
	case p == "containers":
	case p == "" && InCI():
		t.Fatal("FENCELOCK_PROVIDER is unset under CI=true; set it to containers to run this test, or to process to leave it out")
	default:
		t.Skipf("not requested: FENCELOCK_PROVIDER=%s (this test checks the containers provider; run it with FENCELOCK_PROVIDER=containers)", p)
	}
	for _, tt := range []struct {
		kind    Kind
		members int
		logSays string
	}{
		{Etcd, 3, "ready to serve client requests"},
		{ZooKeeper, 3, "QuorumPeer"},
	} {
		t.Run(string(tt.kind), func(t *testing.T) {
			SkipUnlessRequested(t, tt.kind)
			var ids []string
			var sub *testing.T
			t.Run("lifecycle", func(t *testing.T) {
				sub = t
				c := ContainersProvider().Start(t, tt.kind, WithMembers(tt.members))
				if len(c.Members) != tt.members {
					t.Fatalf("len(Members) = %d; want %d", len(c.Members), tt.members)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				for _, m := range c.Members {
					cm, ok := m.(*ctrMember)
					if !ok {
						t.Fatalf("member %s is a %T; want *ctrMember", m.Name(), m)
					}
					ids = append(ids, cm.ctr.GetContainerID())
					if err := cm.checkHostNetwork(ctx); err != nil {
						t.Errorf("%s: %v", m.Name(), err)
					}
					if !strings.HasPrefix(m.ClientAddr(), "127.0.0.1:") {
						t.Errorf("%s.ClientAddr() = %q; want 127.0.0.1:port", m.Name(), m.ClientAddr())
					}
					if logs := m.Logs(); !strings.Contains(logs, tt.logSays) {
						t.Errorf("%s.Logs() does not contain %q; got:\n%s", m.Name(), tt.logSays, ctrTail(logs, 20))
					}
				}

				// Kill a follower: its container must stay, stopped, and
				// Restart must start that same container again.
				leader, err := c.Leader(ctx)
				if err != nil {
					t.Fatalf("Leader() = %v", err)
				}
				m := c.Members[(leader+1)%len(c.Members)].(*ctrMember)
				if err := m.Kill(); err != nil {
					t.Fatalf("Kill(%s) = %v; want nil", m.Name(), err)
				}
				st, err := m.state(ctx)
				if err != nil {
					t.Fatalf("state of %s after Kill = %v; want the container kept", m.Name(), err)
				}
				if st.Running || st.ExitCode != 137 {
					t.Errorf("%s after Kill: running=%t exit code=%d; want stopped by SIGKILL (137)", m.Name(), st.Running, st.ExitCode)
				}
				if m.Running() {
					t.Errorf("%s.Running() = true after Kill; want false", m.Name())
				}
				if err := m.Kill(); err != nil {
					t.Errorf("second Kill(%s) = %v; want nil", m.Name(), err)
				}
				if err := m.Restart(ctx); err != nil {
					t.Fatalf("Restart(%s) = %v; want nil", m.Name(), err)
				}
				if err := m.Restart(ctx); err == nil {
					t.Errorf("Restart(%s) of a running member = nil; want an error", m.Name())
				}
				if !m.Running() {
					t.Errorf("%s.Running() = false after Restart; want true", m.Name())
				}
				if err := c.WaitHealthy(ctx); err != nil {
					t.Fatalf("WaitHealthy() after Restart = %v; want nil", err)
				}

				// Leave one member paused: teardown must remove it too.
				if err := c.Members[leader].Stop(); err != nil {
					t.Fatalf("Stop(%s) = %v; want nil", c.Members[leader].Name(), err)
				}
			})
			if sub.Skipped() {
				t.Skip("no cluster was started")
			}
			if sub.Failed() {
				return
			}
			if len(ids) != tt.members {
				t.Fatalf("lifecycle recorded %d containers; want %d", len(ids), tt.members)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cli, err := ctrDockerClient(ctx)
			if err != nil {
				t.Fatalf("ctrDockerClient() = %v", err)
			}
			defer cli.Close()
			for _, id := range ids {
				_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
				if !cerrdefs.IsNotFound(err) {
					t.Errorf("ContainerInspect(%.12s) after teardown = %v; want not found", id, err)
				}
			}
		})
	}
}
