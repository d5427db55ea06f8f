package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// recordWatcher keeps the table of the Locker's own lock znodes and hands
// out the watch events of the connection's global stream by path
// (docs/design/zookeeper.md, "Watches"). Its goroutine, run, ends the
// leases of ended sessions and acts on held leases' events.
type recordWatcher struct {
	conn *zk.Conn
	g    *group
	ss   *sessions
	jan  *janitor
	sig  tableSignals

	mu      sync.Mutex
	watched map[string]*watchEntry // the znodes of acquisitions and held leases, by path
	waits   waits                  // the waits of acquisitions and observations
	pending []leaseEvent           // events for held leases, for run
	arming  arming                 // held leases whose watch is not set yet
}

// tableSignals tell run, without its lock, that it has work.
type tableSignals struct {
	kick         chan struct{} // wakes run
	sessionEnded atomic.Bool   // a session ended; run has not ended its leases yet
	reconnected  atomic.Bool   // a new connection; run has not set the leases' watches again
}

// waits are the waits for watch events, by path (waitChildren, waitChange).
type waits struct {
	children map[string][]chan zk.Event
	change   map[string][]chan zk.Event
}

// arming is the held leases whose watch is not set yet, oldest first
// (armLater), and the timer for the oldest.
type arming struct {
	due   []pendingArm
	timer *time.Timer
}

func newRecordWatcher(g *group, ss *sessions, jan *janitor) *recordWatcher {
	return &recordWatcher{
		g:       g,
		ss:      ss,
		jan:     jan,
		sig:     tableSignals{kick: make(chan struct{}, 1)},
		watched: make(map[string]*watchEntry),
		waits:   waits{children: make(map[string][]chan zk.Event), change: make(map[string][]chan zk.Event)},
	}
}

// waitChildren returns a channel that gets the next change of the
// children of the znode at path, or its deletion, and the wait's stop; the
// waiter sets the watch with a plain listing. A handshake ends each wait.
func (t *recordWatcher) waitChildren(path string) (<-chan zk.Event, func()) {
	ch := make(chan zk.Event, 1)
	return ch, t.wait(t.waits.children, path, ch)
}

// waitChange is waitChildren for any change of the znode at path,
// watched with a plain exists.
func (t *recordWatcher) waitChange(path string) (<-chan zk.Event, func()) {
	ch := make(chan zk.Event, 1)
	return ch, t.wait(t.waits.change, path, ch)
}

// wantsChildren and wantsChange report whether a wait is registered.
func (t *recordWatcher) wantsChildren(path []byte) bool { return t.wants(t.waits.children, path) }

func (t *recordWatcher) wantsChange(path []byte) bool { return t.wants(t.waits.change, path) }

func (t *recordWatcher) wants(m map[string][]chan zk.Event, path []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(m[string(path)]) > 0
}

// wait registers a wait in m that hands the next event on path to ch,
// whose buffer must hold one event per wait; it returns the stop.
func (t *recordWatcher) wait(m map[string][]chan zk.Event, path string, ch chan zk.Event) func() {
	t.mu.Lock()
	m[path] = append(m[path], ch)
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if ws := slices.DeleteFunc(m[path], func(w chan zk.Event) bool { return w == ch }); len(ws) > 0 {
			m[path] = ws
		} else {
			delete(m, path)
		}
	}
}

// notifyWaitersLocked hands ev to the waits in m for path and forgets them.
func notifyWaitersLocked(m map[string][]chan zk.Event, path string, ev zk.Event) {
	for _, ch := range m[path] {
		ch <- ev // buffered, and each wait gets one event at most
	}
	delete(m, path)
}

// watchEntry is the Locker's view of one of its own lock znodes.
type watchEntry struct {
	lease   *Lease // nil until granted
	deleted bool   // a deletion event arrived before the grant
}

// leaseEvent is a watch event on a held lease's znode, for run.
type leaseEvent struct {
	le  *Lease
	typ zk.EventType
}

// track starts routing events on path, the znode of an acquisition, and
// forgets what earlier events said.
func (t *recordWatcher) track(path string) {
	t.mu.Lock()
	if e := t.watched[path]; e == nil || e.lease == nil {
		t.watched[path] = &watchEntry{}
	}
	t.mu.Unlock()
}

func (t *recordWatcher) untrack(path string) {
	t.mu.Lock()
	delete(t.watched, path)
	t.mu.Unlock()
}

// deletedBeforeGrant reports whether path's znode went before its grant.
func (t *recordWatcher) deletedBeforeGrant(path string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.watched[path]
	return e != nil && e.deleted
}

// connect ends every wait and tells run that a new connection has a
// session (keepalive's onConnect).
func (t *recordWatcher) connect() {
	t.mu.Lock()
	for _, m := range []map[string][]chan zk.Event{t.waits.children, t.waits.change} {
		for path := range m {
			notifyWaitersLocked(m, path, zk.Event{Type: zk.EventNotWatching, State: zk.StateHasSession, Path: path})
		}
	}
	t.mu.Unlock()
	t.sig.reconnected.Store(true)
	t.wake()
}

// sessionEnd tells run that a session ended (sessions' onEnd).
func (t *recordWatcher) sessionEnd() {
	t.sig.sessionEnded.Store(true)
	t.wake()
}

func (t *recordWatcher) wake() { poke(t.sig.kick) }

// hold makes le a held lease, unless its session ended or the Locker
// closed; a deletion routed before the grant ends it now. The caller
// arranges the watch (armLater).
func (t *recordWatcher) hold(le *Lease) error {
	t.mu.Lock()
	if ended(le.s) {
		t.mu.Unlock()
		return le.s.err
	}
	if t.ss.isClosed() {
		t.mu.Unlock()
		return lock.ErrClosed
	}
	e := t.watched[le.path]
	t.watched[le.path] = &watchEntry{lease: le}
	t.mu.Unlock()
	if e != nil && e.deleted {
		le.lose(znodeDeleted(le.path))
	}
	return nil
}

func (t *recordWatcher) held() []*Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	var les []*Lease
	for _, e := range t.watched {
		if e.lease != nil {
			les = append(les, e.lease)
		}
	}
	return les
}

// ownWatchDelay is how long after a grant the watch on the lease's znode
// is set, so that a short critical section costs no watch event.
const ownWatchDelay = 50 * time.Millisecond

// route handles one event of the connection's global stream. It runs on
// go-zookeeper's reading goroutine, so it only records and wakes.
func (t *recordWatcher) route(ev zk.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case zk.EventNodeChildrenChanged:
		notifyWaitersLocked(t.waits.children, ev.Path, ev)
		return
	case zk.EventNodeCreated:
		notifyWaitersLocked(t.waits.change, ev.Path, ev)
		return
	case zk.EventNodeDeleted:
		notifyWaitersLocked(t.waits.children, ev.Path, ev)
		notifyWaitersLocked(t.waits.change, ev.Path, ev)
	case zk.EventNodeDataChanged:
		notifyWaitersLocked(t.waits.change, ev.Path, ev)
	default:
		return
	}
	switch e := t.watched[ev.Path]; {
	case e == nil:
	case e.lease == nil:
		// Not granted: hold acts on a deletion; the later watch covers data.
		e.deleted = e.deleted || ev.Type == zk.EventNodeDeleted
	default:
		t.pending = append(t.pending, leaseEvent{e.lease, ev.Type})
		t.wake()
	}
}

// run ends the leases of ended sessions and acts on the events routed to
// held leases; at Close it ends every lease left.
func (t *recordWatcher) run() {
	for {
		select {
		case <-t.g.closing:
			t.endSessionLeases()
			t.mu.Lock()
			if t.arming.timer != nil {
				t.arming.timer.Stop()
			}
			t.arming.due = nil
			t.mu.Unlock()
			return
		case <-t.sig.kick:
		}
		if t.sig.sessionEnded.Swap(false) {
			t.endSessionLeases()
		}
		if t.sig.reconnected.Swap(false) {
			t.rearmAll()
		}
		t.handleEvents()
		t.armDue()
	}
}

// armLater has run set the watch on le's znode ownWatchDelay from now; the
// leases are due in grant order, so one timer serves them all.
func (t *recordWatcher) armLater(le *Lease) {
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

// armDue sets the watches due on leases still held, and the next timer.
func (t *recordWatcher) armDue() {
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
			t.g.spawn(func() { t.arm(le) })
			if le.byMark {
				t.g.spawn(le.checkMark)
			}
		}
	}
}

func (t *recordWatcher) endSessionLeases() {
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

func (t *recordWatcher) handleEvents() {
	t.mu.Lock()
	evs := t.pending
	t.pending = nil
	t.mu.Unlock()
	for _, ev := range evs {
		if ev.le.stopped() || ev.le.endErr() != nil {
			continue // Release deleted it, or is about to; or it ended
		}
		switch ev.typ {
		case zk.EventNodeDeleted:
			ev.le.lose(znodeDeleted(ev.le.path))
		case zk.EventNodeDataChanged:
			// The znode is still there, and the watch is spent.
			t.g.spawn(func() { t.arm(ev.le) })
		}
	}
}

// arm watches a held lease's znode for deletion, ending the lease if gone.
func (t *recordWatcher) arm(le *Lease) {
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

// rearmAll sets the watches of the held leases again after a new
// connection (go-zookeeper does not).
func (t *recordWatcher) rearmAll() {
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

// wait waits for a change of the records d watches, and returns granted
// (admitted with no listing) or not (look again).
func (a *acquisition) wait(ctx context.Context, d decision) (decision, error) {
	if !d.touchWakes && a.byMark(d) {
		return a.waitFor(ctx, d.q[d.watched[0]], d.watched[0] == 0)
	}
	fired, err := a.watch(ctx, d)
	if err != nil || fired == 0 {
		return decision{}, err
	}
	if fired == zk.EventNodeDataChanged && d.touchWakes {
		// The predecessor's touch: the listing goes with one (see look).
		a.touches.speculate = true
	}
	return decision{}, nil
}

// watch sets a watch on each record d watches and waits for one to fire.
// It returns the type of the event, or 0: look again.
func (a *acquisition) watch(ctx context.Context, d decision) (zk.EventType, error) {
	fired := make(chan zk.Event, len(d.watched))
	futures := make([]*future[exists], len(d.watched))
	for n, j := range d.watched {
		read, stop := a.l.watch.reader(a.parent+"/"+d.q[j], d.touchWakes, fired)
		defer stop()
		futures[n] = start(a.l.g, read, nil)
	}
	for n, f := range futures {
		e, err := f.wait(ctx, a.l.g, a.s)
		if err != nil {
			for _, f := range futures[n+1:] {
				f.abandon()
			}
			return 0, a.retry(ctx, err)
		}
		if !e.ok || d.touchWakes && a.touchMissed(d.q[d.watched[0]], e.stat.Version) {
			return 0, nil // gone already, or touched unseen
		}
	}
	return a.await(ctx, fired)
}

// touchMissed reports whether the predecessor pred, at data version v
// when its watch was set, may have been touched before the watch: a
// version not yet looked at says look again.
func (a *acquisition) touchMissed(pred string, v int32) bool {
	seen := fmt.Sprintf("%s@%d", pred, v)
	if v == 0 || seen == a.touches.seen {
		return false
	}
	a.touches.seen = seen
	return true
}

// reader returns a read of the record at path that sets a watch sending ch
// its deletion or, with change, any change; and the wait's stop.
func (t *recordWatcher) reader(path string, change bool, ch chan zk.Event) (func() (exists, error), func()) {
	read, m := deletionW(t.conn, path), t.waits.children
	if change {
		read, m = statOf(t.conn, path), t.waits.change
	}
	return read, t.wait(m, path, ch)
}

// byMark reports whether d's waiter may wait for the release mark of the
// one record it watches (waitFor): an exclusive request whose release as
// a holder admits it, and no lock-delay.
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

// waitFor grants the acquisition without another request on pred's release
// mark (byMark), or on any going of pred when it headed the listing (head)
// (docs/design/zookeeper.md, "Acquisition" and "Layouts").
func (a *acquisition) waitFor(ctx context.Context, pred string, head bool) (decision, error) {
	fired := make(chan zk.Event, 1)
	read, stop := a.l.watch.reader(a.parent+"/"+pred, true, fired)
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
	case p.stat.Version != 0: // someone set its data: a mark would not show
		a.fast.noMark = true
		return decision{}, nil
	}
	ev, err := a.await(ctx, fired)
	if err != nil {
		return decision{}, err
	}
	switch {
	case ev == zk.EventNodeDataChanged && pred[0] == marker, ev == zk.EventNodeDeleted && head:
		return a.unlisted()
	default:
		return decision{}, nil // look again
	}
}

// unlisted admits the acquisition on its predecessor's going, seen
// without a listing (waitFor); Lease.checkMark lists once later.
func (a *acquisition) unlisted() (decision, error) {
	if a.l.watch.deletedBeforeGrant(a.z.path) {
		return decision{}, a.deleted()
	}
	a.fast.marked = true
	return decision{granted: true}, nil
}

// await waits for a watch to fire and returns the type of its event.
func (a *acquisition) await(ctx context.Context, fired <-chan zk.Event) (zk.EventType, error) {
	select {
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-a.s.done:
		return 0, a.s.err
	case <-a.l.g.closing:
		return 0, lock.ErrClosed
	case ev := <-fired:
		return ev.Type, nil
	}
}
