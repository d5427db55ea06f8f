package zklock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lock"
)

// TestRecordWatcher drives the record watcher by hand (no connection, its
// goroutine not started): events before the grant are kept for it, events
// for held leases are routed, and leases end with their session.
func TestRecordWatcher(t *testing.T) {
	o, err := buildOptions([]Option{WithSessionTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(o)
	tab := l.watch
	s := &session{id: 1, done: make(chan struct{})}
	n := 0
	newLease := func() *Lease {
		n++
		return &Lease{l: l, s: s, path: fmt.Sprintf("%s/~%d", l.parent("x"), n), czxid: int64(n)}
	}
	deleted := func(path string) zk.Event { return zk.Event{Type: zk.EventNodeDeleted, Path: path} }
	wantEnd := func(le *Lease, sentinel error, text string) {
		t.Helper()
		select {
		case <-le.Done():
		default:
			t.Fatalf("lease %s still held; want it ended (%v)", le.path, sentinel)
		}
		if err := le.Err(); !errors.Is(err, sentinel) || !strings.Contains(err.Error(), text) {
			t.Errorf("lease %s: Err() = %v; want an error wrapping %v containing %q", le.path, err, sentinel, text)
		}
		if tab.held() != nil && containsLease(tab.held(), le) {
			t.Errorf("lease %s still in the table after it ended", le.path)
		}
	}

	// A deletion between the watch and the grant is acted on at the grant.
	early := newLease()
	tab.track(early.path)
	tab.route(zk.Event{Type: zk.EventSession, Path: early.path}) // not a node event: ignored
	tab.route(deleted("/elsewhere"))                             // not ours: ignored
	tab.route(deleted(early.path))
	if err := tab.hold(early); err != nil {
		t.Fatalf("hold() = %v", err)
	}
	wantEnd(early, lock.ErrLost, "was deleted")

	// A re-listing forgets what the earlier watch said.
	relisted := newLease()
	tab.track(relisted.path)
	tab.route(deleted(relisted.path))
	tab.track(relisted.path)
	if err := tab.hold(relisted); err != nil {
		t.Fatalf("hold() = %v", err)
	}
	if relisted.endErr() != nil {
		t.Fatalf("a forgotten event ended the lease: %v", relisted.endErr())
	}

	// A deletion of a held lease's znode is routed to it.
	tab.route(deleted(relisted.path))
	tab.handleEvents()
	wantEnd(relisted, lock.ErrLost, "was deleted")

	// A lease that Release has taken over is left to Release.
	releasing := newLease()
	tab.track(releasing.path)
	if err := tab.hold(releasing); err != nil {
		t.Fatalf("hold() = %v", err)
	}
	releasing.st.BeginRelease()
	tab.route(deleted(releasing.path))
	tab.handleEvents()
	if releasing.endErr() != nil {
		t.Errorf("an event ended a lease being released: %v", releasing.endErr())
	}

	// The end of the session ends its leases as lost; no lease is granted
	// in an ended session.
	held := newLease()
	tab.track(held.path)
	if err := tab.hold(held); err != nil {
		t.Fatalf("hold() = %v", err)
	}
	s.err = fmt.Errorf("%w: session 0x1 expired", lock.ErrLost)
	close(s.done)
	tab.sessionEnd()
	if !tab.sig.sessionEnded.Swap(false) {
		t.Fatal("sessionEnd did not raise the flag")
	}
	tab.endSessionLeases()
	wantEnd(held, lock.ErrLost, "session 0x1 expired")
	if err := tab.hold(newLease()); !errors.Is(err, lock.ErrLost) {
		t.Errorf("hold() in an ended session = %v; want its error", err)
	}

	// Close ends the leases of its session as released.
	s = &session{id: 2, done: make(chan struct{})}
	closed := newLease()
	tab.track(closed.path)
	if err := tab.hold(closed); err != nil {
		t.Fatalf("hold() = %v", err)
	}
	l.ss.cur = s
	l.ss.close()
	tab.endSessionLeases()
	wantEnd(closed, lock.ErrReleased, "locker closed")
	if err := tab.hold(newLease()); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("hold() after Close = %v; want lock.ErrClosed", err)
	}
	if got := len(l.jan.pending); got != 4 {
		t.Errorf("%d znodes queued for the janitor; want 4 (three lost leases, one closed)", got)
	}
}

func containsLease(les []*Lease, le *Lease) bool {
	for _, x := range les {
		if x == le {
			return true
		}
	}
	return false
}

// dialTable returns the record watcher of a Locker, without its
// connection and goroutines.
func dialTable(t *testing.T) *recordWatcher {
	t.Helper()
	o, err := buildOptions([]Option{WithSessionTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	return newLocker(o).watch
}

// pending returns the event waiting in ch, if there is one.
func pending(ch <-chan zk.Event) (zk.Event, bool) {
	select {
	case ev := <-ch:
		return ev, true
	default:
		return zk.Event{}, false
	}
}

// TestWaitLockZnode checks the waits of a Locker for a lock znode's
// deletion: the event reaches every wait for its path and no other, a
// wait gets one event, a stopped wait gets none, and a handshake ends
// every wait (the server dropped their watches with the connection).
func TestWaitLockZnode(t *testing.T) {
	tab := dialTable(t)
	got := pending

	a1, stopA1 := tab.waitChildren("/l/x/~a")
	a2, _ := tab.waitChildren("/l/x/~a")
	b, stopB := tab.waitChildren("/l/x/~b")
	stopped, stop := tab.waitChildren("/l/x/~a")
	stop()
	tab.route(zk.Event{Type: zk.EventNodeDataChanged, Path: "/l/x/~a"}) // not a deletion: not for the waits
	if _, ok := got(a1); ok {
		t.Fatal("a data change reached a wait for the deletion")
	}
	tab.route(zk.Event{Type: zk.EventNodeDeleted, Path: "/l/x/~a"})
	for i, ch := range []<-chan zk.Event{a1, a2} {
		if ev, ok := got(ch); !ok || ev.Type != zk.EventNodeDeleted || ev.Path != "/l/x/~a" {
			t.Errorf("wait %d for /l/x/~a got %+v, %v; want its deletion", i, ev, ok)
		}
	}
	if ev, ok := got(stopped); ok {
		t.Errorf("a stopped wait got %+v", ev)
	}
	if ev, ok := got(b); ok {
		t.Errorf("the wait for /l/x/~b got %+v; want nothing yet", ev)
	}
	stopA1() // after its event: nothing to do
	tab.route(zk.Event{Type: zk.EventNodeDeleted, Path: "/l/x/~a"})
	if ev, ok := got(a2); ok {
		t.Errorf("a wait got a second event %+v", ev)
	}

	tab.connect()
	if ev, ok := got(b); !ok || ev.Type != zk.EventNotWatching {
		t.Errorf("the wait for /l/x/~b after a handshake got %+v, %v; want EventNotWatching", ev, ok)
	}
	stopB()
	tab.mu.Lock()
	left := len(tab.waits.children)
	tab.mu.Unlock()
	if left != 0 {
		t.Errorf("%d paths still have waits; want none", left)
	}
}

// TestWaitChange checks the waits of a Locker for a znode's
// change (a release mark's data change, or its deletion): both reach the
// waits for the path, a child change does not, and a handshake ends every
// wait; while a wait is registered, the exists requests for its path go
// with the watch flag, and no others do.
func TestWaitChange(t *testing.T) {
	tab := dialTable(t)
	got := pending
	const p = "/l/x/~a"
	if tab.wantsChange([]byte(p)) {
		t.Fatal("wantsChange before any wait = true")
	}
	del, stopDel := tab.waitChildren(p)
	defer stopDel()
	ch, stop := tab.waitChange(p)
	if !tab.wantsChange([]byte(p)) || tab.wantsChange([]byte("/l/x/~b")) {
		t.Fatal("wantsChange is not true for the waited path alone")
	}
	tab.route(zk.Event{Type: zk.EventNodeChildrenChanged, Path: p})
	if ev, ok := got(ch); ok {
		t.Fatalf("a child change reached the wait for a change: %+v", ev)
	}
	<-del // a child change is for the deletion waits, as before
	tab.route(zk.Event{Type: zk.EventNodeDataChanged, Path: p})
	if ev, ok := got(ch); !ok || ev.Type != zk.EventNodeDataChanged {
		t.Fatalf("the wait for a change got %+v, %v; want the data change", ev, ok)
	}
	stop()
	if tab.wantsChange([]byte(p)) {
		t.Fatal("wantsChange after the wait stopped = true")
	}

	ch2, stop2 := tab.waitChange(p)
	defer stop2()
	tab.route(zk.Event{Type: zk.EventNodeDeleted, Path: p})
	if ev, ok := got(ch2); !ok || ev.Type != zk.EventNodeDeleted {
		t.Fatalf("the wait for a change got %+v, %v; want the deletion", ev, ok)
	}
	ch3, _ := tab.waitChange(p)
	tab.connect()
	if ev, ok := got(ch3); !ok || ev.Type != zk.EventNotWatching {
		t.Fatalf("the wait for a change after a handshake got %+v, %v; want EventNotWatching", ev, ok)
	}

	// The connection wrapper asks the table about plain exists requests.
	ka := &keepalive{clk: clock.NewFake(epoch0), wantsChange: tab.wantsChange}
	c := &trackedConn{Conn: &scriptConn{}, ka: ka, requestSent: true}
	exists := func(path string, flag byte) []byte {
		b := []byte{0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, opExists, 0, 0, 0, byte(len(path))}
		b = append(append(b, path...), flag)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	if c.watchFlag(exists(p, 0)) {
		t.Fatal("watchFlag(exists) with no wait = true")
	}
	_, stop4 := tab.waitChange(p)
	defer stop4()
	if !c.watchFlag(exists(p, 0)) {
		t.Fatal("watchFlag(exists of a waited path) = false")
	}
	if c.watchFlag(exists(p, 1)) || c.watchFlag(exists("/l/x/~b", 0)) {
		t.Fatal("watchFlag is true for an exists with the flag set, or of another path")
	}
}

// TestWaitChildren checks the waits of an observation of a lock's parent:
// a child change or the parent's deletion reaches them, a data change
// does not; a plain listing of the parent gets the watch flag only while
// such a wait is registered; and a creation reaches the waits for a
// change (an exists of a parent that did not exist).
func TestWaitChildren(t *testing.T) {
	tab := dialTable(t)
	got := pending
	const parent = "/l/x"
	ka := &keepalive{clk: clock.NewFake(epoch0), wantsChange: tab.wantsChange, wantsChildren: tab.wantsChildren}
	c := &trackedConn{Conn: &scriptConn{}, ka: ka, requestSent: true}
	listing := func(path string) []byte {
		b := []byte{0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, opGetChildren2, 0, 0, 0, byte(len(path))}
		b = append(append(b, path...), 0)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	if c.watchFlag(listing(parent)) {
		t.Fatal("watchFlag(listing of a parent) with no wait = true")
	}
	if !c.watchFlag(listing(parent + "/~f49b8ff2e076534c15939de60ef2a558~0000000000")) {
		t.Fatal("watchFlag(listing of a lock znode) = false")
	}
	ch, stop := tab.waitChildren(parent)
	if !c.watchFlag(listing(parent)) || c.watchFlag(listing("/l/y")) {
		t.Fatal("watchFlag is not true for the listing of the waited parent alone")
	}
	tab.route(zk.Event{Type: zk.EventNodeDataChanged, Path: parent})
	if ev, ok := got(ch); ok {
		t.Fatalf("a data change reached the wait for children: %+v", ev)
	}
	tab.route(zk.Event{Type: zk.EventNodeChildrenChanged, Path: parent})
	if ev, ok := got(ch); !ok || ev.Type != zk.EventNodeChildrenChanged {
		t.Fatalf("the wait for children got %+v, %v; want the child change", ev, ok)
	}
	stop()
	if c.watchFlag(listing(parent)) {
		t.Fatal("watchFlag(listing of the parent) after the wait stopped = true")
	}
	ch2, stop2 := tab.waitChildren(parent)
	defer stop2()
	tab.route(zk.Event{Type: zk.EventNodeDeleted, Path: parent})
	if ev, ok := got(ch2); !ok || ev.Type != zk.EventNodeDeleted {
		t.Fatalf("the wait for children got %+v, %v; want the deletion", ev, ok)
	}

	created, stop3 := tab.waitChange(parent)
	defer stop3()
	tab.route(zk.Event{Type: zk.EventNodeCreated, Path: parent})
	if ev, ok := got(created); !ok || ev.Type != zk.EventNodeCreated {
		t.Fatalf("the wait for a change got %+v, %v; want the creation", ev, ok)
	}
}
