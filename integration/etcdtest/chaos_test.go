package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// TestChaosNoOverlap has three Lockers (two goroutines each) contend for
// one lock while members are killed, restarted, frozen and resumed. Whenever
// a lease is granted, every other lease still in use must already have
// ended (Done closed): a lease may be lost, but never while someone else
// can hold the lock. The lock must keep being granted throughout.
func TestChaosNoOverlap(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 90*time.Second)
	name := testutil.UniqueName(t)
	var lockers []*etcdlock.Locker
	for i := range 3 {
		lockers = append(lockers, newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity(fmt.Sprintf("chaos-%d", i))))
	}

	var (
		mu       sync.Mutex
		inside   = map[lock.Lease]string{}
		grants   int
		losses   int
		overlaps int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range lockers {
		for g := range 2 {
			who := fmt.Sprintf("chaos-%d/%d", i, g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					le, err := l.Acquire(actx, name)
					cancel()
					if err != nil {
						continue // timeouts and lost waits are expected under faults
					}
					mu.Lock()
					for other, by := range inside {
						select {
						case <-other.Done():
						default:
							overlaps++
							t.Errorf("%s granted token %d while %s still holds token %d", who, le.Token(), by, other.Token())
						}
					}
					inside[le] = who
					grants++
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the critical section
					mu.Lock()
					delete(inside, le)
					mu.Unlock()
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					if err := le.Release(rctx); errors.Is(err, lock.ErrLost) {
						mu.Lock()
						losses++
						mu.Unlock()
					}
					cancel()
				}
			}()
		}
	}

	progress := func(what string) {
		t.Helper()
		mu.Lock()
		before := grants
		mu.Unlock()
		testutil.Eventually(t, 20*time.Second, "grants after "+what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return grants > before
		})
	}
	progress("start")
	for round := range 4 {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatalf("Leader() = %v", err)
		}
		if round%2 == 0 {
			m := c.Members[leader]
			if err := m.Kill(); err != nil {
				t.Fatalf("Kill(%s) = %v", m.Name(), err)
			}
			progress("killing leader " + m.Name())
			if err := m.Restart(ctx); err != nil {
				t.Fatalf("Restart(%s) = %v", m.Name(), err)
			}
		} else {
			m := c.Members[(leader+1+rand.IntN(2))%len(c.Members)]
			if err := m.Stop(); err != nil {
				t.Fatalf("Stop(%s) = %v", m.Name(), err)
			}
			progress("freezing " + m.Name())
			if err := m.Continue(); err != nil {
				t.Fatalf("Continue(%s) = %v", m.Name(), err)
			}
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("WaitHealthy() = %v", err)
		}
		progress(fmt.Sprintf("round %d", round))
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d grants, %d leases lost, %d overlaps", grants, losses, overlaps)
}
