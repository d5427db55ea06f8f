package zklock

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// A held lease must learn of two things: the end of its epoch, and the
// deletion of its znode by anyone but itself. Neither costs a goroutine per
// lease. One goroutine of the Locker, the lease loop, does both:
//
//   - endEpochLocked raises a flag and wakes it; it then ends every lease of
//     an ended epoch.
//   - go-zookeeper publishes every watch event on the connection's global
//     event stream before it delivers it to the watch's own channel. A
//     Locker from Dial reads that stream through its event callback, which
//     never drops an event; one from New through the caller's event channel
//     (read by the state loop). route looks the event's path up in the
//     Locker's table of watched znodes and queues it for the lease loop.
//
// The table has an entry for the znode of every acquisition from before
// its first watch is set until the lease ends, so an event that arrives
// between the watch and the grant is kept in the entry and acted on at the
// grant. The watch channels go-zookeeper returns are buffered (one event,
// then closed) and may be dropped unread.
//
// go-zookeeper drops events from the channel it returns from zk.Connect
// when nobody has read the previous ones yet, so a Locker from New may miss
// one. It therefore also polls the watch channels of its held leases every
// ownPollInterval: a deletion whose global event was dropped is noticed
// within that interval.

// ownPollInterval is how often a Locker from New looks at the watch
// channels of its held leases for an event the global stream dropped.
const ownPollInterval = 500 * time.Millisecond

// watchEntry is the Locker's view of one of its own lock znodes.
type watchEntry struct {
	lease   *Lease          // nil until granted
	own     <-chan zk.Event // the latest watch on the znode (New: polled)
	deleted bool            // a deletion event arrived before the grant
	changed bool            // a data change arrived before the grant
}

// nodeEvent is a watch event on a held lease's znode, for the lease loop.
type nodeEvent struct {
	path string
	typ  zk.EventType
}

// track starts routing events on path, the znode of an acquisition, before
// its first watch is set. It also forgets what earlier events said, for a
// new watch.
func (l *Locker) track(path string) {
	l.wmu.Lock()
	if e := l.watched[path]; e != nil && e.lease == nil {
		e.deleted, e.changed = false, false
	} else if e == nil {
		l.watched[path] = &watchEntry{}
	}
	l.wmu.Unlock()
}

// untrack stops routing events on path.
func (l *Locker) untrack(path string) {
	l.wmu.Lock()
	delete(l.watched, path)
	l.wmu.Unlock()
}

// route handles one event of the connection's global stream. It runs on
// go-zookeeper's reading goroutine (Dial) or the state loop (New), so it
// only records and wakes.
func (l *Locker) route(ev zk.Event) {
	if ev.Type != zk.EventNodeDeleted && ev.Type != zk.EventNodeDataChanged {
		return
	}
	l.wmu.Lock()
	e := l.watched[ev.Path]
	switch {
	case e == nil:
		l.wmu.Unlock()
		return
	case e.lease == nil:
		if ev.Type == zk.EventNodeDeleted {
			e.deleted = true
		} else {
			e.changed = true
		}
		l.wmu.Unlock()
		return
	}
	l.pending = append(l.pending, nodeEvent{ev.Path, ev.Type})
	l.wmu.Unlock()
	l.kickLeases()
}

func (l *Locker) kickLeases() {
	select {
	case l.lkick <- struct{}{}:
	default:
	}
}

// hold makes le a held lease: it starts following le's epoch and le's
// znode, whose watch is own. The caller has put le in l.leases.
func (l *Locker) hold(le *Lease, own <-chan zk.Event) {
	l.wmu.Lock()
	e := l.watched[le.path]
	if e == nil { // not tracked: cannot happen, but never go unwatched
		e = &watchEntry{}
		l.watched[le.path] = e
		own = nil
		e.changed = true
	}
	e.lease, e.own = le, own
	deleted, changed := e.deleted, e.changed
	e.deleted, e.changed = false, false
	l.wmu.Unlock()
	switch {
	case deleted:
		le.lose(fmt.Errorf("%w: its znode %s was deleted", lock.ErrLost, le.path))
	case changed:
		l.rearm(le)
	}
}

// leaseLoop ends the leases of ended epochs and acts on the events routed
// to held leases, until Close; before it returns it ends every lease left
// (Close has ended the epoch by then).
func (l *Locker) leaseLoop() {
	defer l.wg.Done()
	var tick <-chan time.Time
	if l.evs != nil {
		t := time.NewTicker(ownPollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		closing := false
		select {
		case <-l.close:
			closing = true
		case <-l.lkick:
		case <-tick:
			l.pollOwn()
		}
		if l.epochEnded.Swap(false) || closing {
			l.endEpochLeases()
		}
		if !closing {
			l.handleEvents()
		}
		if closing {
			return
		}
	}
}

// endEpochLeases ends every lease whose epoch has ended.
func (l *Locker) endEpochLeases() {
	l.mu.Lock()
	var gone []*Lease
	for le := range l.leases {
		if ended(le.ep) {
			gone = append(gone, le)
		}
	}
	l.mu.Unlock()
	for _, le := range gone {
		if le.stopped() {
			continue // Release ends it
		}
		if errors.Is(le.ep.err, lock.ErrClosed) {
			if le.end(fmt.Errorf("zklock: lease %q: %w: locker closed", le.name, lock.ErrReleased)) {
				l.addCleanup(cleanup{path: le.path})
			}
			continue
		}
		le.lose(le.ep.err)
	}
}

// handleEvents acts on the events routed to held leases.
func (l *Locker) handleEvents() {
	l.wmu.Lock()
	evs := l.pending
	l.pending = nil
	type todo struct {
		le  *Lease
		typ zk.EventType
	}
	var work []todo
	for _, ev := range evs {
		if e := l.watched[ev.path]; e != nil && e.lease != nil {
			work = append(work, todo{e.lease, ev.typ})
		}
	}
	l.wmu.Unlock()
	for _, w := range work {
		if w.le.stopped() {
			continue // Release deleted it, or is about to
		}
		switch w.typ {
		case zk.EventNodeDeleted:
			w.le.lose(fmt.Errorf("%w: its znode %s was deleted", lock.ErrLost, w.le.path))
		case zk.EventNodeDataChanged:
			// The znode is still there, and the watch is spent.
			l.rearm(w.le)
		}
	}
}

// pollOwn queues the events waiting in the watch channels of held leases
// (a Locker from New: the global stream may have dropped them).
func (l *Locker) pollOwn() {
	l.wmu.Lock()
	for path, e := range l.watched {
		if e.lease == nil || e.own == nil {
			continue
		}
		select {
		case ev, ok := <-e.own:
			e.own = nil // one event per watch
			if ok {
				l.pending = append(l.pending, nodeEvent{path, ev.Type})
			}
		default:
		}
	}
	l.wmu.Unlock()
}

// rearm sets a new watch on a held lease's znode (its data changed, which
// spent the old one), and ends the lease if the znode is gone.
func (l *Locker) rearm(le *Lease) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			r, err := do(l.bg, l, le.ep, l.existsW(le.path))
			if le.stopped() || le.Err() != nil {
				return
			}
			switch {
			case err == nil && !r.ok:
				le.lose(fmt.Errorf("%w: its znode %s was deleted", lock.ErrLost, le.path))
			case err == nil:
				l.wmu.Lock()
				if e := l.watched[le.path]; e != nil {
					e.own = r.watch
				}
				l.wmu.Unlock()
			case isStop(err):
				// The epoch ended or the Locker closed: the lease loop
				// ends the lease.
			case isConnErr(err):
				if l.awaitConnected(l.bg, le.ep) == nil {
					continue
				}
			default:
				le.lose(fmt.Errorf("%w: cannot watch its znode %s: %w", lock.ErrLost, le.path, err))
			}
			return
		}
	}()
}
