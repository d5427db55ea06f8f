package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
)

// The partition faults cut one member off from its peers while every
// client still reaches it (cluster.CutPeers), the network fault a real
// deployment sees most. Only a cluster started WithPeerCuts can make
// them, which only the process provider can start.

// zkSyncLimit is syncLimit×tickTime of the suite's ZooKeeper ensembles
// (package cluster's defaults, 10 ticks of 200ms): how long a member
// goes unheard before the leader gives it up, and it the leader.
const zkSyncLimit = 2 * time.Second

// cutLeast is the least time a peer cut is held: past the TTL, so that
// the session of a holder on the cut member can expire on the majority's
// side, and past ZooKeeper's syncLimit, so that the cut member and its
// peers give each other up, with one TTL more for the servers to act on
// it.
func cutLeast(r *run) time.Duration { return max(r.cfg.ttl, zkSyncLimit) + r.cfg.ttl }

// peerCutOptions returns the cluster options of TestFault and TestChaos:
// WithPeerCuts under the process provider, for the partition faults; the
// containers provider cannot make peer cuts and would fail the test on
// the option.
func peerCutOptions(t *testing.T) []cluster.Option {
	t.Helper()
	if cluster.FromEnv(t).Name() == "process" {
		return []cluster.Option{cluster.WithPeerCuts()}
	}
	return nil
}

// runnable returns the scenarios of pool that b can run: all of them, but
// for the partitions when its cluster cannot cut peers, which it says
// (in the test log and on stdout, for make test's output) rather than
// skipping: a skip would fail make test's summary.
func runnable(t *testing.T, b *backend, pool []scenario) []scenario {
	t.Helper()
	if b.c.CanCutPeers() {
		return pool
	}
	var out []scenario
	var left []string
	for _, sc := range pool {
		if sc.peerCut {
			left = append(left, sc.name)
			continue
		}
		out = append(out, sc)
	}
	if len(left) > 0 {
		msg := fmt.Sprintf("faulttest %s: left out %s: the cluster was not started WithPeerCuts (FENCELOCK_PROVIDER=%s; only the process provider can cut a member off from its peers, by its cgroup)",
			b.kind, strings.Join(left, ", "), os.Getenv("FENCELOCK_PROVIDER"))
		t.Log(msg)
		fmt.Println(msg)
	}
	return out
}

// faultCutPeers cuts the member that the holder's client talks to (every
// client has a single endpoint: this fault's scenarios set
// singleEndpoint) off from its peers as mode says, right after the
// register served the holder's read; the client still reaches that
// member. With leader the holder picked is a client of the leader,
// otherwise a client of a follower. The cut is held until the holder has
// reported its lease (or its wait) lost, another client, on the
// majority's side, has written with a newer token, and cutLeast has
// passed; then it is healed and the cluster must become healthy again.
//
// It confirms that the cut dropped packets, that the holder gave its
// lease up as lost, and, for the leader, that another member led during
// the cut.
func faultCutPeers(leader bool, mode cluster.CutMode) fault {
	return func(r *run) error {
		cut, target, e, err := r.cutHolderMember(leader, mode)
		if err != nil {
			return err
		}
		// Every path heals; a second Heal does nothing.
		defer cut.Heal()
		m := r.b.c.Members[cut.Member()]
		cutAt := r.now()
		r.t.Logf("cut %s (the leader: %t) off from its peers (%v), which client %d (token %d) depends on", m.Name(), leader, mode, target.id, e.Token)
		err = r.holdCut(target, e, cutAt)
		if err == nil && leader {
			err = r.ledByAnother(cut.Member())
		}
		dropped, derr := cut.Dropped()
		herr := cut.Heal()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if herr == nil {
			herr = r.b.c.WaitHealthy(ctx)
		}
		r.faultDone()
		switch {
		case herr != nil:
			return fmt.Errorf("healing the cut of %s: %w", m.Name(), herr)
		case derr != nil:
			return fmt.Errorf("counting the cut's dropped packets: %w", derr)
		case err != nil:
			return fmt.Errorf("%s cut off from its peers (%v): %w", m.Name(), mode, err)
		case dropped == 0:
			return fmt.Errorf("the cut of %s (%v) dropped no packets: the fault did not happen", m.Name(), mode)
		}
		r.t.Logf("cut of %s (%v) held %v, %d packets dropped", m.Name(), mode, time.Duration(r.now()-cutAt).Round(time.Millisecond), dropped)
		return nil
	}
}

// errLeaderMoved says that leadership moved between the choice of the
// member to cut and the cut.
var errLeaderMoved = errors.New("leadership moved before the cut")

// cutHolderMember cuts, right after the register served a read, the
// member of the reading client if that member leads (leader) or follows
// (!leader), and returns the cut, the client and its read. The member's
// role is asked again just before the cut; if it changed, it waits for
// another read, a few times.
func (r *run) cutHolderMember(leader bool, mode cluster.CutMode) (*cluster.PeerCut, *clientProc, serverEvent, error) {
	for attempt := 1; ; attempt++ {
		lead, err := r.leaderNow(r.timeout())
		if err != nil {
			return nil, nil, serverEvent{}, fmt.Errorf("Leader() = %w", err)
		}
		var target *clientProc
		var cut *cluster.PeerCut
		var cerr error
		e, err := r.nextAccepted(func(e serverEvent) bool {
			p := r.client(e.Client)
			return isRead(e) && p != nil && (p.member == lead) == leader
		}, func(e serverEvent) {
			target = r.client(e.Client)
			// The hook runs in the register's critical section: the
			// question is bounded, as faultPauseServer's is.
			if now, lerr := r.leaderNow(2 * time.Second); lerr != nil || (now == target.member) != leader {
				cerr = errLeaderMoved
				return
			}
			r.reg.holdLonger(e.Client, longHold(r))
			cut, cerr = r.b.c.CutPeers(target.member, mode)
		})
		switch {
		case err != nil:
			return nil, nil, e, err
		case errors.Is(cerr, errLeaderMoved) && attempt < 3:
			continue
		case cerr != nil:
			return nil, nil, e, fmt.Errorf("CutPeers(member %d, %v) = %w", target.member, mode, cerr)
		}
		return cut, target, e, nil
	}
}

// leaderNow returns the leader's index, asking for at most d.
func (r *run) leaderNow(d time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return r.b.c.Leader(ctx)
}

// holdCut waits, from the cut at cutAt, until the holder target (whose
// read was e) has reported its lease or its wait lost, a write with a
// newer token has been accepted and cutLeast has passed; then for the
// chaos jitter.
func (r *run) holdCut(target *clientProc, e serverEvent, cutAt int64) error {
	if !poll(r.timeout(), func() bool { return lostSince(target, cutAt) }) {
		return fmt.Errorf("client %d (token %d), whose server was cut off, never reported a lost lease or wait within %v", target.id, e.Token, r.timeout())
	}
	if err := r.waitHigherWrite(e.Name, e.Token); err != nil {
		return err
	}
	if rest := cutLeast(r) - time.Duration(r.now()-cutAt); rest > 0 {
		<-time.After(rest)
	}
	r.settle()
	return nil
}

// lostSince reports whether p has reported a lease or a wait lost at or
// after since. Any such event counts, not only the latest: the client
// goes on trying on its cut-off server and logs other outcomes after it.
func lostSince(p *clientProc, since int64) bool {
	for _, e := range p.events() {
		if e.T >= since && (e.Kind == "done" || e.Kind == "acq-err") && e.Class == "lost" {
			return true
		}
	}
	return false
}

// ledByAnother confirms that a member other than the cut one leads: the
// majority side elected a leader of its own.
func (r *run) ledByAnother(cut int) error {
	lead, err := r.leaderNow(10 * time.Second)
	if err != nil {
		return fmt.Errorf("Leader() during the cut = %w", err)
	}
	if lead == cut {
		return fmt.Errorf("%s, cut off from its peers, still reported as the leader", r.b.c.Members[cut].Name())
	}
	return nil
}
