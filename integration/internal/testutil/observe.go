package testutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// Recorder reads an observation on its own goroutine and keeps what it
// reported, so that a test can change the lock while the observer is cut
// off and then look at the whole sequence.
type Recorder struct {
	t     *testing.T
	errf  func() error
	mu    sync.Mutex
	seen  []lock.Holder
	ended bool
	done  chan struct{}
}

// Record starts reading ch; errf is the observation's error function.
func Record(t *testing.T, ch <-chan lock.Holder, errf func() error) *Recorder {
	r := &Recorder{t: t, errf: errf, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for h := range ch {
			r.mu.Lock()
			r.seen = append(r.seen, h)
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// Snapshot returns what was reported so far and whether the channel closed.
func (r *Recorder) Snapshot() ([]lock.Holder, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen), r.ended
}

// WaitLast waits until the last holder reported is want, and fails the
// test if the observation ends first.
func (r *Recorder) WaitLast(want lock.Holder, within time.Duration, what string) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		seen, ended := r.Snapshot()
		if len(seen) > 0 && seen[len(seen)-1] == want {
			return
		}
		if ended {
			r.t.Fatalf("%s: observation ended (%v) after reporting %s; want it to go on", what, r.errf(), FormatHolders(seen))
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: observed %s after %v; want it to end with %s", what, FormatHolders(seen), within, FormatHolder(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Check compares the whole sequence with want.
func (r *Recorder) Check(want []lock.Holder, what string) {
	r.t.Helper()
	seen, _ := r.Snapshot()
	r.t.Logf("%s: observed %s", what, FormatHolders(seen))
	if !slices.Equal(seen, want) {
		r.t.Errorf("%s: observed %s; want %s", what, FormatHolders(seen), FormatHolders(want))
	}
}

// FormatHolder writes h as identity@token, or "free".
func FormatHolder(h lock.Holder) string {
	if h == (lock.Holder{}) {
		return "free"
	}
	return fmt.Sprintf("%s@%d", h.Identity, h.Token)
}

// FormatHolders writes hs with FormatHolder.
func FormatHolders(hs []lock.Holder) string {
	out := "["
	for i, h := range hs {
		if i > 0 {
			out += " "
		}
		out += FormatHolder(h)
	}
	return out + "]"
}

// EndsWithCancel cancels an observation and checks that it ends with
// ctx's error and nothing else.
func (r *Recorder) EndsWithCancel(t *testing.T, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("observation not ended 10s after its context was cancelled")
	}
	if err := r.errf(); !errors.Is(err, context.Canceled) {
		t.Errorf("observation ended with %v; want an error wrapping %v", err, context.Canceled)
	}
}

// CheckSubsequence checks that what was reported is, in order, a
// subsequence of history (every state the lock went through) with no
// holder twice in a row, and contains every state of must.
func (r *Recorder) CheckSubsequence(history, must []lock.Holder, what string) {
	r.t.Helper()
	seen, _ := r.Snapshot()
	r.t.Logf("%s: observed %s", what, FormatHolders(seen))
	rest := history
	for i, h := range seen {
		if i > 0 && seen[i-1] == h {
			r.t.Errorf("%s: observed %s twice in a row", what, FormatHolder(h))
		}
		j := slices.Index(rest, h)
		if j < 0 {
			r.t.Errorf("%s: observed %s; want, in order, a subsequence of %s", what, FormatHolders(seen), FormatHolders(history))
			return
		}
		rest = rest[j+1:]
	}
	for _, h := range must {
		if h != (lock.Holder{}) && !slices.Contains(seen, h) {
			r.t.Errorf("%s: %s was never reported; want it in %s", what, FormatHolder(h), FormatHolders(seen))
		}
	}
}

// ObserveBurst is how many grants RunObserveShortGrants makes, each
// released as soon as it is granted.
const ObserveBurst = 40

// RunObserveShortGrants checks what an observation reports of a burst of
// grants shorter than a round trip, on a name free at the start: holder
// (whose Holder identity is id) acquires and at once releases the name
// ObserveBurst times, then holds it for 300ms (a grant longer than an
// observer needs to list the lock again) and releases it. The
// observation, from obs, must report, in order, a subsequence of that
// history with no holder twice in a row, the long grant, the free state
// the lock ends in, and at least floor of the ObserveBurst short grants.
// A backend that promises every change (floor ObserveBurst) must report
// the history exactly.
func RunObserveShortGrants(t *testing.T, obs lock.Observer, holder lock.Locker, id string, floor int) {
	t.Helper()
	ctx := Context(t, 60*time.Second)
	name := UniqueName(t)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := obs.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	r := Record(t, ch, errf)
	free := lock.Holder{}
	r.WaitLast(free, 10*time.Second, "initial state")

	acquire := func() (lock.Lease, lock.Holder) {
		t.Helper()
		le, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
		}
		return le, lock.Holder{Identity: id, Token: le.Token()}
	}
	history := []lock.Holder{free}
	var short []lock.Holder
	for range ObserveBurst {
		le, hd := acquire()
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		short = append(short, hd)
		history = append(history, hd, free)
	}
	r.WaitLast(free, 10*time.Second, "free after the burst")

	long, longHolder := acquire()
	history = append(history, longHolder)
	time.Sleep(300 * time.Millisecond) // the grant's length is the subject
	if err := long.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	history = append(history, free)
	r.WaitLast(free, 10*time.Second, "free after the long grant")

	what := fmt.Sprintf("%d grants released at once, then one held for 300ms", ObserveBurst)
	if floor >= ObserveBurst {
		r.Check(history, what)
	} else {
		r.CheckSubsequence(history, []lock.Holder{longHolder}, what)
	}
	seen, _ := r.Snapshot()
	n := 0
	for _, hd := range short {
		if slices.Contains(seen, hd) {
			n++
		}
	}
	t.Logf("%d of %d grants released at once were reported (floor %d)", n, ObserveBurst, floor)
	if n < floor {
		t.Errorf("%d of %d grants released at once were reported; want at least %d", n, ObserveBurst, floor)
	}
	r.EndsWithCancel(t, cancel)
}
