package lock_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// TestElectionCandidates: the leader first, then the candidates waiting
// for their term, in the order they will be served.
func TestElectionCandidates(t *testing.T) {
	m := locktest.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "elections/candidates"
	started := make(chan fencing.Token, 3)
	var elections []*lock.Election
	var runs []chan error
	for _, id := range []string{"one", "two", "three"} {
		l := m.NewLocker(id)
		t.Cleanup(func() { l.Close() })
		e, err := lock.NewElection(l, name, lock.ElectionConfig{
			OnStarted: func(ctx context.Context, term fencing.Token) { started <- term; <-ctx.Done() },
		})
		if err != nil {
			t.Fatalf("NewElection() = %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		elections, runs = append(elections, e), append(runs, done)
		// Wait for this candidate's record before starting the next.
		for len(m.Records(name)) < len(elections) {
			runtime.Gosched()
		}
	}
	cs, err := elections[2].Candidates(ctx)
	if err != nil || len(cs) != 3 {
		t.Fatalf("Candidates() = %+v, %v; want 3 candidates", cs, err)
	}
	for i, want := range []string{"one", "two", "three"} {
		if cs[i].Identity != want || cs[i].Held != (i == 0) || cs[i].Position != i {
			t.Errorf("Candidates()[%d] = %+v; want %s, held %v, position %d", i, cs[i], want, i == 0, i)
		}
	}
	cancel()
	for _, done := range runs {
		<-done
	}

	bare := m.NewLocker("bare")
	t.Cleanup(func() { bare.Close() })
	e, err := lock.NewElection(struct{ lock.Locker }{bare}, name, lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	if err != nil {
		t.Fatalf("NewElection() = %v", err)
	}
	if _, err := e.Candidates(context.Background()); !errors.Is(err, lock.ErrInvalidConfig) {
		t.Errorf("Candidates() on a Locker without QueueLister = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
	}
}
