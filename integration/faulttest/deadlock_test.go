package faulttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// deadlockRun is the shape of TestMultiDeadlockFree's run on one backend.
type deadlockRun struct {
	lockers, clients int // clients are spread over the Lockers
	perClient        int // acquisitions each client makes
	names            []string
	minSet, maxSet   int
	// callTimeout bounds every AcquireAll and Release: a call that runs
	// out of it is a stall.
	callTimeout time.Duration
	hold        time.Duration // the most a set is held
}

func defaultDeadlockRun() deadlockRun {
	return deadlockRun{
		lockers: 4, clients: 8, perClient: 63,
		names:  []string{"n0", "n1", "n2", "n3", "n4", "n5"},
		minSet: 2, maxSet: 4,
		callTimeout: 30 * time.Second, hold: 2 * time.Millisecond,
	}
}

// deadlockState is what the clients of one run found, and what each is
// doing, for the message of a stall.
type deadlockState struct {
	mu           sync.Mutex
	holders      map[string]int    // per name, clients that believe they hold it
	last         map[string]uint64 // per name, the token of its latest grant
	doing        []string          // per client
	sets         map[string]bool   // the distinct sets granted
	acquisitions int
	overlaps     int
	contended    int // calls made while a name of their set was held
	longest      time.Duration
	longestSet   []string
	bad          []string
}

// TestMultiDeadlockFree runs clients that take random overlapping sets of
// names with lock.AcquireAll, each set's names given in random order, on
// real 3-member clusters of both backends: every call must finish within
// its bound (no deadlock, no stall), no name may be believed held by two
// clients at once, every grant must hold every name of its set with a
// token higher than the name's previous grant, and the run must make at
// least 500 acquisitions, some of them contended. The figures (clients,
// sets, acquisitions, overlaps, longest wait) are printed.
func TestMultiDeadlockFree(t *testing.T) {
	cfg := defaultDeadlockRun()
	for _, kind := range backends {
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind)
			lockers, ns := cfg.open(t, b)
			seed := time.Now().UnixNano()
			began := time.Now()
			st := cfg.run(lockers, seed, func() string { return b.recordsLine(ns) })
			figures := fmt.Sprintf("multi deadlock-freedom %s: %d clients on %d Lockers, sets of %d-%d names out of %d in random order (seed %d): %d acquisitions of %d distinct sets, %d contended, %d overlaps, longest wait %v (for %q), in %v",
				kind, cfg.clients, cfg.lockers, cfg.minSet, cfg.maxSet, len(cfg.names), seed, st.acquisitions, len(st.sets), st.contended, st.overlaps,
				st.longest.Round(time.Millisecond), st.longestSet, time.Since(began).Round(time.Millisecond))
			t.Log(figures)
			fmt.Println(figures)
			for _, v := range st.bad {
				t.Errorf("%s", v)
			}
			if want := cfg.clients * cfg.perClient; st.acquisitions < want || st.acquisitions < 500 {
				t.Errorf("%d acquisitions; want %d, at least 500", st.acquisitions, want)
			}
			if st.overlaps != 0 {
				t.Errorf("%d overlaps: a name was believed held by two clients at once; want 0", st.overlaps)
			}
			if len(st.sets) < 40 {
				t.Errorf("%d distinct sets granted; want at least 40 of the 50 possible", len(st.sets))
			}
			if st.contended == 0 {
				t.Errorf("no call asked for a name another client held: the sets never competed")
			}
		})
	}
}

// open opens cfg.lockers Lockers on b, under a namespace of their own
// (returned); they are closed in t.Cleanup.
func (cfg deadlockRun) open(t *testing.T, b *backend) ([]lock.Locker, string) {
	t.Helper()
	ns := fmt.Sprintf("faulttest/deadlock-%d-%d", time.Now().UnixNano(), runSeq.Add(1))
	if b.kind == cluster.ZooKeeper {
		ns = "/" + ns
	}
	lockers := make([]lock.Locker, cfg.lockers)
	for i := range lockers {
		ccfg := clientConfig{ID: i + 1, Backend: b.kind, Endpoints: b.c.Endpoints(), Namespace: ns, TTL: 10 * time.Second, Margin: 2 * time.Second}
		l, closeLocker, err := openLocker(context.Background(), ccfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("opening Locker %d: %v", i+1, err)
		}
		t.Cleanup(closeLocker)
		lockers[i] = l
	}
	return lockers, ns
}

// run runs the clients on lockers until each has made its acquisitions or
// one has failed, and returns what they found. On a failure, records
// says what the servers hold.
func (cfg deadlockRun) run(lockers []lock.Locker, seed int64, records func() string) *deadlockState {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &deadlockState{holders: map[string]int{}, last: map[string]uint64{}, doing: make([]string, cfg.clients), sets: map[string]bool{}}
	var wg sync.WaitGroup
	for id := range cfg.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
			// A client stopped because another failed first adds nothing.
			if err := cfg.client(ctx, id, lockers[id%len(lockers)], rng, st); err != nil && ctx.Err() == nil {
				st.mu.Lock()
				doing := strings.Join(st.doing, "; ")
				st.mu.Unlock()
				msg := fmt.Sprintf("client %d (Locker %d): %v; the clients: %s; %s", id, id%len(lockers)+1, err, doing, records())
				st.mu.Lock()
				st.bad = append(st.bad, msg)
				st.mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return st
}

// recordsLine lists the lock records under namespace, for a message.
func (b *backend) recordsLine(namespace string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := b.records(ctx, strings.TrimPrefix(namespace, "/"))
	if err != nil {
		return "records: " + err.Error()
	}
	var parts []string
	for _, rec := range recs {
		parts = append(parts, rec.key+" ("+rec.identity+")")
	}
	return fmt.Sprintf("%d records on the server: %s", len(recs), strings.Join(parts, ", "))
}

// draw returns a random set of names, in random order.
func (cfg deadlockRun) draw(rng *rand.Rand) []string {
	n := cfg.minSet + rng.IntN(cfg.maxSet-cfg.minSet+1)
	var set []string
	for _, i := range rng.Perm(len(cfg.names))[:n] {
		set = append(set, cfg.names[i])
	}
	return set
}

// client makes cfg.perClient acquisitions through l, each of a random
// set, held briefly, and returns the first failure: a call that failed or
// outran its bound.
func (cfg deadlockRun) client(ctx context.Context, id int, l lock.Locker, rng *rand.Rand, st *deadlockState) error {
	for range cfg.perClient {
		names := cfg.draw(rng)
		st.calling(id, names)
		actx, cancel := context.WithTimeout(ctx, cfg.callTimeout)
		start := time.Now()
		m, err := lock.AcquireAll(actx, l, names...)
		wait := time.Since(start)
		cancel()
		if err != nil {
			return fmt.Errorf("AcquireAll(%q) = %v after %v", names, err, wait.Round(time.Millisecond))
		}
		st.granted(id, names, m, wait)
		<-time.After(time.Duration(rng.Int64N(int64(cfg.hold) + 1)))
		st.releasing(id, names)
		rctx, cancel := context.WithTimeout(ctx, cfg.callTimeout)
		err = m.Release(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("Release() of %q = %v", m.Names(), err)
		}
		st.mu.Lock()
		st.doing[id] = fmt.Sprintf("%d: idle", id)
		st.mu.Unlock()
	}
	return nil
}

// calling records that client id asks for names now.
func (st *deadlockState) calling(id int, names []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.doing[id] = fmt.Sprintf("%d: waiting for %q since %s", id, names, time.Now().Format("15:04:05.000"))
	for _, n := range names {
		if st.holders[n] > 0 {
			st.contended++
			return
		}
	}
}

// granted records client id's grant of names as m after wait, and checks
// it: it holds every name of the set and no other, each with a token
// above the name's previous grant, and no other client believes it holds
// any of them.
func (st *deadlockState) granted(id int, names []string, m *lock.MultiLease, wait time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sorted := slices.Sorted(slices.Values(names))
	st.doing[id] = fmt.Sprintf("%d: holding %q since %s", id, sorted, time.Now().Format("15:04:05.000"))
	st.acquisitions++
	st.sets[strings.Join(sorted, ",")] = true
	if wait > st.longest {
		st.longest, st.longestSet = wait, sorted
	}
	if got := m.Names(); !slices.Equal(got, sorted) || len(m.Leases()) != len(sorted) {
		st.bad = append(st.bad, fmt.Sprintf("client %d: AcquireAll(%q) holds %q with %d leases; want every name of the set, one lease each", id, names, got, len(m.Leases())))
	}
	for _, n := range sorted {
		st.holders[n]++
		if st.holders[n] > 1 {
			st.overlaps++
			st.bad = append(st.bad, fmt.Sprintf("client %d was granted %q (set %q) while %d other clients believed they held it", id, n, sorted, st.holders[n]-1))
		}
		tok := uint64(m.Token(n))
		if tok == 0 || tok <= st.last[n] {
			st.bad = append(st.bad, fmt.Sprintf("client %d was granted %q with token %d after token %d: want a higher token than the name's previous grant", id, n, tok, st.last[n]))
		}
		st.last[n] = max(st.last[n], tok)
	}
}

// releasing records that client id stops believing it holds names, before
// it releases them: a waiter can be granted them as soon as the release
// reaches the server.
func (st *deadlockState) releasing(id int, names []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.doing[id] = fmt.Sprintf("%d: releasing %q", id, names)
	for _, n := range names {
		st.holders[n]--
	}
}

// TestMultiDeadlockFreeControl shows that TestMultiDeadlockFree's body
// catches a deadlock: on in-memory Lockers whose AcquireAll takes the
// names one by one, ascending on half of the Lockers and descending on
// the others, some call must run out of its bound and be reported with
// what every client was doing.
func TestMultiDeadlockFreeControl(t *testing.T) {
	cfg := defaultDeadlockRun()
	cfg.callTimeout = 2 * time.Second
	mem := locktest.NewMemory()
	lockers := make([]lock.Locker, cfg.lockers)
	for i := range lockers {
		ml := mem.NewLocker(fmt.Sprintf("control-%d", i+1))
		t.Cleanup(func() { ml.Close() })
		lockers[i] = orderedLocker{Locker: ml, descending: i%2 == 1}
	}
	st := cfg.run(lockers, time.Now().UnixNano(), func() string { return "(in memory)" })
	stalled := false
	for _, v := range st.bad {
		t.Logf("expected failure: %s", v)
		stalled = stalled || strings.Contains(v, "deadline exceeded") && strings.Contains(v, "waiting for")
	}
	if !stalled {
		t.Errorf("no stall reported after %d acquisitions by Lockers that take names in opposite orders; want a call that ran out of its bound, reported with the clients' states", st.acquisitions)
	}
}

// orderedLocker is a lock.MultiLocker that deadlocks: it takes the names
// one by one, in descending order if descending, pausing between them.
type orderedLocker struct {
	lock.Locker
	descending bool
}

func (o orderedLocker) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	order := slices.Clone(names)
	if o.descending {
		slices.Reverse(order)
	}
	byName := map[string]lock.Lease{}
	for _, n := range order {
		le, err := o.Acquire(ctx, n)
		if err != nil {
			for _, held := range byName {
				held.Release(context.Background())
			}
			return nil, err
		}
		byName[n] = le
		<-time.After(time.Millisecond)
	}
	leases := make([]lock.Lease, len(names))
	for i, n := range names {
		leases[i] = byName[n]
	}
	return leases, nil
}

func (o orderedLocker) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return nil, errors.New("orderedLocker: TryAcquireAll not implemented")
}
