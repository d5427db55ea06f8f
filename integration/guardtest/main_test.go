// Package guardtest tests the native guarded and fenced writes of the lock
// backends against a real 3-member etcd cluster and a real 3-server
// ZooKeeper ensemble: etcdlock.GuardedTxn, PutFenced and GetFenced, and
// zklock.GuardedMulti, SetFenced and GetFenced.
//
// The central scenario is the paused holder: A holds the lock and starts a
// write that is held up on its way (in a blackholed proxy for etcd, in a
// gated connection for ZooKeeper); A's session then ends on the server,
// B is granted the lock and writes; only then does A's write arrive. The
// guarded and fenced writes must refuse it and keep B's value; the control,
// the same story with a plain write, must show A's stale value landing, so
// that the scenario is known to be able to fail.
package guardtest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// accepted is one write a resource accepted: its token and its position in
// the resource's own order of writes (an etcd revision, a ZooKeeper
// mzxid).
type accepted struct {
	order int64
	token fencing.Token
}

// checkMonotonic fails the test unless, in the resource's order of writes,
// no accepted write carries a token lower than one accepted before it.
func checkMonotonic(t *testing.T, writes []accepted) {
	t.Helper()
	writes = slices.Clone(writes)
	slices.SortFunc(writes, func(a, b accepted) int { return cmp.Compare(a.order, b.order) })
	for i := 1; i < len(writes); i++ {
		if writes[i].order == writes[i-1].order {
			t.Errorf("two accepted writes at the same position %d", writes[i].order)
		}
		if writes[i].token < writes[i-1].token {
			t.Errorf("accepted write at %d has token %d, lower than token %d accepted before it at %d",
				writes[i].order, writes[i].token, writes[i-1].token, writes[i-1].order)
		}
	}
}

// mixedWriters runs one writer per token, each making writes calls of
// write(writer, token). Writer i starts once writer i-1's first write has
// returned, so every token meets the next one in flight: the lower keeps
// writing while the higher arrives, which is the race a fence must settle.
// It returns the accepted writes and the number rejected as stale; write
// must report the position of an accepted write in the resource's order.
// Any other outcome fails the test.
func mixedWriters(t *testing.T, tokens []fencing.Token, writes int, write func(writer int, token fencing.Token) (int64, error)) ([]accepted, int) {
	t.Helper()
	var (
		mu       sync.Mutex
		acc      []accepted
		rejected int
		failures []error
		wg       sync.WaitGroup
	)
	started := make(chan struct{})
	close(started)
	for i, token := range tokens {
		prev := started
		first := make(chan struct{})
		started = first
		wg.Go(func() {
			<-prev
			for j := range writes {
				order, err := write(i, token)
				if j == 0 {
					close(first)
				}
				var stale *fencing.StaleTokenError
				mu.Lock()
				switch {
				case err == nil:
					acc = append(acc, accepted{order, token})
				case errors.As(err, &stale) && stale.Token == token && stale.Highest > token:
					rejected++
				default:
					failures = append(failures, fmt.Errorf("writer %d (token %d): %w", i, token, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range failures {
		t.Errorf("fenced write = %v; want nil or a stale-token error naming a higher token", err)
	}
	t.Logf("%d writes accepted, %d rejected as stale", len(acc), rejected)

	// Every writer's first write met no higher token, and the highest
	// token can never be refused.
	seen := map[fencing.Token]int{}
	for _, a := range acc {
		seen[a.token]++
	}
	if len(seen) != len(tokens) {
		t.Errorf("accepted writes carry %d distinct tokens; want all %d", len(seen), len(tokens))
	}
	if top := slices.Max(tokens); seen[top] != writes {
		t.Errorf("writes accepted with the highest token %d = %d; want all %d", top, seen[top], writes)
	}
	checkMonotonic(t, acc)
	return acc, rejected
}
