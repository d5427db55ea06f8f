package testutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock"
)

// PartitionBackend is what RunPartition needs of a backend.
type PartitionBackend struct {
	// Cluster was started WithPeerCuts.
	Cluster *cluster.Cluster
	// Open opens a Locker that talks to servers only, closed at the end
	// of t.
	Open func(t *testing.T, servers []string) lock.Locker
	// Period is the keepalive period of a Locker from Open: the cut is
	// placed at offsets spread over it.
	Period time.Duration
	// Evidence, if set, describes the servers' side of a holder's trial:
	// when the holder was last heard from, when the server expired it and
	// when the cut member noticed the cut, against the cut.
	Evidence func(l lock.Locker, holder lock.Lease, cutAt time.Time, member cluster.Member) string
}

// PartitionCase is one way of cutting the holder's member off.
type PartitionCase struct {
	Name   string
	Leader bool // the holder's member is the leader; otherwise a follower, rotated
	Mode   cluster.CutMode
}

// PartitionCases are the cases RunPartition runs.
var PartitionCases = []PartitionCase{
	{"FollowerCut", false, cluster.CutBoth},
	{"LeaderCut", true, cluster.CutBoth},
	{"FollowerCannotSend", false, cluster.CutSend},
}

// Pairs of holder and waiter per cut, and cuts per case: 30 trials. Each
// cut opens PartitionPairs holders' Lockers, then the waiters' one.
const (
	PartitionPairs  = 10
	partitionRounds = 3
)

// PartitionTrial is what one holder and waiter pair measured.
type PartitionTrial struct {
	Offset time.Duration // the cut's place in the holder's keepalive period
	Done   time.Duration // the holder's Done, after the cut
	Grant  time.Duration // the waiter's grant, after the cut
}

// Margin is how long before the grant the holder's Done closed.
func (r PartitionTrial) Margin() time.Duration { return r.Grant - r.Done }

// RunPartition cuts the member that a holder alone reaches off from its
// peers while waiters on the other members queue for the same names, for
// every case of PartitionCases. In every trial the holder's Done must be
// closed when the waiter's Acquire returns, its Err must wrap
// lock.ErrLost, the waiter's token must be higher, and the holder's late
// Release after the cut heals must leave the waiter's grant alone. Each
// cut must have dropped packets. It returns the margins per case.
func RunPartition(t *testing.T, b PartitionBackend) map[string][]PartitionTrial {
	t.Helper()
	out := map[string][]PartitionTrial{}
	for _, pc := range PartitionCases {
		t.Run(pc.Name, func(t *testing.T) {
			var trials []PartitionTrial
			for round := range partitionRounds {
				trials = append(trials, partitionRound(t, b, pc, round)...)
			}
			out[pc.Name] = trials
			ms := make([]time.Duration, len(trials))
			for i, r := range trials {
				ms[i] = r.Margin()
			}
			t.Logf("%s: %d trials; Done before the grant by %s", pc.Name, len(trials), MarginSummary(ms))
		})
	}
	return out
}

// MarginSummary formats the minimum, median and maximum of ms.
func MarginSummary(ms []time.Duration) string {
	if len(ms) == 0 {
		return "none"
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return fmt.Sprintf("min %v, median %v, max %v over %d trials",
		s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// partitionTarget picks the member to cut for round: the leader, or the
// followers in turn.
func partitionTarget(t *testing.T, ctx context.Context, c *cluster.Cluster, pc PartitionCase, round int) int {
	t.Helper()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy() = %v", err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	if pc.Leader {
		return leader
	}
	var followers []int
	for i := range c.Members {
		if i != leader {
			followers = append(followers, i)
		}
	}
	return followers[round%len(followers)]
}

// partitionHolder is one holder of a round.
type partitionHolder struct {
	l      lock.Locker
	lease  lock.Lease
	start  time.Time // when its Locker was opened: its keepalive phase
	doneAt chan time.Time
}

// partitionGrant is a waiter's grant.
type partitionGrant struct {
	lease lock.Lease
	err   error
	at    time.Time
	held  bool // the holder's Done was still open at the grant
}

func partitionRound(t *testing.T, b PartitionBackend, pc PartitionCase, round int) []PartitionTrial {
	t.Helper()
	ctx := Context(t, 3*time.Minute)
	c := b.Cluster
	target := partitionTarget(t, ctx, c, pc, round)
	member := c.Members[target]
	var others []string
	for i, m := range c.Members {
		if i != target {
			others = append(others, m.ClientAddr())
		}
	}
	names := make([]string, PartitionPairs)
	holders := make([]partitionHolder, PartitionPairs)
	for k := range holders {
		names[k] = UniqueName(t)
		holders[k] = openHolder(t, ctx, b, member, names[k])
		time.Sleep(b.Period / PartitionPairs) // spreads the keepalive phases over one period
	}
	waiter := b.Open(t, others)
	grants := make([]chan partitionGrant, PartitionPairs)
	for k := range grants {
		grants[k] = acquireBehind(ctx, waiter, names[k], holders[k].lease)
	}
	waitQueued(t, ctx, waiter, names)

	for k, h := range holders {
		if h.lease.Err() != nil {
			t.Fatalf("holder %d lost its lease before the cut: %v", k, h.lease.Err())
		}
	}
	cutAt := time.Now()
	cut, err := c.CutPeers(target, pc.Mode)
	if err != nil {
		t.Fatalf("CutPeers(%s) = %v", member.Name(), err)
	}
	t.Cleanup(func() { _ = cut.Heal() })
	trials := make([]PartitionTrial, PartitionPairs)
	won := make([]partitionGrant, PartitionPairs)
	for k := range holders {
		won[k] = Recv(t, grants[k], time.Minute, "the waiter's grant")
		if won[k].err != nil {
			t.Fatalf("pair %d: waiter's Acquire() = %v; want a lease", k, won[k].err)
		}
	}
	for k, h := range holders {
		done := Recv(t, h.doneAt, time.Minute, "the holder's Done")
		trials[k] = PartitionTrial{
			Offset: cutAt.Sub(h.start) % b.Period,
			Done:   done.Sub(cutAt),
			Grant:  won[k].at.Sub(cutAt),
		}
	}
	dropped, err := cut.Dropped()
	if err != nil || dropped == 0 {
		t.Fatalf("cut of %s (%v) dropped %d packets, %v: the fault did not happen", member.Name(), pc.Mode, dropped, err)
	}
	evidence := ""
	if b.Evidence != nil { // before the heal: the member answers again after it
		evidence = b.Evidence(holders[0].l, holders[0].lease, cutAt, member)
	}
	if err := cut.Heal(); err != nil {
		t.Fatalf("Heal() = %v", err)
	}
	for k, h := range holders {
		checkPartitionTrial(t, ctx, k, h, won[k], waiter, names[k], trials[k])
	}
	if evidence != "" {
		t.Logf("round %d, %s cut (%v), pair 0: %s", round, member.Name(), pc.Mode, evidence)
	}
	t.Logf("round %d: %s cut (%v), %d packets dropped; %s", round, member.Name(), pc.Mode, dropped, formatTrials(trials))
	return trials
}

// openHolder opens a Locker on member alone and acquires name with it.
func openHolder(t *testing.T, ctx context.Context, b PartitionBackend, member cluster.Member, name string) partitionHolder {
	t.Helper()
	h := partitionHolder{start: time.Now(), doneAt: make(chan time.Time, 1)}
	h.l = b.Open(t, []string{member.ClientAddr()})
	le, err := h.l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("holder's Acquire(%q) = %v", name, err)
	}
	h.lease = le
	go func() {
		<-le.Done()
		h.doneAt <- time.Now()
	}()
	return h
}

// acquireBehind acquires name with l, again after each loss of the
// waiter's own session (its servers may be electing a leader), and
// reports the grant with whether the holder's lease was still open at
// that moment.
func acquireBehind(ctx context.Context, l lock.Locker, name string, holder lock.Lease) chan partitionGrant {
	ch := make(chan partitionGrant, 1)
	go func() {
		for {
			le, err := l.Acquire(ctx, name)
			if errors.Is(err, lock.ErrLost) {
				continue
			}
			g := partitionGrant{lease: le, err: err, at: time.Now()}
			select {
			case <-holder.Done():
			default:
				g.held = true
			}
			ch <- g
			return
		}
	}()
	return ch
}

// waitQueued waits until every name has a holder and a waiter.
func waitQueued(t *testing.T, ctx context.Context, l lock.Locker, names []string) {
	t.Helper()
	ql, ok := l.(lock.QueueLister)
	if !ok {
		t.Fatalf("%T is not a lock.QueueLister", l)
	}
	Eventually(t, 30*time.Second, "every waiter queued", func() bool {
		for _, name := range names {
			q, err := ql.Queue(ctx, name)
			if err != nil || len(q) != 2 {
				return false
			}
		}
		return true
	})
}

func checkPartitionTrial(t *testing.T, ctx context.Context, k int, h partitionHolder, g partitionGrant, waiter lock.Locker, name string, r PartitionTrial) {
	t.Helper()
	if g.held {
		t.Errorf("pair %d: the holder's Done closed %v after the waiter's grant (cut %v into its keepalive period): two holders at once",
			k, (r.Done - r.Grant).Round(time.Millisecond), r.Offset.Round(time.Millisecond))
	}
	if !errors.Is(h.lease.Err(), lock.ErrLost) {
		t.Errorf("pair %d: holder's Err() = %v; want an error wrapping %v", k, h.lease.Err(), lock.ErrLost)
	}
	if g.lease.Token() <= h.lease.Token() {
		t.Errorf("pair %d: waiter's Token() = %d; want > the holder's %d", k, g.lease.Token(), h.lease.Token())
	}
	if err := h.lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("pair %d: holder's late Release() = %v; want an error wrapping %v", k, err, lock.ErrLost)
	}
	if err := g.lease.Err(); err != nil {
		t.Errorf("pair %d: waiter's Err() after the holder's late Release = %v; want nil", k, err)
	}
	if hd, err := waiter.Holder(ctx, name); err != nil || hd.Token != g.lease.Token() {
		t.Errorf("pair %d: Holder() after the holder's late Release = %+v, %v; want the waiter's token %d", k, hd, err, g.lease.Token())
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Errorf("pair %d: waiter's Release() = %v", k, err)
	}
}

func formatTrials(rs []PartitionTrial) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("[offset %dms: Done %dms, grant %dms]", r.Offset.Milliseconds(), r.Done.Milliseconds(), r.Grant.Milliseconds())
	}
	return strings.Join(parts, " ")
}
