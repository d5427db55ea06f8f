package zklock

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// A held lease must learn of two things: the end of its session, and the
// deletion of its znode by anyone but itself. Neither costs a goroutine per
// lease. One goroutine of the Locker, the lease table's run, does both:
//
//   - sessions raises a flag and wakes it when a session ends; it then ends
//     every lease of an ended session.
//   - go-zookeeper publishes every watch event on the connection's global
//     event stream before it delivers it to the watch's own channel. A
//     Locker from Dial reads that stream through its event callback, which
//     never drops an event; one from New through the caller's event channel
//     (read by sessions.run). route looks the event's path up in the
//     Locker's table of watched znodes and queues it for run.
//
// The table has an entry for the znode of every acquisition from its
// first listing until the lease ends. A waiting acquisition sets no watch
// on its own znode, but another request of the same connection may watch
// it (as its predecessor): a deletion reported so before the grant is
// kept in the entry and acted on at the grant. The held lease's own watch
// is set ownWatchDelay after the grant, by run (armDue). A Locker from
// Dial sets it without go-zookeeper's bookkeeping (see isDeletionWatch),
// and so sets it again itself on every new connection (rearmAll); one
// from New through go-zookeeper (deletionW), whose watch channels are
// buffered (one event, then closed) and may be dropped unread.
//
// go-zookeeper drops events from the channel it returns from zk.Connect
// when nobody has read the previous ones yet, so a Locker from New may miss
// one. It therefore also polls the watch channels of its held leases every
// ownPollInterval: a deletion whose global event was dropped is noticed
// within that interval.

// ownWatchDelay is how long after a grant the watch on the lease's own
// znode is set. A lease released before then never had a watch, so its
// release costs no watch event (a waiter's own event is the one on its
// predecessor); a deletion by anyone else meanwhile is found when the
// watch is set, since setting it reads the znode. A lease whose znode is
// deleted by someone else within ownWatchDelay of its grant therefore
// hears of it up to ownWatchDelay late, as etcdlock's recordWatchDelay.
const ownWatchDelay = 50 * time.Millisecond

// ownPollInterval is how often a Locker from New looks at the watch
// channels of its held leases for an event the global stream dropped.
const ownPollInterval = 500 * time.Millisecond

// route handles one event of the connection's global stream. It runs on
// go-zookeeper's reading goroutine (Dial) or sessions.run (New), so it
// only records and wakes.
func (t *leaseTable) route(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeDeleted, zk.EventNodeChildrenChanged, zk.EventNodeDataChanged, zk.EventNodeCreated:
		t.mu.Lock()
		if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeChildrenChanged {
			notifyWaitersLocked(t.waiters, ev.Path, ev)
		}
		if ev.Type != zk.EventNodeChildrenChanged {
			notifyWaitersLocked(t.changes, ev.Path, ev)
		}
		t.mu.Unlock()
	}
	if ev.Type != zk.EventNodeDeleted && ev.Type != zk.EventNodeDataChanged {
		return
	}
	t.mu.Lock()
	e := t.watched[ev.Path]
	switch {
	case e == nil:
		t.mu.Unlock()
		return
	case e.lease == nil:
		// Not granted yet: a deletion is acted on at the grant; a data
		// change needs nothing, since the lease's watch is set after it.
		if ev.Type == zk.EventNodeDeleted {
			e.deleted = true
		}
		t.mu.Unlock()
		return
	}
	t.pending = append(t.pending, nodeEvent{ev.Path, ev.Type})
	t.mu.Unlock()
	t.wake()
}

// run ends the leases of ended sessions and acts on the events routed to
// held leases, until Close; before it returns it ends every lease left
// (Close has ended the session by then).
func (t *leaseTable) run() {
	var tick <-chan time.Time
	if t.poll {
		tk := time.NewTicker(ownPollInterval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		closing := false
		select {
		case <-t.g.closing:
			closing = true
		case <-t.kick:
		case <-tick:
			t.pollOwn()
		}
		if t.sessionEnded.Swap(false) || closing {
			t.endSessionLeases()
		}
		if t.reconnected.Swap(false) && !closing {
			t.rearmAll()
		}
		if closing {
			t.mu.Lock()
			if t.armTimer != nil {
				t.armTimer.Stop()
			}
			clear(t.arming)
			t.arming = nil
			t.mu.Unlock()
			return
		}
		t.handleEvents()
		t.armDue()
	}
}

// armLater has run set the watch on le's znode ownWatchDelay from now.
// One timer serves every lease: the delay is the same for all, so the
// leases waiting for their watch are due in grant order, and the timer is
// set for the oldest. A grant therefore costs no timer and no wake-up of
// run of its own; run arms whatever is due when the timer fires.
func (t *leaseTable) armLater(le *Lease) {
	due := time.Now().Add(ownWatchDelay)
	t.mu.Lock()
	t.arming = append(t.arming, pendingArm{le, due})
	if len(t.arming) == 1 {
		if t.armTimer == nil {
			t.armTimer = time.AfterFunc(ownWatchDelay, t.wake)
		} else {
			t.armTimer.Reset(ownWatchDelay)
		}
	}
	t.mu.Unlock()
}

// pendingArm is a held lease whose watch is set at due (armLater).
type pendingArm struct {
	le  *Lease
	due time.Time
}

// armDue sets the watches that armLater made due, on the leases still held,
// and sets the timer for the next one.
func (t *leaseTable) armDue() {
	now := time.Now()
	t.mu.Lock()
	n := 0
	for n < len(t.arming) && !t.arming[n].due.After(now) {
		n++
	}
	var les []*Lease
	for _, p := range t.arming[:n] {
		if !p.le.stopped() {
			les = append(les, p.le)
		}
	}
	clear(t.arming[:n])
	t.arming = t.arming[n:]
	if len(t.arming) > 0 {
		t.armTimer.Reset(t.arming[0].due.Sub(now))
	}
	t.mu.Unlock()
	for _, le := range les {
		if le.endErr() == nil {
			t.rearm(le)
			if le.byMark {
				t.g.spawn(le.checkMark)
			}
		}
	}
}

// endSessionLeases ends every lease whose session has ended.
func (t *leaseTable) endSessionLeases() {
	for _, le := range t.held() {
		if !ended(le.s) || le.stopped() {
			continue // still held, or Release ends it
		}
		if errors.Is(le.s.err, lock.ErrClosed) {
			if le.end(telemetry.WithReason(telemetry.Closed, fmt.Errorf("lease %q: %w: locker closed", le.Name(), lock.ErrReleased))) {
				t.jan.add(cleanup{path: le.path})
			}
			continue
		}
		le.lose(le.s.err)
	}
}

// handleEvents acts on the events routed to held leases.
func (t *leaseTable) handleEvents() {
	t.mu.Lock()
	evs := t.pending
	t.pending = nil
	type todo struct {
		le  *Lease
		typ zk.EventType
	}
	var work []todo
	for _, ev := range evs {
		if e := t.watched[ev.path]; e != nil && e.lease != nil {
			work = append(work, todo{e.lease, ev.typ})
		}
	}
	t.mu.Unlock()
	for _, w := range work {
		if w.le.stopped() {
			continue // Release deleted it, or is about to
		}
		switch w.typ {
		case zk.EventNodeDeleted:
			w.le.lose(znodeDeleted(w.le.path))
		case zk.EventNodeDataChanged:
			// The znode is still there, and the watch is spent.
			t.rearm(w.le)
		}
	}
}

// pollOwn queues the events waiting in the watch channels of held leases
// (a Locker from New: the global stream may have dropped them).
func (t *leaseTable) pollOwn() {
	t.mu.Lock()
	for path, e := range t.watched {
		if e.lease == nil || e.own == nil {
			continue
		}
		select {
		case ev, ok := <-e.own:
			e.own = nil // one event per watch
			if ok {
				t.pending = append(t.pending, nodeEvent{path, ev.Type})
			}
		default:
		}
	}
	t.mu.Unlock()
}

// rearm sets a new watch on a held lease's znode, and ends the lease if
// the znode is gone. The watch the Locker sets fires on deletion only
// (deletionW; for a Locker from Dial without go-zookeeper's bookkeeping,
// see isDeletionWatch); rearm sets the first one (armDue), and runs again
// when a data change event for the znode arrives anyway, from an earlier
// watch of another kind or from another watch on the same connection (a
// queued request of this Locker watching it).
func (t *leaseTable) rearm(le *Lease) {
	t.g.spawn(func() { t.arm(le) })
}

// arm is rearm on the caller's goroutine.
func (t *leaseTable) arm(le *Lease) {
	watch := deletionW
	if !t.poll {
		watch = deletionWatchDial
	}
	for {
		r, err := call(t.g.bg, t.g, le.s, watch(t.conn, le.path))
		if le.stopped() || le.endErr() != nil {
			return
		}
		switch {
		case err == nil && !r.ok:
			le.lose(znodeDeleted(le.path))
		case err == nil:
			if r.watch != nil {
				t.mu.Lock()
				if e := t.watched[le.path]; e != nil {
					e.own = r.watch
				}
				t.mu.Unlock()
			}
		case isStop(err):
			// The session ended or the Locker closed: run ends the
			// lease.
		case isConnErr(err):
			if t.ss.awaitConnected(t.g.bg, le.s) == nil {
				continue
			}
		default:
			le.lose(telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: cannot watch its znode %s: %w", lock.ErrLost, le.path, err)))
		}
		return
	}
}

// rearmParallel is how many watches rearmAll sets at a time.
const rearmParallel = 32

// rearmAll sets again the watches of the held leases of a Locker from
// Dial, after a new connection: the server keeps a connection's watches
// with the connection, and go-zookeeper sets again only those it keeps
// itself (see isDeletionWatch). A znode deleted meanwhile is found
// missing, and its lease ends. A lease whose first watch is not due yet
// gets it from armDue as usual.
func (t *leaseTable) rearmAll() {
	les := t.held()
	t.mu.Lock()
	due := make(map[*Lease]bool, len(t.arming))
	for _, p := range t.arming {
		due[p.le] = true
	}
	t.mu.Unlock()
	les = slices.DeleteFunc(les, func(le *Lease) bool { return due[le] || le.stopped() || le.endErr() != nil })
	if len(les) == 0 {
		return
	}
	t.g.spawn(func() {
		slots := make(chan struct{}, rearmParallel)
		var wg sync.WaitGroup
		for _, le := range les {
			select {
			case slots <- struct{}{}:
			case <-t.g.closing:
				wg.Wait()
				return
			}
			wg.Go(func() {
				defer func() { <-slots }()
				t.arm(le)
			})
		}
		wg.Wait()
	})
}
