package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// A fault injects one fault into a running workload, waits until the lock
// has moved on or the fault has run its course, ends the fault (calling
// run.faultDone), and returns an error if it cannot confirm that the fault
// really happened as intended.
type fault func(r *run) error

// isRead and isWrite select accepted register requests.
func isRead(e serverEvent) bool  { return !e.Write }
func isWrite(e serverEvent) bool { return e.Write }

// settle waits a random extra time in chaos runs (0 in the short pass),
// so that faults end at varied moments.
func (r *run) settle() {
	if d := r.jitter(); d > 0 {
		<-time.After(d)
	}
}

// faultPauseHolder freezes the holder right after the register served
// its read, as a garbage-collection pause between the read and the write
// would, and thaws it once another client has written with a newer token.
// Its write must then be refused as stale (with fencing on) or accepted
// (the control run, which must then fail the checkers). In a run that
// checks a lock-delay it also times the frozen holder's record vanishing
// (watchVanish), which it does when the session expires.
func faultPauseHolder(r *run) (err error) {
	var target *clientProc
	var ferr error
	var vanished func() error
	defer r.awaitVanish(&vanished, &err)
	e, err := r.nextAccepted(isRead, func(e serverEvent) {
		target = r.client(e.Client)
		ferr = r.freeze(target)
		if ferr == nil {
			vanished = r.watchVanishIfDelayed(target, e.Token)
		}
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	paused := r.now()
	err = r.waitHigherWrite(e.Name, e.Token)
	if err == nil {
		r.settle()
	}
	if terr := r.thaw(target); terr != nil {
		return terr
	}
	r.faultDone()
	if err != nil {
		return err
	}
	// The frozen client sends its write once thawed.
	var res event
	if !poll(r.timeout(), func() bool {
		var ok bool
		res, ok = lastEvent(target, paused, "write-ok", "write-stale", "write-err", "write-unknown")
		return ok && res.Token == e.Token
	}) {
		return fmt.Errorf("client %d (token %d) did not finish its write within %v of being thawed", target.id, e.Token, r.timeout())
	}
	want := "write-stale"
	if !r.cfg.fenced {
		want = "write-ok"
	}
	if res.Kind != want {
		return fmt.Errorf("client %d frozen between its read and its write (token %d): the write ended %q; want %q", target.id, e.Token, res.Kind, want)
	}
	return nil
}

// longHold is how long a holder targeted by a fault is asked to keep its
// lease: past the TTL, so that the lease must end by loss, not release.
func longHold(r *run) time.Duration { return 3 * r.cfg.ttl }

// faultPauseServer freezes (SIGSTOP) the member the holder is connected to
// (every client has a single endpoint), until a client on another member
// has written with a newer token. Whether that member led the cluster is
// asked just before the freeze and recorded with it: the checker excuses
// an overlap after the resume only for a frozen etcd leader.
func faultPauseServer(r *run) error {
	var target *clientProc
	var m cluster.Member
	var ferr error
	var freeze serverFreeze
	e, err := r.nextAccepted(isRead, func(e serverEvent) {
		target = r.client(e.Client)
		r.reg.holdLonger(e.Client, longHold(r))
		m = r.b.c.Members[target.member]
		// A failed query records "not the leader", which excuses nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		leader, lerr := r.b.c.Leader(ctx)
		cancel()
		freeze = serverFreeze{member: m.Name(), leader: lerr == nil && leader == target.member, from: r.now(), to: never}
		ferr = m.Stop()
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return fmt.Errorf("Stop(%s) = %v", m.Name(), ferr)
	}
	r.t.Logf("froze %s (the leader when frozen: %t), which client %d (token %d) depends on", freeze.member, freeze.leader, target.id, e.Token)
	r.mu.Lock()
	r.serverFreezes = append(r.serverFreezes, freeze)
	idx := len(r.serverFreezes) - 1
	r.mu.Unlock()
	paused := r.now()
	// Confirm the freeze from the kernel, not only from the provider's
	// own bookkeeping.
	running := m.Running()
	var frozenErr error
	if pid, perr := testutil.ListenerPID(m.ClientAddr()); perr != nil {
		frozenErr = fmt.Errorf("finding %s's process: %w", m.Name(), perr)
	} else {
		frozenErr = testutil.WaitFrozen(pid, 5*time.Second)
	}
	err = r.waitHigherWrite(e.Name, e.Token)
	if err == nil {
		r.settle()
	}
	resumed := r.now()
	cerr := m.Continue()
	r.mu.Lock()
	r.serverFreezes[idx].to = resumed
	r.mu.Unlock()
	if cerr != nil {
		return fmt.Errorf("Continue(%s) = %v", m.Name(), cerr)
	}
	r.faultDone()
	if err != nil {
		return err
	}
	if running {
		return fmt.Errorf("%s reported running after Stop", m.Name())
	}
	if frozenErr != nil {
		return fmt.Errorf("%s not frozen after Stop: %w", m.Name(), frozenErr)
	}
	// The holder, cut off from its only server, must have given its lease
	// (or its wait) up as lost.
	if !poll(r.timeout(), func() bool {
		ev, ok := lastEvent(target, paused, "done", "acq-err")
		return ok && ev.Class == "lost"
	}) {
		return fmt.Errorf("client %d, whose server %s was frozen, never reported a lost lease or wait", target.id, m.Name())
	}
	return nil
}

// faultKillLeader kills the leader member, waits for a new leader and for
// the workload to go on without the old one, and restarts it; several
// times.
func faultKillLeader(r *run) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*r.timeout())
	defer cancel()
	c := r.b.c
	for round := range r.rounds() {
		old, err := c.Leader(ctx)
		if err != nil {
			return fmt.Errorf("round %d: Leader() = %v", round, err)
		}
		m := c.Members[old]
		since := r.now()
		if err := m.Kill(); err != nil {
			return fmt.Errorf("round %d: Kill(%s) = %v", round, m.Name(), err)
		}
		if m.Running() {
			return fmt.Errorf("round %d: %s still running after Kill", round, m.Name())
		}
		err = r.waitWrites(since, 5, 1)
		var newLeader int
		if err == nil {
			newLeader, err = c.Leader(ctx)
		}
		if err == nil {
			r.settle()
		}
		if rerr := m.Restart(ctx); rerr != nil {
			return fmt.Errorf("round %d: Restart(%s) = %v", round, m.Name(), rerr)
		}
		if herr := c.WaitHealthy(ctx); herr != nil {
			return fmt.Errorf("round %d: WaitHealthy() after restarting %s = %v", round, m.Name(), herr)
		}
		r.faultDone()
		if err != nil {
			return fmt.Errorf("round %d, %s killed: %w", round, m.Name(), err)
		}
		if newLeader == old {
			return fmt.Errorf("round %d: the killed %s is still reported as leader", round, m.Name())
		}
		if err := r.waitWrites(r.now(), 5, 1); err != nil {
			return fmt.Errorf("round %d, after restarting %s: %w", round, m.Name(), err)
		}
	}
	return nil
}

// faultBlackholeHolder cuts the holder's connections to the cluster
// (its proxies hold everything) right after the register served its
// read, until another client has written with a newer token.
func faultBlackholeHolder(r *run) error {
	var target *clientProc
	e, err := r.nextAccepted(isRead, func(e serverEvent) {
		target = r.client(e.Client)
		r.reg.holdLonger(e.Client, longHold(r))
		for _, p := range target.proxies {
			p.Blackhole()
		}
	})
	if err != nil {
		return err
	}
	cut := r.now()
	err = r.waitHigherWrite(e.Name, e.Token)
	if err == nil {
		r.settle()
	}
	var held int64
	for _, p := range target.proxies {
		held += p.Stats().HeldWhileBlackholed
		p.Heal()
	}
	r.faultDone()
	if err != nil {
		return err
	}
	if held == 0 {
		return fmt.Errorf("client %d's proxies held no bytes while blackholed", target.id)
	}
	if !poll(r.timeout(), func() bool {
		ev, ok := lastEvent(target, cut, "done")
		return ok && hasToken(ev, e.Token) && ev.Class == "lost"
	}) {
		return fmt.Errorf("client %d, partitioned while holding token %d, did not report its lease lost", target.id, e.Token)
	}
	return nil
}

// replyDelay is how long the proxies hold each chunk when a reply is to
// be lost: the request reaches the server after it, and the reply is
// held for as long again, which leaves the test time to see the request's
// effect on the server and reset the connections before the reply gets
// through.
const replyDelay = 250 * time.Millisecond

// clientRecords returns the keys of client id's records of the lock or
// semaphore name on the server (the records carry the client's identity),
// or of every name if name is "".
func (r *run) clientRecords(id int, name string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recs, err := r.b.records(ctx, r.ns)
	if err != nil {
		return nil, err
	}
	identity := fmt.Sprintf("client-%d", id)
	keys := map[string]bool{}
	for _, rec := range recs {
		if rec.identity == identity && (name == "" || strings.Contains(rec.key, "/"+name+"/")) {
			keys[rec.key] = true
		}
	}
	return keys, nil
}

// firstEvent returns the client's first event of one of kinds at or after
// since.
func firstEvent(p *clientProc, since int64, kinds ...string) (event, bool) {
	for _, e := range p.events() {
		if e.T < since {
			continue
		}
		for _, k := range kinds {
			if e.Kind == k {
				return e, true
			}
		}
	}
	return event{}, false
}

// faultReplyLost delays the holder's traffic and waits for its next
// request of kind ("acq" or "rel"). Once the server shows the request's
// effect (for an acquire, a new record of the client's; for a release,
// the client's record gone) while the client has no answer yet, it resets
// the client's connections: the request took effect, and the reply, still
// held by the proxies, is lost. The client's answer must come after the
// reset.
func faultReplyLost(req string) fault {
	return func(r *run) error {
		// In the semaphore workload a client takes a permit before the
		// lock: its first acquire after the delay is the permit's. In the
		// multi workload the request is for every name of a set.
		kind, name, multi := req, "", r.cfg.workload == workloadMulti
		if req == "acq" && r.cfg.workload == workloadSemaphore {
			kind, name = "sem", semName
		}
		var target *clientProc
		if _, err := r.nextAccepted(isWrite, func(e serverEvent) {
			target = r.client(e.Client)
			if name == "" && !multi {
				name = target.cfg.Lock
			}
			for _, p := range target.proxies {
				p.SetDelay(replyDelay)
			}
		}); err != nil {
			return err
		}
		mark := r.now()
		undelay := func() {
			for _, p := range target.proxies {
				p.SetDelay(0)
			}
		}
		fail := func(format string, args ...any) error {
			undelay()
			r.faultDone()
			return fmt.Errorf(format, args...)
		}
		var inv event
		if !poll(r.timeout(), func() bool {
			var ok bool
			inv, ok = lastEvent(target, mark, kind)
			return ok
		}) {
			return fail("client %d sent no %q request within %v", target.id, kind, r.timeout())
		}
		// What the client had on the server when it sent the request,
		// which reaches the server only replyDelay later.
		before, err := r.clientRecords(target.id, name)
		if err != nil {
			return fail("listing client %d's records: %v", target.id, err)
		}
		// In the multi workload the client may still have records of its
		// previous grant, whose releases ran under the delay and may have
		// outlasted its session: only a new record shows the acquire's
		// effect.
		switch {
		case req == "acq" && len(before) > 0 && !multi:
			return fail("client %d already had records %v when the test looked, right after it sent its acquire (was the request not delayed?); cannot tell the acquire's effect", target.id, before)
		case req == "rel" && len(before) == 0:
			return fail("client %d had no record on the server when it sent its release", target.id)
		}
		// The request's effect on the server, seen while the client
		// still waits for the answer.
		var took bool
		var answeredEarly event
		poll(r.timeout(), func() bool {
			if e, ok := firstEvent(target, inv.T, kind+"-ok", kind+"-err"); ok {
				answeredEarly = e
				return true
			}
			now, err := r.clientRecords(target.id, name)
			if err != nil {
				return false
			}
			gone, added := 0, 0
			for k := range before {
				if !now[k] {
					gone++
				}
			}
			for k := range now {
				if !before[k] {
					added++
				}
			}
			// A multi grant's names are released one after another; with
			// every reply held, all of them would outlast the keepalive
			// deadline, so the first release's reply is the one lost.
			took = req == "acq" && added > 0 || req == "rel" && (gone == len(before) || multi && gone > 0)
			return took
		})
		proxyTotals := func() (active, accepted, resets int) {
			for _, p := range target.proxies {
				st := p.Stats()
				active += st.Active
				accepted += st.Accepted
				resets += st.Resets
			}
			return active, accepted, resets
		}
		active, accepted0, resets0 := proxyTotals()
		// Taken before the reset: the client may react to it (an error
		// for the request in flight) before ResetConns returns.
		reset := r.now()
		for _, p := range target.proxies {
			p.ResetConns()
		}
		_, _, resets1 := proxyTotals()
		undelay()
		r.faultDone()
		if answeredEarly.Kind != "" {
			return fmt.Errorf("client %d's %q was answered (%s at %v) before the server showed its effect: the reply was not held", target.id, kind, answeredEarly.Kind, ms(answeredEarly.T))
		}
		if !took {
			return fmt.Errorf("client %d's %q request showed no effect on the server within %v", target.id, kind, r.timeout())
		}
		// Every connection the reply could travel on was cut.
		if active == 0 || resets1-resets0 < active {
			return fmt.Errorf("client %d had %d connections open, %d were reset; want all of them, at least one", target.id, active, resets1-resets0)
		}
		var res event
		if !poll(r.timeout(), func() bool {
			var ok bool
			res, ok = firstEvent(target, inv.T, kind+"-ok", kind+"-err")
			return ok
		}) {
			return fmt.Errorf("client %d's %q did not finish within %v of its reply being lost", target.id, kind, r.timeout())
		}
		if res.T < reset {
			return fmt.Errorf("client %d's %q answered (%s) at %v, before the reset at %v: the reply was not lost", target.id, kind, res.Kind, ms(res.T), ms(reset))
		}
		// With every old connection gone, a success needed a new one (a
		// retry, or the client's own check of the outcome); an error may
		// be the reset itself.
		if _, accepted, _ := proxyTotals(); res.Kind == kind+"-ok" && accepted <= accepted0 {
			return fmt.Errorf("client %d's %q answered (%s) at %v without a new connection after the reset: the reply was not lost", target.id, kind, res.Kind, ms(res.T))
		}
		return nil
	}
}

// faultWaiterExpires cuts a client off while it waits for the lock, until
// the cluster has expired its session (no record of it is left), then
// heals: its wait must end with ErrLost, never with a lease from the dead
// session. A waiter whose grant was already on its way when it was cut
// off (a watch event or a reply that reached it just before) is granted
// soon after the cut, well before its Locker stops trusting the session
// (half a TTL or session timeout after its last answered request at the
// soonest): that waiter was not the one the fault needs, so the fault is
// made again on the next waiter, up to three times. A grant half a TTL or
// more after the cut is an error.
func faultWaiterExpires(r *run) error {
	for try := 1; ; try++ {
		err := waiterExpiresOnce(r)
		var g *grantedAtCut
		if !errors.As(err, &g) || try == 3 {
			return err
		}
		r.t.Logf("waiter-expires, try %d: %v; cutting off another waiter", try, err)
	}
}

// grantedAtCut says that the waiter cut off was granted the lock within
// half a TTL of the cut.
type grantedAtCut struct {
	client int
	after  time.Duration
}

func (g *grantedAtCut) Error() string {
	return fmt.Sprintf("client %d was granted the lock %v after it was cut off: its grant was on its way", g.client, g.after)
}

// waitingClient returns a client whose latest event is a pending "acq":
// it is queued behind the holder.
func waitingClient(r *run) (target *clientProc, inv event, ok bool) {
	ok = poll(r.timeout(), func() bool {
		for _, p := range r.all() {
			evs := p.events()
			if n := len(evs); n > 0 && evs[n-1].Kind == "acq" && r.now()-evs[n-1].T > int64(5*time.Millisecond) {
				target, inv = p, evs[n-1]
				return true
			}
		}
		return false
	})
	return target, inv, ok
}

func waiterExpiresOnce(r *run) error {
	target, inv, ok := waitingClient(r)
	if !ok {
		return errors.New("no client was waiting for the lock")
	}
	for _, p := range target.proxies {
		p.Blackhole()
	}
	cut := r.now()
	identity := fmt.Sprintf("client-%d", target.id)
	gone := poll(r.timeout(), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		recs, err := r.b.records(ctx, r.ns)
		if err != nil {
			return false
		}
		for _, rec := range recs {
			if rec.identity == identity {
				return false
			}
		}
		return true
	})
	if gone {
		r.settle()
	}
	for _, p := range target.proxies {
		p.Heal()
	}
	r.faultDone()
	if !gone {
		return fmt.Errorf("client %d's records were still there %v after it was cut off: %s", target.id, r.timeout(), r.recordsText())
	}
	var res event
	if !poll(r.timeout(), func() bool {
		var ok bool
		res, ok = lastEvent(target, inv.T, "acq-ok", "acq-err")
		return ok
	}) {
		return fmt.Errorf("client %d's wait did not end within %v", target.id, r.timeout())
	}
	if res.T < cut {
		return fmt.Errorf("client %d's wait ended (%s) before it was cut off: it was not waiting", target.id, res.Kind)
	}
	if res.Kind == "acq-ok" && time.Duration(res.T-cut) < r.cfg.ttl/2 {
		return &grantedAtCut{client: target.id, after: time.Duration(res.T - cut)}
	}
	if res.Kind != "acq-err" || res.Class != "lost" {
		return fmt.Errorf("client %d, cut off while waiting until its session expired: wait ended %s (%s %s); want acq-err wrapping ErrLost",
			target.id, res.Kind, res.Class, res.Err)
	}
	return nil
}

// faultKillHolder kills (SIGKILL) the holder while the register applies
// its write, before the answer is sent: the write took effect and its
// outcome is unknown to the client. The lock must be granted again once
// the dead session expires; a new client takes the dead one's place. In
// a run that checks a lock-delay it also times the dead holder's record
// vanishing (watchVanish).
func faultKillHolder(r *run) (err error) {
	var target *clientProc
	var kerr error
	var vanished func() error
	defer r.awaitVanish(&vanished, &err)
	e, err := r.nextAccepted(isWrite, func(e serverEvent) {
		target = r.client(e.Client)
		kerr = target.kill(r.now())
		if kerr == nil {
			vanished = r.watchVanishIfDelayed(target, e.Token)
		}
	})
	if err != nil {
		return err
	}
	if kerr != nil {
		return kerr
	}
	select {
	case <-target.done:
	case <-time.After(r.timeout()):
		return fmt.Errorf("client %d still running %v after SIGKILL", target.id, r.timeout())
	}
	err = r.waitHigherWrite(e.Name, e.Token)
	if _, aerr := r.addClient(); aerr != nil {
		return aerr
	}
	r.faultDone()
	if err != nil {
		return err
	}
	if !target.signaledKill() {
		return fmt.Errorf("client %d ended with %v; want killed by SIGKILL", target.id, target.werr)
	}
	return nil
}
