// Package fleet runs mixed fleets of lock clients — fencelock Lockers and
// the recipes users already run — on one lock name, and checks what every
// client believed: no two holders at once (a reader may share with
// readers), tokens rising in grant order, every client served.
//
// A client's belief runs from its Lock returning to its Unlock being
// called. The fleet keeps one register of beliefs, entered after Lock
// returns and left before Unlock is called, so a register interval lies
// within the client's belief: an overlap the register counts is an overlap
// of beliefs.
package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Contender is one client of the fleet.
type Contender interface {
	// Name tells the client apart in results and messages.
	Name() string
	// Lock blocks until the client believes it holds the lock, and returns
	// the token of its grant: its record's create revision (etcd) or czxid
	// (ZooKeeper), which must be known.
	Lock(ctx context.Context) (int64, error)
	// Unlock ends the client's belief, then releases.
	Unlock(ctx context.Context) error
}

// Reader is a Contender whose grants are shared (read) grants: they may
// overlap other readers' grants, never a writer's.
type Reader interface {
	Contender
	Reads() bool
}

// Config says how long a fleet runs.
type Config struct {
	Grants  int           // the grants to reach, across all clients
	Hold    time.Duration // how long a holder keeps the lock
	Timeout time.Duration // the bound on the whole run (default 2 minutes)
}

// Result is what a run saw.
type Result struct {
	Grants      int
	Overlaps    int // grants that began while a belief they exclude was held
	Inversions  int // grants whose token did not rise past what it must
	PerClient   map[string]int
	Errors      []error // the first error of each client that failed
	LongestWait time.Duration
	Elapsed     time.Duration
}

// String sums the result up for a log line.
func (r Result) String() string {
	return fmt.Sprintf("%d grants in %v (%.0f/s), %d overlaps, %d token inversions, longest wait %v, per client %v",
		r.Grants, r.Elapsed.Round(time.Millisecond), r.Rate(), r.Overlaps, r.Inversions, r.LongestWait.Round(time.Millisecond), r.PerClient)
}

// Rate is the grants per second of the run.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Grants) / r.Elapsed.Seconds()
}

// register holds the beliefs of the moment and the tokens seen.
type register struct {
	mu                sync.Mutex
	readers, writers  int
	maxTok, writerTok int64
	res               *Result
}

// enter records the start of a belief with token tok.
func (g *register) enter(name string, reads bool, tok int64, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.res
	r.Grants++
	r.PerClient[name]++
	r.LongestWait = max(r.LongestWait, wait)
	if g.writers > 0 || (!reads && g.readers > 0) {
		r.Overlaps++
	}
	// A writer's token passes every earlier grant's; a reader's passes the
	// last writer's (readers admitted together may report in any order).
	if floor := g.maxTok; (reads && tok <= g.writerTok) || (!reads && tok <= floor) || tok <= 0 {
		r.Inversions++
	}
	g.maxTok = max(g.maxTok, tok)
	if reads {
		g.readers++
	} else {
		g.writers++
		g.writerTok = tok
	}
}

// leave records the end of a belief.
func (g *register) leave(reads bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if reads {
		g.readers--
	} else {
		g.writers--
	}
}

// Run runs cs on one lock until cfg.Grants grants were made, every client
// stops after the grant it is waiting for, or the timeout passes. It
// asserts nothing: see Check.
func Run(t testing.TB, cs []Contender, cfg Config) Result {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	res := Result{PerClient: make(map[string]int)}
	g := &register{res: &res}
	var left atomic.Int64
	left.Store(int64(cfg.Grants))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range cs {
		res.PerClient[c.Name()] = 0
	}
	start := time.Now()
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cycle(ctx, g, c, cfg.Hold, &left); err != nil {
				mu.Lock()
				res.Errors = append(res.Errors, fmt.Errorf("%s: %w", c.Name(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// cycle locks and unlocks with c while grants are left.
func cycle(ctx context.Context, g *register, c Contender, hold time.Duration, left *atomic.Int64) error {
	reads := false
	if r, ok := c.(Reader); ok {
		reads = r.Reads()
	}
	for left.Load() > 0 {
		asked := time.Now()
		tok, err := c.Lock(ctx)
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		g.enter(c.Name(), reads, tok, time.Since(asked))
		left.Add(-1)
		time.Sleep(hold)
		g.leave(reads)
		if err := c.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
	}
	return nil
}

// Check fails t unless r reached want grants with no overlap, no token
// inversion and no error, and served every client.
func Check(t testing.TB, r Result, want int) {
	t.Helper()
	t.Logf("fleet: %v", r)
	if r.Grants < want {
		t.Errorf("fleet: %d grants, want at least %d", r.Grants, want)
	}
	if r.Overlaps != 0 {
		t.Errorf("fleet: %d grants began while another holder believed it held the lock", r.Overlaps)
	}
	if r.Inversions != 0 {
		t.Errorf("fleet: %d grants had a token that did not rise past the grants before it", r.Inversions)
	}
	for name, n := range r.PerClient {
		if n == 0 {
			t.Errorf("fleet: client %s was never granted the lock", name)
		}
	}
	for _, err := range r.Errors {
		t.Errorf("fleet: %v", err)
	}
}
