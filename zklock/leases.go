package zklock

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// leaseTable is the table of the Locker's own lock znodes: those of
// acquisitions in progress and of held leases. Its goroutine, run (in
// watch.go), ends the leases of ended sessions and acts on the watch
// events routed to held leases; everyone else only records and wakes.
type leaseTable struct {
	conn *zk.Conn
	g    *group
	ss   *sessions
	jan  *janitor
	sig  tableSignals

	mu      sync.Mutex
	watched map[string]*watchEntry // the znodes of acquisitions and held leases, by path
	waits   waits                  // the waits of acquisitions and observations
	pending []nodeEvent            // events for held leases, for run
	arming  arming                 // held leases whose watch is not set yet
}

// tableSignals are how others tell the lease table's run, without its
// lock, that it has work.
type tableSignals struct {
	kick         chan struct{} // wakes run
	sessionEnded atomic.Bool   // a session ended; run has not ended its leases yet
	reconnected  atomic.Bool   // a new connection; run has not set the leases' watches again
}

// waits are the waits for watch events, by path:
// for a znode's deletion or the change of its children (waitDeletion,
// waitChildren), and for any change of the znode (waitChange).
type waits struct {
	deletion map[string][]chan zk.Event
	change   map[string][]chan zk.Event
}

// arming is the held leases whose watch is not set yet, oldest first
// (armLater), and the timer that fires when the oldest is due (nil until
// the first grant).
type arming struct {
	due   []pendingArm
	timer *time.Timer
}

func newLeaseTable(g *group, ss *sessions, jan *janitor) *leaseTable {
	return &leaseTable{
		g:       g,
		ss:      ss,
		jan:     jan,
		sig:     tableSignals{kick: make(chan struct{}, 1)},
		watched: make(map[string]*watchEntry),
		waits:   waits{deletion: make(map[string][]chan zk.Event), change: make(map[string][]chan zk.Event)},
	}
}

// waitDeletion returns a channel that gets the next watch event on path,
// for a waiter that sets the watch with a plain listing (see
// isDeletionWatch). Every handshake ends each wait with an
// EventNotWatching, so that the waiter watches anew. stop forgets the
// wait; calling it after the event came does nothing.
func (t *leaseTable) waitDeletion(path string) (<-chan zk.Event, func()) {
	return t.wait(t.waits.deletion, path)
}

// waitChange is waitDeletion for the next change of the znode at path,
// its data or its deletion (or its creation, for a znode that did not
// exist): the waiter sets the watch with a plain exists of the znode,
// which the connection wrapper sends with the watch flag because the wait
// is registered (wantsChange).
func (t *leaseTable) waitChange(path string) (<-chan zk.Event, func()) {
	return t.wait(t.waits.change, path)
}

// waitChildren is waitDeletion for the next change of the children of the
// znode at path (or its deletion): the waiter sets the watch with a plain
// listing of the znode, which the connection wrapper sends with the watch
// flag because the wait is registered (wantsChildren). A child watch
// fires for both, so these waits share the map of waitDeletion.
func (t *leaseTable) waitChildren(path string) (<-chan zk.Event, func()) {
	return t.wait(t.waits.deletion, path)
}

// wantsChildren reports whether a wait for the children of the znode at
// path is registered (keepalive.wantsChildren).
func (t *leaseTable) wantsChildren(path []byte) bool { return t.wants(t.waits.deletion, path) }

// wantsChange reports whether a wait for the change of the znode at path
// is registered (keepalive.wantsChange).
func (t *leaseTable) wantsChange(path []byte) bool { return t.wants(t.waits.change, path) }

// wants reports whether a wait in m for the znode at path is registered.
func (t *leaseTable) wants(m map[string][]chan zk.Event, path []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(m[string(path)]) > 0
}

func (t *leaseTable) wait(m map[string][]chan zk.Event, path string) (<-chan zk.Event, func()) {
	ch := make(chan zk.Event, 1)
	t.mu.Lock()
	m[path] = append(m[path], ch)
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		ws := m[path]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(m, path)
		} else {
			m[path] = ws
		}
	}
}

// notifyWaitersLocked hands ev to every wait in m for path, and forgets
// them.
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

// nodeEvent is a watch event on a held lease's znode, for run.
type nodeEvent struct {
	path string
	typ  zk.EventType
}

// track starts routing events on path, the znode of an acquisition, before
// its first watch is set. It also forgets what earlier events said, for a
// new watch.
func (t *leaseTable) track(path string) {
	t.mu.Lock()
	if e := t.watched[path]; e != nil && e.lease == nil {
		e.deleted = false
	} else if e == nil {
		t.watched[path] = &watchEntry{}
	}
	t.mu.Unlock()
}

// untrack stops routing events on path.
func (t *leaseTable) untrack(path string) {
	t.mu.Lock()
	delete(t.watched, path)
	t.mu.Unlock()
}

// deletedBeforeGrant reports whether a deletion of the tracked znode at
// path was routed before its grant.
func (t *leaseTable) deletedBeforeGrant(path string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.watched[path]
	return e != nil && e.deleted
}

// connect tells run that a new connection has a session (keepalive's
// onConnect).
func (t *leaseTable) connect() {
	t.mu.Lock()
	for _, m := range []map[string][]chan zk.Event{t.waits.deletion, t.waits.change} {
		for path := range m {
			notifyWaitersLocked(m, path, zk.Event{Type: zk.EventNotWatching, State: zk.StateHasSession, Path: path})
		}
	}
	t.mu.Unlock()
	t.sig.reconnected.Store(true)
	t.wake()
}

// sessionEnd tells run that a session ended (sessions' onEnd).
func (t *leaseTable) sessionEnd() {
	t.sig.sessionEnded.Store(true)
	t.wake()
}

func (t *leaseTable) wake() {
	select {
	case t.sig.kick <- struct{}{}:
	default:
	}
}

// hold makes le a held lease, unless its session ended or the Locker
// closed: it starts following le's session and le's znode. The watch on
// the znode is the caller's to arrange (armLater); a deletion routed
// before that, since the acquisition's last listing, ends the lease now.
func (t *leaseTable) hold(le *Lease) error {
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
	if e == nil { // not tracked: cannot happen, but armLater still watches it
		e = &watchEntry{}
		t.watched[le.path] = e
	}
	e.lease = le
	deleted := e.deleted
	e.deleted = false
	t.mu.Unlock()
	if deleted {
		le.lose(znodeDeleted(le.path))
	}
	return nil
}

// held returns the held leases.
func (t *leaseTable) held() []*Lease {
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
