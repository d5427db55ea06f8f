package zktest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestObserveReconnect follows one observation through everything that
// can happen to the observing Locker's connection: a cut connection
// restored within the session timeout (the same session, its watch set
// again by go-zookeeper), its session ended by the server (a new session,
// every watch dropped), and a rolling restart of every server, so that
// whichever server the observer uses goes down once. The holder changes
// during each outage. Afterwards the observation must report the new
// holder, and in the end it must have reported, in order and once each,
// a subsequence of the lock's history that contains every holder, and it
// must not have ended.
func TestObserveReconnect(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	obs := h.NewLocker(t, "observer").(*zklock.Locker)
	h.mu.Lock()
	g := h.gates[obs]
	h.mu.Unlock()
	// The holders' sessions must outlast a server's restart.
	a := h.dial(t, zklock.WithIdentity("a"), zklock.WithSessionTimeout(20*time.Second))
	b := h.dial(t, zklock.WithIdentity("b"), zklock.WithSessionTimeout(20*time.Second))
	ctx := testutil.Context(t, 150*time.Second)
	name := "observe/" + randHex(4)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := obs.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	r := testutil.Record(t, ch, errf)
	free := lock.Holder{}
	history := []lock.Holder{free}
	var holders []lock.Holder
	r.WaitLast(free, 10*time.Second, "initial state")

	lockers := map[string]lock.Locker{"a": a, "b": b}
	who := "a"
	cur := acquire(t, ctx, a, name)
	grant := func(le lock.Lease) {
		hd := lock.Holder{Identity: who, Token: le.Token()}
		history = append(history, hd)
		holders = append(holders, hd)
	}
	grant(cur)
	r.WaitLast(holders[len(holders)-1], 10*time.Second, "a acquired")
	// hand releases the lock and gives it to the other client.
	hand := func() {
		t.Helper()
		if err := cur.Release(ctx); err != nil {
			// A holder whose server is down cannot delete its znode
			// now; it does once it has reconnected, and the other
			// client's Acquire waits for that.
			t.Logf("Release() = %v", err)
		}
		history = append(history, free)
		if who == "a" {
			who = "b"
		} else {
			who = "a"
		}
		cur = acquire(t, ctx, lockers[who], name)
		grant(cur)
	}

	// A cut connection, restored within the session timeout.
	g.Cut()
	hand()
	time.Sleep(time.Second) // the outage: the observer is cut off meanwhile
	g.Heal()
	r.WaitLast(holders[len(holders)-1], 30*time.Second, "holder changed while the observer's connection was cut")

	// The observer's session ended by the server.
	expireSession(t, h.sess, h.servers, obs)
	hand()
	r.WaitLast(holders[len(holders)-1], 30*time.Second, "holder changed after the observer's session was expired")

	// Every server down once, in turn.
	for _, m := range c.Members {
		if err := m.Kill(); err != nil {
			t.Fatalf("Kill(%s) = %v", m.Name(), err)
		}
		hand()
		if err := m.Restart(ctx); err != nil {
			t.Fatalf("Restart(%s) = %v", m.Name(), err)
		}
		r.WaitLast(holders[len(holders)-1], 30*time.Second, "holder changed while "+m.Name()+" was down")
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("WaitHealthy() = %v", err)
		}
	}

	// Afterwards, a change made one at a time is reported at once.
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	history = append(history, free)
	r.WaitLast(free, 10*time.Second, "released at the end")
	r.CheckSubsequence(history, holders, "across a reconnect, a session expiry and server restarts")
	r.EndsWithCancel(t, cancel)
}

func acquire(t *testing.T, ctx context.Context, l lock.Locker, name string) lock.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
	}
	return le
}

// TestObserveShortGrants measures what the package doc promises about
// grants shorter than a round trip: a burst of grants each released at
// once may be missed in part, but whatever is reported is, in order, a
// subsequence of the lock's history with no holder twice in a row; a
// grant held for longer than the observer needs to list the queue again
// (here 300ms) is reported; and the free state the lock ends in is
// reported. How many of the short grants were seen is logged: it depends
// on timing and is not a promise.
func TestObserveShortGrants(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	obs := h.NewLocker(t, "observer")
	holder := h.NewLocker(t, "holder")
	ctx := testutil.Context(t, 60*time.Second)
	name := "observe/" + randHex(4)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errf, err := obs.(lock.Observer).Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	r := testutil.Record(t, ch, errf)
	free := lock.Holder{}
	r.WaitLast(free, 10*time.Second, "initial state")

	history := []lock.Holder{free}
	var short []lock.Holder
	const burst = 40
	for range burst {
		le := acquire(t, ctx, holder, name)
		hd := lock.Holder{Identity: "holder", Token: le.Token()}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		short = append(short, hd)
		history = append(history, hd, free)
	}
	r.WaitLast(free, 10*time.Second, "free after the burst")

	long := acquire(t, ctx, holder, name)
	longHolder := lock.Holder{Identity: "holder", Token: long.Token()}
	history = append(history, longHolder)
	time.Sleep(300 * time.Millisecond)
	if err := long.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	history = append(history, free)
	r.WaitLast(free, 10*time.Second, "free after the long grant")

	r.CheckSubsequence(history, []lock.Holder{longHolder}, "a burst of short grants, then a long one")
	seen, _ := r.Snapshot()
	n := 0
	for _, hd := range short {
		if slices.Contains(seen, hd) {
			n++
		}
	}
	t.Logf("%d of %d grants released at once were reported", n, burst)
	r.EndsWithCancel(t, cancel)
}
