package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// acquireMany acquires n distinct locks named base-0 … base-(n-1) through l,
// a few at a time, and returns the leases in name order.
func acquireMany(t *testing.T, l lock.Locker, base string, n int) []lock.Lease {
	t.Helper()
	ctx := testutil.Context(t, 60*time.Second)
	leases := make([]lock.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			leases[i], errs[i] = l.Acquire(ctx, fmt.Sprintf("%s-%d", base, i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Acquire() = %v; want nil", err)
	}
	return leases
}

// deleteRecord deletes le's record through client, as someone else would.
func deleteRecord(t *testing.T, client *clientv3.Client, le lock.Lease) {
	t.Helper()
	key := le.(*etcdlock.Lease).Key()
	resp, err := client.Delete(testutil.Context(t, 10*time.Second), key)
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("Delete(%q) = %v, %d deleted; want nil, 1", key, err, resp.Deleted)
	}
}

// wantLost waits up to 2s for le to end with lock.ErrLost.
func wantLost(t *testing.T, le lock.Lease) {
	t.Helper()
	select {
	case <-le.Done():
	case <-time.After(2 * time.Second):
		t.Fatalf("lease %q still held 2s after its record was deleted", le.Name())
	}
	if err := le.Err(); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Err() = %v; want %v", err, lock.ErrLost)
	}
}

// wantHeld checks that every lease but skip is still held.
func wantHeld(t *testing.T, leases []lock.Lease, skip map[int]bool) {
	t.Helper()
	for i, le := range leases {
		if skip[i] {
			continue
		}
		if err := le.Err(); err != nil {
			t.Fatalf("lease %d: Err() = %v; want nil", i, err)
		}
	}
}

// releaseAll releases every lease but skip, wanting no error.
func releaseAll(t *testing.T, leases []lock.Lease, skip map[int]bool) {
	t.Helper()
	ctx := testutil.Context(t, 60*time.Second)
	for i, le := range leases {
		if skip[i] {
			continue
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("lease %d: Release() = %v; want nil", i, err)
		}
	}
}

// serverWatchers returns the number of watches the members of c serve,
// summed from their etcd_debugging_mvcc_watcher_total gauges.
func serverWatchers(t *testing.T, c *cluster.Cluster) int {
	t.Helper()
	total := 0
	for _, ep := range c.Endpoints() {
		req, err := http.NewRequestWithContext(testutil.Context(t, 5*time.Second), http.MethodGet, "http://"+ep+"/metrics", nil)
		if err != nil {
			t.Fatalf("NewRequest() = %v", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s/metrics = %v", ep, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("read %s/metrics = %v", ep, err)
		}
		found := false
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, "etcd_debugging_mvcc_watcher_total "); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("%s: etcd_debugging_mvcc_watcher_total %q: %v", ep, v, err)
				}
				total += int(n)
				found = true
			}
		}
		if !found {
			t.Fatalf("%s/metrics has no etcd_debugging_mvcc_watcher_total", ep)
		}
	}
	return total
}

// TestHeldLeasesGoroutines checks that held leases cost no goroutine each:
// their record watches share one stream per session, which still ends
// exactly the lease whose record someone else deletes, and is re-created
// after the stream fails.
func TestHeldLeasesGoroutines(t *testing.T) {
	c := startCluster(t)
	other := newClient(t, c.Endpoints())

	t.Run("1000 leases", func(t *testing.T) {
		l := newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithTTL(10*time.Second))
		base := testutil.UniqueName(t)
		first := acquireMany(t, l, base+"-a", 10)
		before := runtime.NumGoroutine()
		leases := append(first, acquireMany(t, l, base+"-b", 1000)...)
		// The last lease's watch is armed last: once its record's
		// deletion is seen, every other lease's watch is in place too.
		last := len(leases) - 1
		deleteRecord(t, other, leases[last])
		wantLost(t, leases[last])
		after := runtime.NumGoroutine()
		t.Logf("goroutines: %d with 10 held leases, %d with %d", before, after, len(leases))
		if after-before >= 50 {
			t.Errorf("NumGoroutine() grew from %d to %d with 1000 more held leases; want < 50 more", before, after)
		}
		wantHeld(t, leases, map[int]bool{last: true})
		// Exactly that lease: another one, in the middle.
		mid := len(leases) / 2
		deleteRecord(t, other, leases[mid])
		wantLost(t, leases[mid])
		skip := map[int]bool{last: true, mid: true}
		wantHeld(t, leases, skip)
		if n := serverWatchers(t, c); n < len(leases)-2 {
			t.Errorf("members serve %d watches with %d leases held; want at least one per lease (the test is void)", n, len(leases)-2)
		}
		releaseAll(t, leases, skip)
		// Released leases leave no watch behind on the server.
		testutil.Eventually(t, 10*time.Second, "server watches cancelled after the releases", func() bool {
			return serverWatchers(t, c) < 10
		})
	})

	t.Run("stream reset", func(t *testing.T) {
		proxies := cluster.NewProxies(t, c)
		l := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(5*time.Second))
		leases := acquireMany(t, l, testutil.UniqueName(t), 20)
		// The watches are in place: a deletion is seen.
		deleteRecord(t, other, leases[19])
		wantLost(t, leases[19])
		accepted := proxies.Stats().Accepted
		proxies.ResetConns()
		if st := proxies.Stats(); st.Resets == 0 {
			t.Fatalf("proxies reset no connection (%+v); the fault did not happen", st)
		}
		// The client reconnects (a keepalive or this read goes through a
		// new connection).
		testutil.Eventually(t, 10*time.Second, "reconnect through the proxies", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := l.Holder(ctx, leases[0].Name())
			return err == nil && proxies.Stats().Accepted > accepted
		})
		skip := map[int]bool{19: true}
		wantHeld(t, leases, skip)
		// The watch was created again on the new stream.
		deleteRecord(t, other, leases[3])
		wantLost(t, leases[3])
		skip[3] = true
		wantHeld(t, leases, skip)
		releaseAll(t, leases, skip)
	})

	t.Run("compacted while reconnecting", func(t *testing.T) {
		proxies := cluster.NewProxies(t, c)
		logs := &testutil.SyncBuffer{}
		l := newLocker(t, newClient(t, proxies.Endpoints()), etcdlock.WithTTL(5*time.Second),
			etcdlock.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		leases := acquireMany(t, l, testutil.UniqueName(t), 3)
		deleteRecord(t, other, leases[2])
		wantLost(t, leases[2])
		// Cut the Locker off, and compact past every grant meanwhile:
		// the watches created again after the reconnect start at a
		// compacted revision.
		proxies.Blackhole()
		proxies.ResetConns()
		ctx := testutil.Context(t, 10*time.Second)
		resp, err := other.Put(ctx, "compact-"+testutil.UniqueName(t), "x")
		if err != nil {
			t.Fatalf("Put() = %v", err)
		}
		if _, err := other.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatalf("Compact(%d) = %v", resp.Header.Revision, err)
		}
		proxies.Heal()
		if st := proxies.Stats(); st.Resets == 0 {
			t.Fatalf("proxies reset no connection (%+v); the fault did not happen", st)
		}
		key := leases[0].(*etcdlock.Lease).Key()
		testutil.Eventually(t, 10*time.Second, "record watch created again after the compaction", func() bool {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `record watch created again"`) && strings.Contains(line, " key="+key+" ") {
					return true
				}
			}
			return false
		})
		skip := map[int]bool{2: true}
		wantHeld(t, leases, skip)
		deleteRecord(t, other, leases[0])
		wantLost(t, leases[0])
		skip[0] = true
		wantHeld(t, leases, skip)
		releaseAll(t, leases, skip)
	})
}
