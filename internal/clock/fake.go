package clock

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only by [Fake.Advance], which fires the
// timers due, in deadline (then arming) order. It is safe for concurrent
// use.
type Fake struct {
	mu     sync.Mutex
	cond   *sync.Cond
	now    time.Time
	seq    uint64
	timers map[*fakeTimer]struct{}
}

// NewFake returns a Fake clock that reads now.
func NewFake(now time.Time) *Fake {
	f := &Fake{now: now, timers: make(map[*fakeTimer]struct{})}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires d after the fake time.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	f.arm(t, d)
	return t
}

// AfterFunc returns a timer that calls fn in its own goroutine d later.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	f.arm(t, d)
	return t
}

// Advance moves the fake time forward by d and fires every timer whose
// deadline has been reached. A negative d is ignored.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(max(d, 0))
	var due []*fakeTimer
	for t := range f.timers {
		if !t.at.After(f.now) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *fakeTimer) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.seq, b.seq))
	})
	for _, t := range due {
		delete(f.timers, t)
	}
	now := f.now
	f.cond.Broadcast()
	f.mu.Unlock()
	for _, t := range due {
		t.fire(now)
	}
}

// Timers returns the number of timers armed and not yet fired or stopped.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitTimers blocks until at least n timers are armed: the way a test
// learns that a goroutine under test has reached its next wait.
func (f *Fake) WaitTimers(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.timers) < n {
		f.cond.Wait()
	}
}

func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	f.mu.Lock()
	f.seq++
	t.seq = f.seq
	t.at = f.now.Add(d)
	if d <= 0 {
		now := f.now
		f.mu.Unlock()
		t.fire(now)
		return
	}
	f.timers[t] = struct{}{}
	f.cond.Broadcast()
	f.mu.Unlock()
}

type fakeTimer struct {
	f   *Fake
	c   chan time.Time // nil for AfterFunc
	fn  func()
	at  time.Time
	seq uint64
}

func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- now:
	default: // a fired timer not yet read keeps its first value
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Stop disarms the timer and reports whether it was armed.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, armed := t.f.timers[t]
	delete(t.f.timers, t)
	return armed
}

// Reset arms the timer again to fire d later, and reports whether it was
// armed. As with time.Timer, a value not yet received from C is dropped.
func (t *fakeTimer) Reset(d time.Duration) bool {
	armed := t.Stop()
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	t.f.arm(t, d)
	return armed
}
