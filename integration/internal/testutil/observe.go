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
