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
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// chaosFault is one round of TestChaosNoOverlap.
type chaosFault int

const (
	killLeader chaosFault = iota
	freezeFollower
	freezeLeader
)

func (f chaosFault) String() string {
	return [...]string{"kill leader", "freeze follower", "freeze leader"}[f]
}

// TestChaosNoOverlap has three Lockers (two goroutines each) contend for
// one lock while the leader is killed and restarted, a follower is frozen
// and resumed, and the leader is frozen and resumed. Whenever a lease is
// granted, every other lease still in use must already have ended (Done
// closed): a lease may be lost, but never while someone else can hold
// the lock. The one excuse is etcd's own defect (issues 12528 and 15247):
// a member frozen while it led may, once resumed, revoke leases its
// successor kept alive, so an overlap beginning within one TTL of such a
// resume is counted apart, provided fencing still refused the older token.
//
// It also checks that each fault happened (the killed member is down, the
// frozen one stopped by the kernel, a leader fault moves the leadership),
// that the lock kept being granted during and after each fault, that no
// lease is lost while no fault is in effect, that a lost lease reports
// ErrLost from both Err and Release, and that no record is left at the end.
func TestChaosNoOverlap(t *testing.T) {
	c := startCluster(t)
	ctx := testutil.Context(t, 150*time.Second)
	name := testutil.UniqueName(t)
	admin := newClient(t, c.Endpoints())
	var lockers []*etcdlock.Locker
	for i := range 3 {
		lockers = append(lockers, newLocker(t, newClient(t, c.Endpoints()), etcdlock.WithIdentity(fmt.Sprintf("chaos-%d", i))))
	}

	// The resource: every holder writes with its token through one Guard
	// right after its grant and again just before its release.
	var guard fencing.Guard
	type resume struct {
		member string
		at     time.Time
	}
	var (
		mu         sync.Mutex
		inside     = map[lock.Lease]string{}
		grants     int
		losses     int
		badLoss    []string // lost leases whose Err or Release did not say ErrLost
		quiet      = true   // no fault in effect, nor within a TTL of one
		quietLoss  []string
		leaderRes  []resume // when members frozen as leaders were resumed
		excused    int
		applied    []fencing.Token // tokens the Guard accepted, in order
		staleTries int
		// leases declared lost while Release was in flight, whose
		// Release returned no ErrLost
		lostInRelease int
	)
	write := func(le lock.Lease) {
		err := guard.Apply(name, le.Token(), func() error {
			mu.Lock()
			applied = append(applied, le.Token())
			mu.Unlock()
			return nil
		})
		if errors.Is(err, fencing.ErrStaleToken) {
			mu.Lock()
			staleTries++
			mu.Unlock()
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range lockers {
		for g := range 2 {
			who := fmt.Sprintf("chaos-%d/%d", i, g)
			wg.Go(func() {
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
					now := time.Now()
					mu.Lock()
					for other, by := range inside {
						select {
						case <-other.Done():
							continue
						default:
						}
						msg := fmt.Sprintf("%s granted token %d while %s still holds token %d", who, le.Token(), by, other.Token())
						known := false
						for _, r := range leaderRes {
							if !now.Before(r.at) && now.Sub(r.at) <= testTTL {
								known = true
								msg += fmt.Sprintf(" (%v after former leader %s resumed)", now.Sub(r.at).Round(time.Millisecond), r.member)
							}
						}
						if known {
							excused++
							t.Logf("excused by etcd issues 12528/15247: %s", msg)
						} else {
							t.Errorf("%s", msg)
						}
					}
					inside[le] = who
					grants++
					mu.Unlock()
					write(le)
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the critical section
					write(le)
					mu.Lock()
					delete(inside, le)
					mu.Unlock()
					pre := le.Err() // lost already, before Release was called?
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					rerr := le.Release(rctx)
					cancel()
					lerr := le.Err()
					if errors.Is(rerr, lock.ErrLost) || errors.Is(lerr, lock.ErrLost) {
						mu.Lock()
						losses++
						// A Release that reports the loss must leave the
						// lease saying so, and a lease lost before Release
						// was called must get ErrLost from it. (A loss
						// declared while Release is in flight may race a
						// delete that still succeeds; that is counted.)
						if errors.Is(rerr, lock.ErrLost) && !errors.Is(lerr, lock.ErrLost) {
							badLoss = append(badLoss, fmt.Sprintf("token %d: Release() = %v, Err() = %v; want Err wrapping ErrLost too", le.Token(), rerr, lerr))
						}
						if errors.Is(pre, lock.ErrLost) && !errors.Is(rerr, lock.ErrLost) {
							badLoss = append(badLoss, fmt.Sprintf("token %d: lost before Release (%v), then Release() = %v; want an error wrapping ErrLost", le.Token(), pre, rerr))
						}
						if !errors.Is(rerr, lock.ErrLost) {
							lostInRelease++
						}
						if quiet {
							quietLoss = append(quietLoss, fmt.Sprintf("%s lost token %d with no fault in effect: %v", who, le.Token(), lerr))
						}
						mu.Unlock()
					}
				}
			})
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
			return grants >= before+3
		})
	}
	setQuiet := func(q bool) {
		mu.Lock()
		quiet = q
		mu.Unlock()
	}
	progress("start")
	faults := []chaosFault{killLeader, freezeFollower, freezeLeader, killLeader, freezeLeader}
	for round, f := range faults {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatalf("round %d: Leader() = %v", round, err)
		}
		target := leader
		if f == freezeFollower {
			target = (leader + 1 + rand.IntN(2)) % len(c.Members)
		}
		m := c.Members[target]
		setQuiet(false)
		switch f {
		case killLeader:
			if err := m.Kill(); err != nil {
				t.Fatalf("round %d: Kill(%s) = %v", round, m.Name(), err)
			}
			if m.Running() {
				t.Fatalf("round %d: %s still running after Kill", round, m.Name())
			}
		default:
			pid, perr := testutil.ListenerPID(m.ClientAddr())
			if err := m.Stop(); err != nil {
				t.Fatalf("round %d: Stop(%s) = %v", round, m.Name(), err)
			}
			if m.Running() {
				t.Fatalf("round %d: %s reported running after Stop", round, m.Name())
			}
			if perr != nil {
				t.Fatalf("round %d: finding %s's process: %v", round, m.Name(), perr)
			}
			if err := testutil.WaitFrozen(pid, 5*time.Second); err != nil {
				t.Fatalf("round %d: %s not frozen after Stop: %v", round, m.Name(), err)
			}
		}
		progress(fmt.Sprintf("round %d (%v %s)", round, f, m.Name()))
		if f != freezeFollower {
			// The others must have elected someone else.
			now, err := c.Leader(ctx)
			if err != nil {
				t.Fatalf("round %d: Leader() with %s down = %v", round, m.Name(), err)
			}
			if now == target {
				t.Fatalf("round %d: %s still reported as leader while down", round, m.Name())
			}
		}
		switch f {
		case killLeader:
			if err := m.Restart(ctx); err != nil {
				t.Fatalf("round %d: Restart(%s) = %v", round, m.Name(), err)
			}
		default:
			at := time.Now()
			if err := m.Continue(); err != nil {
				t.Fatalf("round %d: Continue(%s) = %v", round, m.Name(), err)
			}
			if f == freezeLeader {
				mu.Lock()
				leaderRes = append(leaderRes, resume{member: m.Name(), at: at})
				mu.Unlock()
			}
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("round %d: WaitHealthy() = %v", round, err)
		}
		progress(fmt.Sprintf("round %d healed", round))
	}
	// A quiet phase: the last fault has ended, and a lease granted more
	// than a TTL (plus an election) later has no reason to be lost.
	time.Sleep(testTTL + time.Second)
	setQuiet(true)
	progress("quiet phase")
	progress("quiet phase, more")
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d grants, %d leases lost (%d of them during a Release that returned no ErrLost), %d overlaps excused (etcd issues 12528/15247), %d stale writes refused",
		grants, losses, lostInRelease, excused, staleTries)
	for _, s := range badLoss {
		t.Error(s)
	}
	for _, s := range quietLoss {
		t.Error(s)
	}
	if losses > grants {
		t.Errorf("%d leases lost of %d granted; want at most as many as granted", losses, grants)
	}
	// Fencing held throughout, overlaps or not: no token was accepted
	// after a higher one.
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Errorf("the Guard applied token %d after %d; want non-decreasing", applied[i], applied[i-1])
			break
		}
	}
	// Every lease ended: released, or lost and its record expired.
	testutil.Eventually(t, 3*testTTL+5*time.Second, "no records left", func() bool {
		return len(records(t, admin, lockers[0], name)) == 0
	})
}
