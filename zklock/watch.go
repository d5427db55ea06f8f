package zklock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// One goroutine of the Locker, the lease table's run, ends the leases of
// ended sessions and acts on the watch events that route takes from the
// connection's global event stream, by path; a deletion reported before
// a grant is kept in the table's entry and acted on at the grant. See
// docs/design/zookeeper.md, "Watches".

// ownWatchDelay is how long after a grant the watch on the lease's own
// znode is set, so that a short critical section costs no watch event for
// its own release; setting the watch reads the znode.
const ownWatchDelay = 50 * time.Millisecond

// route handles one event of the connection's global stream. It runs on
// go-zookeeper's reading goroutine, so it only records and wakes.
func (t *leaseTable) route(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeDeleted, zk.EventNodeChildrenChanged, zk.EventNodeDataChanged, zk.EventNodeCreated:
		t.mu.Lock()
		if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeChildrenChanged {
			notifyWaitersLocked(t.waits.deletion, ev.Path, ev)
		}
		if ev.Type != zk.EventNodeChildrenChanged {
			notifyWaitersLocked(t.waits.change, ev.Path, ev)
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
	for {
		closing := false
		select {
		case <-t.g.closing:
			closing = true
		case <-t.sig.kick:
		}
		if t.sig.sessionEnded.Swap(false) || closing {
			t.endSessionLeases()
		}
		if t.sig.reconnected.Swap(false) && !closing {
			t.rearmAll()
		}
		if closing {
			t.mu.Lock()
			if t.arming.timer != nil {
				t.arming.timer.Stop()
			}
			clear(t.arming.due)
			t.arming.due = nil
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
	t.arming.due = append(t.arming.due, pendingArm{le, due})
	if len(t.arming.due) == 1 {
		if t.arming.timer == nil {
			t.arming.timer = time.AfterFunc(ownWatchDelay, t.wake)
		} else {
			t.arming.timer.Reset(ownWatchDelay)
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
	for n < len(t.arming.due) && !t.arming.due[n].due.After(now) {
		n++
	}
	var les []*Lease
	for _, p := range t.arming.due[:n] {
		if !p.le.stopped() {
			les = append(les, p.le)
		}
	}
	clear(t.arming.due[:n])
	t.arming.due = t.arming.due[n:]
	if len(t.arming.due) > 0 {
		t.arming.timer.Reset(t.arming.due[0].due.Sub(now))
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

// rearm sets a new deletion watch on a held lease's znode, and ends the
// lease if the znode is gone. It also runs when a data change event for
// the znode arrives from another watch on the same connection.
func (t *leaseTable) rearm(le *Lease) {
	t.g.spawn(func() { t.arm(le) })
}

// arm is rearm on the caller's goroutine.
func (t *leaseTable) arm(le *Lease) {
	for {
		r, err := call(t.g.bg, t.g, le.s, deletionW(t.conn, le.path))
		if le.stopped() || le.endErr() != nil {
			return
		}
		switch {
		case err == nil && !r.ok:
			le.lose(znodeDeleted(le.path))
		case err == nil:
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

// rearmAll sets again the watches of the held leases after a new
// connection, which go-zookeeper does not do for them; a
// znode deleted meanwhile is found missing, and its lease ends.
func (t *leaseTable) rearmAll() {
	les := t.held()
	t.mu.Lock()
	due := make(map[*Lease]bool, len(t.arming.due))
	for _, p := range t.arming.due {
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

// wait waits for a change of the records d says the acquisition waits
// for, and returns what it shows: granted (a shortcut: admitted with no
// listing), or not (look again).
func (a *acquisition) wait(ctx context.Context, d decision) (decision, error) {
	if !d.touchWakes && a.byMark(d) {
		return a.waitFor(ctx, d.q[d.watched[0]], d.watched[0] == 0)
	}
	fired, err := a.watch(ctx, d)
	if err != nil || fired == 0 {
		return decision{}, err
	}
	i := len(d.reqs) - 1
	switch {
	case fired == zk.EventNodeDataChanged && d.touchWakes:
		// The predecessor's touch: the next listing goes with a touch of
		// this acquisition's own (see look).
		a.touches.speculate = true
		return decision{}, nil
	case fired != zk.EventNodeDeleted || a.l.o.LockDelay > 0:
		// Look again. With a lock-delay the grant needs a listing made
		// after the holder went, which shows whether it left a marker
		// (see delay).
		return decision{}, nil
	case len(d.watched) == 1 && a.req.Kind != queue.Permit && queue.AdmittedWithout(d.reqs, i, d.watched[0]):
		// The one record ahead that kept this request waiting went, and
		// none can have joined ahead of it: admitted if its own znode is
		// still there, which a read of the znode alone confirms (a lock's
		// or reader's waiter touches nothing).
		return a.confirm(ctx)
	case queue.AdmittedByDeletion(d.reqs, i):
		// A holder went: admitted. The touch confirms the znode as the
		// listing would, and wakes the waiter behind it sooner; with
		// nobody behind it, it wakes nobody.
		return decision{granted: true, touch: true}, nil
	}
	return decision{}, nil
}

// watch sets a watch on each record d says the acquisition waits for, and
// waits for one of them to fire. It returns the type of the event, or 0:
// look again (a record went before its watch was set, or may have been
// touched unseen).
func (a *acquisition) watch(ctx context.Context, d decision) (zk.EventType, error) {
	futures := make([]*future[exists], len(d.watched))
	for n, j := range d.watched {
		read, stop := a.l.tab.watch(a.parent+"/"+d.q[j], d.touchWakes)
		defer stop()
		futures[n] = start(a.l.g, read, nil)
	}
	chans := make([]<-chan zk.Event, 0, len(futures))
	for n, f := range futures {
		e, err := f.wait(ctx, a.l.g, a.s)
		if err != nil {
			for _, f := range futures[n+1:] {
				f.abandon()
			}
			return 0, a.retry(ctx, err)
		}
		if !e.ok {
			// Gone already: look again (the watches set meanwhile fire
			// later, unread, and cost nothing).
			continue
		}
		if d.touchWakes && a.touchMissed(d.q[d.watched[0]], e.stat.Version) {
			return 0, nil
		}
		chans = append(chans, e.watch)
	}
	if len(chans) < len(d.watched) {
		return 0, nil
	}
	return a.await(ctx, chans)
}

// touchMissed reports whether the predecessor pred, at data version v
// when its watch was set, may have been admitted and touched between the
// listing and the watch, which then missed the touch. Lock znodes keep
// data version 0 unless touched: a version not yet looked at says look
// again.
func (a *acquisition) touchMissed(pred string, v int32) bool {
	seen := fmt.Sprintf("%s@%d", pred, v)
	if v == 0 || seen == a.touches.seen {
		return false
	}
	a.touches.seen = seen
	return true
}

// watch returns a read of the record at path that sets a watch firing
// on its deletion or, with change, on any change of it (a touch waiter's:
// see queue.WaitsForTouch). The read's result carries the channel the
// table hands the event to (see waitDeletion and waitChange); stop
// forgets the wait.
func (t *leaseTable) watch(path string, change bool) (func() (exists, error), func()) {
	read, wait := deletionW(t.conn, path), t.waitDeletion
	if change {
		read, wait = statOf(t.conn, path), t.waitChange
	}
	ch, stop := wait(path)
	return func() (exists, error) {
		e, err := read()
		e.watch = ch
		return e, err
	}, stop
}

// byMark reports whether the waiting request of d may wait for the release
// mark of the one record it watches (see waitFor): the Locker has no
// lock-delay, and that record is an exclusive request whose release as a
// holder admits this one.
func (a *acquisition) byMark(d decision) bool {
	if a.fast.noMark || a.l.o.LockDelay > 0 || len(d.watched) != 1 {
		return false
	}
	j := d.watched[0]
	if d.reqs[j].Kind != queue.Exclusive || a.req.Kind == queue.Permit {
		return false
	}
	rest := d.reqs[j+1:]
	return queue.Admitted(rest, len(rest)-1)
}

// waitFor waits for the release of the exclusive record pred, which admits
// this request (byMark), and grants it without another request: on the
// release mark (a data change), or on any going of pred when it headed the
// listing (head). A lease so granted is checked by a listing if still held
// ownWatchDelay later (Lease.checkMark). See docs/design/zookeeper.md,
// "Acquisition".
func (a *acquisition) waitFor(ctx context.Context, pred string, head bool) (decision, error) {
	// The exists goes with the watch flag because the wait is registered
	// (keepalive.wantsChange).
	read, stop := a.l.tab.watch(a.parent+"/"+pred, true)
	defer stop()
	p, err := call(ctx, a.l.g, a.s, read)
	if err != nil {
		return decision{}, a.retry(ctx, err)
	}
	switch {
	case !p.ok && head:
		return a.unlisted()
	case !p.ok:
		return decision{}, nil // gone already: look again
	case p.stat.Version != 0:
		// Someone set its data, which no lock of this package does but
		// its release: a mark could not be told from that.
		a.fast.noMark = true
		return decision{}, nil
	}
	fired, err := a.await(ctx, []<-chan zk.Event{p.watch})
	if err != nil {
		return decision{}, err
	}
	switch {
	case fired == zk.EventNodeDataChanged, fired == zk.EventNodeDeleted && head:
		return a.unlisted()
	default:
		// Deleted otherwise, or the connection changed: look again.
		return decision{}, nil
	}
}

// unlisted admits the acquisition on its predecessor's going, seen
// without a listing (see waitFor); the lease is checked once if it is
// still held ownWatchDelay after the grant.
func (a *acquisition) unlisted() (decision, error) {
	if a.l.tab.deletedBeforeGrant(a.z.path) {
		return decision{}, a.deleted()
	}
	a.fast.marked = true
	return decision{granted: true}, nil
}

// confirm admits the acquisition if its znode is still the one it
// created. The read is served by the server that reported the admitting
// deletion, so it sees that state or a later one. A failed read that can
// be sent again leaves the decision to the next listing.
func (a *acquisition) confirm(ctx context.Context) (decision, error) {
	e, err := call(ctx, a.l.g, a.s, statOf(a.l.conn, a.z.path))
	switch {
	case err != nil:
		return decision{}, a.retry(ctx, err)
	case !e.ok || e.stat.Czxid != a.z.czxid:
		return decision{}, a.deleted()
	}
	return decision{granted: true}, nil
}

// await waits for one of watched, the watches on the records this
// acquisition waits for, to fire, and returns the type of its event (0 if
// something else ended the wait).
func (a *acquisition) await(ctx context.Context, watched []<-chan zk.Event) (fired zk.EventType, err error) {
	if len(watched) == 1 {
		// A lock's or read-write lock's waiter, and most permit waiters:
		// no reflection.
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-a.s.done:
			return 0, a.s.err
		case <-a.l.g.closing:
			return 0, lock.ErrClosed
		case ev := <-watched[0]:
			return ev.Type, nil
		}
	}
	const doneCase, sessionCase, closingCase = 0, 1, 2
	cases := []reflect.SelectCase{
		doneCase:    {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		sessionCase: {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.s.done)},
		closingCase: {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.l.g.closing)},
	}
	for _, w := range watched {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	chosen, v, _ := reflect.Select(cases)
	switch chosen {
	case doneCase:
		return 0, context.Cause(ctx)
	case sessionCase:
		return 0, a.s.err
	case closingCase:
		return 0, lock.ErrClosed
	}
	ev, _ := v.Interface().(zk.Event)
	return ev.Type, nil
}
