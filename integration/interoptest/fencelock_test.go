package interoptest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// sessionTimeout is what the fencelock Lockers ask for, as the foreign
// clients do (foreign.DefaultSessionTimeout).
const sessionTimeout = 4 * time.Second

// locker is one fencelock Locker as a fleet contender: it acquires name,
// shared when reads.
type locker struct {
	name  string
	l     *zklock.Locker
	lock  string
	reads bool
	lease lock.Lease
}

func (c *locker) Name() string { return c.name }
func (c *locker) Reads() bool  { return c.reads }

func (c *locker) Lock(ctx context.Context) (int64, error) {
	acquire := c.l.Acquire
	if c.reads {
		acquire = c.l.AcquireShared
	}
	le, err := acquire(ctx, c.lock)
	if err != nil {
		return 0, err
	}
	c.lease = le
	return int64(le.Token()), nil
}

func (c *locker) Unlock(ctx context.Context) error { return c.lease.Release(ctx) }

// dial returns a Locker of layout y on e's root, closed in t.Cleanup.
func (e *env) dial(t *testing.T, y zklock.Layout, opts ...zklock.Option) *zklock.Locker {
	t.Helper()
	base := []zklock.Option{zklock.WithRoot(e.root), zklock.WithLayout(y), zklock.WithSessionTimeout(sessionTimeout),
		zklock.WithLogger(slog.New(slog.DiscardHandler))}
	l, err := zklock.Dial(ctxOf(t), e.c.Endpoints(), append(base, opts...)...)
	if err != nil {
		t.Fatalf("zklock.Dial(layout %s) = %v", y, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockers returns n contenders of layout y on the lock name, each with a
// Locker of its own, shared when reads.
func (e *env) lockers(t *testing.T, y zklock.Layout, name string, n int, reads bool) []*locker {
	t.Helper()
	cs := make([]*locker, n)
	for i := range cs {
		kind := "lock"
		if reads {
			kind = "read"
		}
		cs[i] = &locker{name: fmt.Sprintf("fencelock-%s-%s-%d", y, kind, i), l: e.dial(t, y), lock: name, reads: reads}
	}
	return cs
}

// closeLockers closes every Locker and checks it closed cleanly.
func closeLockers(t *testing.T, cs ...*locker) {
	t.Helper()
	for _, c := range cs {
		if err := c.l.Close(); err != nil {
			t.Errorf("Close(%s) = %v", c.name, err)
		}
	}
}

// candidate is a fencelock election candidate as a fleet contender: Lock
// runs the election until this candidate leads, Unlock ends the run,
// which ends the term and releases.
type candidate struct {
	name string
	e    *lock.Election
	term chan fencing.Token
	stop context.CancelFunc
	done chan error
}

func newCandidate(t *testing.T, l lock.Locker, name, lockName string) *candidate {
	t.Helper()
	c := &candidate{name: name, term: make(chan fencing.Token, 1)}
	e, err := lock.NewElection(l, lockName, lock.ElectionConfig{OnStarted: c.started})
	if err != nil {
		t.Fatalf("NewElection(%q) = %v", lockName, err)
	}
	c.e = e
	return c
}

// started hands the term to Lock and leads until the term ends.
func (c *candidate) started(ctx context.Context, term fencing.Token) {
	c.term <- term
	<-ctx.Done()
}

func (c *candidate) Name() string { return c.name }

func (c *candidate) Lock(ctx context.Context) (int64, error) {
	rctx, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan error, 1)
	go func() { c.done <- c.e.Run(rctx) }()
	select {
	case term := <-c.term:
		return int64(term), nil
	case err := <-c.done:
		return 0, fmt.Errorf("election run ended before a term: %w", err)
	case <-ctx.Done():
		stop()
		<-c.done
		return 0, ctx.Err()
	}
}

func (c *candidate) Unlock(ctx context.Context) error {
	c.stop()
	select {
	case err := <-c.done:
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("election run: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// grant is what a waiter's Lock returned, and when.
type grant struct {
	tok int64
	err error
	at  time.Time
}

// lockAsync calls c.Lock in a goroutine of its own; the channel yields
// its result.
func lockAsync(ctx context.Context, c interface {
	Lock(context.Context) (int64, error)
}) <-chan grant {
	ch := make(chan grant, 1)
	go func() {
		tok, err := c.Lock(ctx)
		ch <- grant{tok, err, time.Now()}
	}()
	return ch
}
