package clock

import (
	"sync"
	"time"
)

// Fake is a Clock whose time moves only by [Fake.Advance], which fires the
// timers due. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	cond   *sync.Cond
	now    time.Time
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

// Advance moves the fake time forward by d and fires every timer whose
// deadline has been reached. A negative d is ignored.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(max(d, 0))
	for t := range f.timers {
		if !t.at.After(f.now) {
			delete(f.timers, t)
			t.fire(f.now)
		}
	}
	f.cond.Broadcast()
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
	defer f.mu.Unlock()
	t.at = f.now.Add(d)
	if d <= 0 {
		t.fire(f.now)
		return
	}
	f.timers[t] = struct{}{}
	f.cond.Broadcast()
}

type fakeTimer struct {
	f  *Fake
	c  chan time.Time
	at time.Time
}

func (t *fakeTimer) fire(now time.Time) {
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
	select {
	case <-t.c:
	default:
	}
	t.f.arm(t, d)
	return armed
}
