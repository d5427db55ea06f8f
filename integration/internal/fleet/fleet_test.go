package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memLock is a lock in memory whose tokens rise, or fall when backwards.
type memLock struct {
	mu        sync.RWMutex
	tok       atomic.Int64
	backwards bool
}

func (m *memLock) token() int64 {
	if m.backwards {
		return 1_000_000 - m.tok.Add(1)
	}
	return m.tok.Add(1)
}

// client takes m (or nothing, when none), as a reader when reads.
type client struct {
	name        string
	m           *memLock
	none, reads bool
}

func (c *client) Name() string { return c.name }
func (c *client) Reads() bool  { return c.reads }

func (c *client) Lock(ctx context.Context) (int64, error) {
	switch {
	case c.none:
	case c.reads:
		c.m.mu.RLock()
	default:
		c.m.mu.Lock()
	}
	return c.m.token(), nil
}

func (c *client) Unlock(ctx context.Context) error {
	switch {
	case c.none:
	case c.reads:
		c.m.mu.RUnlock()
	default:
		c.m.mu.Unlock()
	}
	return nil
}

func fleetOf(m *memLock, n int, none bool, readers int) []Contender {
	var cs []Contender
	for i := range n {
		cs = append(cs, &client{name: fmt.Sprint("c", i), m: m, none: none, reads: i < readers})
	}
	return cs
}

func TestRun(t *testing.T) {
	cfg := Config{Grants: 200, Hold: 100 * time.Microsecond}
	r := Run(t, fleetOf(&memLock{}, 6, false, 0), cfg)
	if r.Grants < 200 || r.Overlaps != 0 || r.Inversions != 0 || len(r.Errors) != 0 {
		t.Errorf("a real lock: %v", r)
	}
	r = Run(t, fleetOf(&memLock{}, 6, false, 3), cfg)
	if r.Grants < 200 || r.Overlaps != 0 || r.Inversions != 0 {
		t.Errorf("a real read-write lock: %v", r)
	}
}

// TestRunCatches checks the register counts what it must: overlaps of a
// fleet that does not lock, of readers and writers that do not exclude,
// and falling tokens.
func TestRunCatches(t *testing.T) {
	cfg := Config{Grants: 200, Hold: 200 * time.Microsecond}
	if r := Run(t, fleetOf(&memLock{}, 6, true, 0), cfg); r.Overlaps == 0 {
		t.Errorf("no lock at all: %v", r)
	}
	if r := Run(t, fleetOf(&memLock{}, 6, true, 3), cfg); r.Overlaps == 0 {
		t.Errorf("readers and writers without a lock: %v", r)
	}
	if r := Run(t, fleetOf(&memLock{backwards: true}, 4, false, 0), cfg); r.Inversions == 0 {
		t.Errorf("falling tokens: %v", r)
	}
	if r := Run(t, fleetOf(&memLock{}, 6, false, 6), cfg); r.Overlaps != 0 {
		t.Errorf("readers only share: %v", r)
	}
}
