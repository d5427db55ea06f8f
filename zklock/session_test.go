package zklock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lock"
)

// fakeLink is a connection state that a test sets.
type fakeLink struct {
	mu    sync.Mutex
	state zk.State
	id    int64
	looks int // calls of State
}

func (f *fakeLink) State() zk.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.looks++
	return f.state
}

func (f *fakeLink) lookCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.looks
}

func (f *fakeLink) SessionID() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.id
}

func (f *fakeLink) set(state zk.State, id int64) {
	f.mu.Lock()
	f.state, f.id = state, id
	f.mu.Unlock()
}

var epoch0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestSessions returns sessions on a fake link and a fake clock, with
// the session timeout given and the loss margin given (0: the default).
func newTestSessions(given, margin time.Duration) (*sessions, *fakeLink, *clock.Fake, *keepalive) {
	clk := clock.NewFake(epoch0)
	o := &options{sessionTimeout: given, clock: clk}
	o.LossMargin = margin
	o.Logger = slog.New(slog.DiscardHandler)
	ka := &keepalive{clk: clk}
	ss := newSessions(clk, ka, o, make(chan struct{}))
	link := &fakeLink{}
	ss.conn = link
	return ss, link, clk, ka
}

// handshake makes ka record a handshake sent at sent that negotiated
// timeout, as trackedConn does.
func handshake(ka *keepalive, sent time.Time, timeout time.Duration, id int64) {
	ka.timeout.Store(int64(timeout))
	ka.markHeard(sent)
}

// A look at the connection at time at, in the table below.
type look struct {
	at        time.Duration // since epoch0
	state     zk.State
	id        int64
	handshake time.Duration // a handshake sent at this time (with timeout), before the look; 0: none
	timeout   time.Duration
	heard     time.Duration // a sync sent at this time was answered; 0: none
	expired   bool          // a StateExpired event before the look
	close     bool          // Close before the look

	want     int64         // the trusted session's id after the look; 0: none
	fresh    bool          // the trusted session began at this look
	lost     string        // the look ended the trusted session with an error containing this
	deadline time.Duration // the next look it asks for, since epoch0; 0: none
}

func TestReconcile(t *testing.T) {
	const T = 3 * time.Second // default margin T/2
	has, conn := zk.StateHasSession, zk.StateConnecting
	tests := []struct {
		name   string
		margin time.Duration
		looks  []look
	}{
		{"connected, cut off, deadline passes", 0, []look{
			{at: 0, state: conn},
			{at: 10 * time.Millisecond, handshake: 5 * time.Millisecond, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1505 * time.Millisecond},
			{at: time.Second, state: conn, id: 1, want: 1, deadline: 1505 * time.Millisecond},
			{at: 1505*time.Millisecond - 1, state: conn, id: 1, want: 1, deadline: 1505 * time.Millisecond},
			{at: 1505 * time.Millisecond, state: conn, id: 1, lost: "no reply from the server within the session timeout 3s (margin 1.5s)"},
			{at: 1505*time.Millisecond + 1, state: conn, id: 1},
		}},
		{"1ns after the deadline", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 1500*time.Millisecond + 2, state: conn, id: 1, lost: "no reply"},
		}},
		{"answers move the deadline, late answers do not move it back", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: time.Second, heard: 900 * time.Millisecond, state: has, id: 1, want: 1, deadline: 2400 * time.Millisecond},
			{at: 1100 * time.Millisecond, heard: 800 * time.Millisecond, state: has, id: 1, want: 1, deadline: 2400 * time.Millisecond},
			{at: 2400 * time.Millisecond, state: has, id: 1, lost: "no reply"},
		}},
		{"reconnect with the same session before the deadline", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 500 * time.Millisecond, state: conn, id: 1, want: 1, deadline: 1500*time.Millisecond + 1},
			{at: time.Second, handshake: 900 * time.Millisecond, timeout: T, state: has, id: 1, want: 1, deadline: 2400 * time.Millisecond},
		}},
		{"the same session after the deadline is a new one, once heard from", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 2 * time.Second, state: has, id: 1, lost: "no reply"},
			{at: 2100 * time.Millisecond, state: has, id: 1},
			{at: 2200 * time.Millisecond, heard: 2150 * time.Millisecond, state: has, id: 1, want: 1, fresh: true, deadline: 3650 * time.Millisecond},
		}},
		{"expiry", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 100 * time.Millisecond, expired: true, state: conn, lost: "session 0x1 expired"},
		}},
		{"new session after an expiry; a late expiry event leaves it", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 100 * time.Millisecond, handshake: 90 * time.Millisecond, timeout: T, expired: true, state: has, id: 2, lost: "session 0x1 expired", want: 2, fresh: true, deadline: 1590 * time.Millisecond},
			{at: 200 * time.Millisecond, expired: true, state: has, id: 2, want: 2, deadline: 1590 * time.Millisecond},
		}},
		{"a new session replaces the old one", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 100 * time.Millisecond, handshake: 90 * time.Millisecond, timeout: T, state: has, id: 2, lost: "session 0x1 replaced by 0x2", want: 2, fresh: true, deadline: 1590 * time.Millisecond},
		}},
		{"a handshake renegotiates a longer timeout", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: time.Second, handshake: time.Second, timeout: 2 * T, state: has, id: 1, want: 1, deadline: 4 * time.Second},
			{at: 4*time.Second - 1, state: conn, id: 1, want: 1, deadline: 4 * time.Second},
			{at: 4 * time.Second, state: conn, id: 1, lost: "session timeout 6s (margin 3s)"},
		}},
		{"a small margin is raised to a third", 100 * time.Millisecond, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 2*time.Second + 1},
			{at: 2 * time.Second, state: conn, id: 1, want: 1, deadline: 2*time.Second + 1},
			{at: 2*time.Second + 1, state: conn, id: 1, lost: "(margin 1s)"},
		}},
		{"a shorter timeout lowers the margin to five sixths", 2500 * time.Millisecond, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 500*time.Millisecond + 1},
			{at: 100 * time.Millisecond, handshake: 100 * time.Millisecond, timeout: 1200 * time.Millisecond, state: has, id: 1, want: 1, deadline: 300 * time.Millisecond},
			{at: 300 * time.Millisecond, state: has, id: 1, lost: "session timeout 1.2s (margin 1s)"},
		}},
		{"closed", 0, []look{
			{at: 0, handshake: 1, timeout: T, state: has, id: 1, want: 1, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: 10 * time.Millisecond, close: true, state: has, id: 1},
		}},
		{"no handshake seen: trusted once a sync is answered, lost when none is for T minus the margin", 0, []look{
			{at: 0, state: has, id: 7},
			{at: time.Second, heard: 900 * time.Millisecond, state: has, id: 7, want: 7, fresh: true, deadline: 2400 * time.Millisecond},
			{at: 2 * time.Second, state: has, id: 7, want: 7, deadline: 2400 * time.Millisecond},
			{at: 2400 * time.Millisecond, state: has, id: 7, lost: "no reply from the server within the session timeout 3s (margin 1.5s)"},
			{at: 3 * time.Second, heard: 2900 * time.Millisecond, state: has, id: 7, want: 7, fresh: true, deadline: 4400 * time.Millisecond},
		}},
		{"no handshake seen: expiry and a new session", 0, []look{
			{at: 0, heard: 1, state: has, id: 7, want: 7, fresh: true, deadline: 1500*time.Millisecond + 1},
			{at: time.Second, expired: true, state: has, id: 8, lost: "session 0x7 expired", want: 8, fresh: true, deadline: 1500*time.Millisecond + 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ss, link, clk, ka := newTestSessions(T, tt.margin)
			var prev *session
			for i, lk := range tt.looks {
				clk.Advance(epoch0.Add(lk.at).Sub(clk.Now()))
				if lk.handshake != 0 {
					handshake(ka, epoch0.Add(lk.handshake), lk.timeout, lk.id)
				}
				if lk.heard != 0 {
					ka.markHeard(epoch0.Add(lk.heard))
				}
				if lk.expired {
					ss.event(zk.Event{Type: zk.EventSession, State: zk.StateExpired})
				}
				if lk.close {
					ss.close()
				}
				link.set(lk.state, lk.id)
				next := ss.reconcile(clk.Now())

				var wantNext time.Time
				if lk.deadline != 0 {
					wantNext = epoch0.Add(lk.deadline)
				}
				if !next.Equal(wantNext) {
					t.Errorf("look %d at %v: next look at %v; want %v", i, lk.at, next.Sub(epoch0), lk.deadline)
				}
				ss.mu.Lock()
				cur := ss.cur
				ss.mu.Unlock()
				if got := ss.id(); got != lk.want {
					t.Errorf("look %d at %v: session 0x%x; want 0x%x", i, lk.at, got, lk.want)
				}
				switch {
				case lk.lost != "":
					if prev == nil || !ended(prev) {
						t.Fatalf("look %d at %v: the trusted session did not end; want it lost (%s)", i, lk.at, lk.lost)
					}
					if !errors.Is(prev.err, lock.ErrLost) || !strings.Contains(prev.err.Error(), lk.lost) {
						t.Errorf("look %d at %v: session ended with %v; want an error wrapping lock.ErrLost containing %q", i, lk.at, prev.err, lk.lost)
					}
				case lk.close:
					if prev == nil || !errors.Is(prev.err, lock.ErrClosed) {
						t.Errorf("look %d: after close the session ended with %v; want lock.ErrClosed", i, prev.err)
					}
				case prev != nil && prev != cur && !ended(prev):
					t.Errorf("look %d at %v: the old session was replaced without ending", i, lk.at)
				}
				if cur != nil && (cur != prev) != lk.fresh {
					t.Errorf("look %d at %v: a new session began: %t; want %t", i, lk.at, cur != prev, lk.fresh)
				}
				if cur != nil || lk.lost != "" || lk.close {
					prev = cur
				}
			}
		})
	}
}

// TestSessionsRun follows the loss deadline on the fake clock through the
// state goroutine: not a nanosecond early, and promptly at it.
func TestSessionsRun(t *testing.T) {
	ss, link, clk, ka := newTestSessions(3*time.Second, 0)
	closing := make(chan struct{})
	ss.closing = closing
	handshake(ka, epoch0, 3*time.Second, 1)
	link.set(zk.StateHasSession, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss.run()
	}()
	defer func() {
		ss.mu.Lock()
		ss.closed = true
		ss.mu.Unlock()
		close(closing)
		<-done
	}()
	s, err := ss.get(t.Context())
	if err != nil || s.id != 1 {
		t.Fatalf("get() = %v, %v; want session 0x1", s, err)
	}
	link.set(zk.StateConnecting, 1)
	clk.Advance(1500*time.Millisecond - 1)
	ss.kickState()
	time.Sleep(10 * time.Millisecond)
	if ended(s) {
		t.Fatalf("the session ended 1ns before its deadline: %v", s.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ended(s) {
		if time.Now().After(deadline) {
			t.Fatal("the session did not end at its deadline")
		}
		clk.Advance(1)
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(s.err, lock.ErrLost) {
		t.Errorf("the session ended with %v; want lock.ErrLost", s.err)
	}
	if at := clk.Now().Sub(epoch0); at < 1500*time.Millisecond {
		t.Errorf("the session ended at %v; want at 1.5s or later", at)
	}
}

// TestSessionsGetWaitsQuietly checks that waiting for a session does not
// make get and run wake each other in a loop (each look of run wakes the
// waiters), and that a session that arrives without an event is still
// found.
func TestSessionsGetWaitsQuietly(t *testing.T) {
	ss, link, clk, ka := newTestSessions(time.Second, 0)
	link.set(zk.StateConnecting, 0)
	closing := make(chan struct{})
	ss.closing = closing
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss.run()
	}()
	defer func() {
		ss.close()
		close(closing)
		<-done
	}()
	const wait = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	before := link.lookCount()
	if s, err := ss.get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get() without a session = %v, %v; want context.DeadlineExceeded", s, err)
	}
	// One look at the start and one per getPoll, with room for timer
	// delays; a loop makes thousands.
	if looks, most := link.lookCount()-before, int(wait/getPoll)+5; looks > most {
		t.Errorf("run looked at the connection %d times while get waited %v; want at most %d", looks, wait, most)
	}
	type got struct {
		s   *session
		err error
	}
	res := make(chan got, 1)
	go func() {
		s, err := ss.get(t.Context())
		res <- got{s, err}
	}()
	time.Sleep(2 * getPoll) // get has looked and waits
	ka.markHeard(clk.Now()) // a sync answered, with no wake-up either
	link.set(zk.StateHasSession, 7)
	select {
	case r := <-res:
		if r.err != nil || r.s.id != 7 {
			t.Fatalf("get() after the session came without an event = %v, %v; want session 0x7", r.s, r.err)
		}
	case <-time.After(time.Second):
		t.Fatalf("get() did not find the session that came without an event within %v", time.Second)
	}
}

// TestSessionsGet checks what waiting for a session returns once the
// Locker is closed.
func TestSessionsGet(t *testing.T) {
	ss, _, _, _ := newTestSessions(time.Second, 0)
	ss.close()
	if _, err := ss.get(t.Context()); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("get() after close = %v; want lock.ErrClosed", err)
	}
	var calls sync.WaitGroup
	if err := ss.admit(&calls); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("admit() after close = %v; want lock.ErrClosed", err)
	}
}
