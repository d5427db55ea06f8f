package main

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// TestQueue: queue prints the holders and then the waiters, one line each
// in queue order; exit 3 when nobody holds or waits.
func TestQueue(t *testing.T) {
	const name = "jobs/q"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := locktest.NewMemory()
	open := memOpen(m)

	code, stdout, stderr := runAppWith(t, memURL, open, "queue", name)
	if code != exitFree || stdout != "" || stderr != fmt.Sprintf("fencelock: lock %q is free and nobody waits for it\n", name) {
		t.Errorf("fencelock queue of a free lock = %d, %q, %q; want %d and the lock is free", code, stdout, stderr, exitFree)
	}

	tokens := hold(t, m, name, holding{identity: "r1", shared: true}, holding{identity: "r 2", shared: true})
	w := m.NewLocker("w")
	t.Cleanup(func() { w.Close() })
	got := make(chan lock.Lease, 1)
	go func() {
		le, _ := w.Acquire(ctx, name)
		got <- le
	}()
	for len(m.Records(name)) < 3 { // the writer queues at once
		runtime.Gosched()
	}
	code, stdout, stderr = runAppWith(t, memURL, open, "queue", name)
	since := ` since=\d{4}-\d\d-\d\dT[0-9:.]+Z`
	want := fmt.Sprintf(`^position=0 held token=%d identity=r1 shared%s\n`+
		`position=1 held token=%d identity="r 2" shared%s\n`+
		`position=2 waiting token=%d identity=w%s\n$`, tokens[0], since, tokens[1], since, tokens[1]+1, since)
	if code != exitOK || !regexp.MustCompile(want).MatchString(stdout) {
		t.Errorf("fencelock queue = %d, %q (stderr %q); want %d and stdout matching %s", code, stdout, stderr, exitOK, want)
	}

	bare := func(ctx context.Context, raw string) (lock.Locker, error) {
		l, err := memOpen(m)(ctx, raw)
		return bareLocker{l}, err
	}
	if code, _, _ := runAppWith(t, memURL, bare, "queue", name); code != exitError {
		t.Errorf("fencelock queue on a backend without QueueLister = %d; want %d", code, exitError)
	}
	for _, args := range [][]string{{"queue"}, {"queue", "a//b"}, {"queue", "a", "b"}} {
		if code, _, _ := runAppWith(t, memURL, open, args...); code != exitUsage {
			t.Errorf("fencelock %q = %d; want %d", args, code, exitUsage)
		}
	}
	cancel()
	if le := <-got; le != nil {
		le.Release(context.Background())
	}
}
