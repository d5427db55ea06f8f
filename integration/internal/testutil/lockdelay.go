package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// The environment of a lock-delay holder process (see LockDelayHolder).
const (
	lockDelayURLEnv  = "FENCELOCK_LOCKDELAY_URL"
	lockDelayNameEnv = "FENCELOCK_LOCKDELAY_NAME"
)

// LockDelayHolder is the body of the test the lock-delay tests start as
// their holder process: run with the test binary's -test.run naming it
// and the URL and name in its environment, it opens the URL, acquires the
// name, writes "held <token>" and blocks until it is killed. Outside such
// a process (no URL in the environment) it returns at once.
func LockDelayHolder(t *testing.T) {
	url := os.Getenv(lockDelayURLEnv)
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, url)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	le, err := l.Acquire(ctx, os.Getenv(lockDelayNameEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	fmt.Printf("held %d\n", le.Token())
	select {} // until SIGKILL
}

// LockDelayTrials is how many times each case of RunLockDelay runs.
const LockDelayTrials = 3

// Removal is the deletion of a lock record as observers on the servers,
// in place before it, saw it.
type Removal struct {
	// At is when the first observer received the deletion: after the
	// server removed the record, so a delay measured from At can only
	// understate the delay from the removal. Zero if no observer saw it.
	At time.Time
	// Event says what was seen and where, for the log.
	Event string
}

// WatchRemoval puts, on every server, an observer of the removal of the
// record of name whose grant has token tok, and returns once they are in
// place (it fails the test if the record is not there). The channel
// yields the removal once the first observer has seen it, and is closed
// without a value if every observer ended without seeing it. The
// observers stop when t ends.
type WatchRemoval func(t *testing.T, name string, tok fencing.Token) <-chan Removal

// FirstRemoval returns the channel of a WatchRemoval fed by n observers,
// and the function with which each observer reports: with ok, the
// deletion it received, stamped now; without, that it ended without one.
// It must be called once by each of the n observers. The first deletion
// reported is the one the channel yields.
func FirstRemoval(n int) (<-chan Removal, func(event string, ok bool)) {
	ch := make(chan Removal, 1)
	var mu sync.Mutex
	sent, left := false, n
	return ch, func(event string, ok bool) {
		at := time.Now()
		mu.Lock()
		defer mu.Unlock()
		left--
		if ok && !sent {
			ch <- Removal{At: at, Event: event}
			sent = true
		}
		if left == 0 && !sent {
			close(ch)
		}
	}
}

// lockDelaySlack is how long after the lock-delay a delayed grant may
// come, and how soon after a clean release an undelayed one must: the
// grantee's read that finds the record gone, and its delete of the
// marker, are a few round trips, which d/2 leaves room for under load.
func lockDelaySlack(d time.Duration) time.Duration { return d / 2 }

// RunLockDelay checks lock-delay d on a backend, with Lockers opened from
// url (which must set lock_delay=d and a short TTL or session timeout).
// The package docs (WithLockDelay) delay the next grant by d after a
// lease that ends without a clean Release, and not after a clean one:
//
//   - a holder process SIGKILLed while it holds the lock (its record
//     goes when its session expires), a holder revoked (lock.Revoker,
//     through another Locker) and a holder whose Locker is closed while
//     it holds the lock: the waiter's grant comes at least d, and less
//     than d plus the slack d/2, after the removal of the holder's record
//     as observers started beforehand on the servers saw it (watch
//     reports the removal; see WatchRemoval);
//   - a holder that releases cleanly: the waiter is granted within d/2 of
//     the Release.
//
// holderTest is the name of the test whose body is LockDelayHolder.
// markers counts the lock-delay markers of a name, read directly from the
// servers: after each clean release none may be left.
func RunLockDelay(t *testing.T, url string, d time.Duration, holderTest string, markers func(t *testing.T, name string) int, watch WatchRemoval) {
	t.Helper()
	r := &lockDelayRun{url: url, d: d, holderTest: holderTest, markers: markers, watch: watch, ctx: Context(t, 5*time.Minute)}
	r.waiter, r.inspector = r.open(t), r.open(t)
	t.Run("killed", r.killed)
	t.Run("revoked", r.revoked)
	t.Run("closed", r.closed)
	t.Run("released", r.released)
}

// lockDelayRun is one run of RunLockDelay: its arguments, and the Lockers
// its cases share (the waiter, whose grants are timed, and the inspector,
// which lists the queue and revokes).
type lockDelayRun struct {
	url               string
	d                 time.Duration
	holderTest        string
	markers           func(t *testing.T, name string) int
	watch             WatchRemoval
	ctx               context.Context
	waiter, inspector lock.Locker
}

// lockDelayGrant is the outcome of the waiter's Acquire, and when it
// returned.
type lockDelayGrant struct {
	le  lock.Lease
	at  time.Time
	err error
}

func (r *lockDelayRun) open(t *testing.T) lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, r.url)
	if err != nil {
		t.Fatalf("lock.Open(%q) = %v", r.url, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (r *lockDelayRun) noMarkers(t *testing.T, name, when string) {
	t.Helper()
	if n := r.markers(t, name); n != 0 {
		t.Errorf("%s: %d lock-delay markers of %q left; want 0", when, n, name)
	}
}

// acquire starts the waiter's Acquire of name behind its holder, and
// returns once the waiter is queued.
func (r *lockDelayRun) acquire(t *testing.T, name string) <-chan lockDelayGrant {
	t.Helper()
	ql, ok := r.inspector.(lock.QueueLister)
	if !ok {
		t.Fatalf("%T is not a lock.QueueLister", r.inspector)
	}
	ch := make(chan lockDelayGrant, 1)
	go func() {
		le, err := r.waiter.Acquire(r.ctx, name)
		ch <- lockDelayGrant{le, time.Now(), err}
	}()
	Eventually(t, 20*time.Second, "waiter queued", func() bool {
		q, err := ql.Queue(r.ctx, name)
		return err == nil && len(q) == 2
	})
	return ch
}

// delayed runs one trial of a case whose holder loses its lease: the
// waiter queues behind the holder of name, whose grant has token tok, and
// end takes the holder's lease away. It returns the grant's delay after
// the removal of the holder's record.
func (r *lockDelayRun) delayed(t *testing.T, name string, tok fencing.Token, end func()) time.Duration {
	t.Helper()
	removed := r.watch(t, name, tok)
	grants := r.acquire(t, name)
	end()
	rm := Recv(t, removed, 30*time.Second, "the observers' report of the holder's removal")
	if rm.At.IsZero() {
		t.Fatalf("every observer ended without seeing the removal of the record of %q with token %d", name, tok)
	}
	g := Recv(t, grants, 30*time.Second, "grant after the holder's lease ended")
	if g.err != nil {
		t.Fatalf("Acquire() = %v", g.err)
	}
	gap, d := g.at.Sub(rm.At), r.d
	t.Logf("holder (token %d) gone: %s; grant (token %d) came %v after it (lock-delay %v)", tok, rm.Event, g.le.Token(), gap.Round(time.Millisecond), d)
	if gap < d {
		t.Errorf("grant %v after the observers saw the holder's record removed; want at least the lock-delay %v", gap, d)
	}
	if slack := lockDelaySlack(d); gap >= d+slack {
		t.Errorf("grant %v after the observers saw the holder's record removed; want less than the lock-delay %v plus %v", gap, d, slack)
	}
	if err := g.le.Release(r.ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
	r.noMarkers(t, name, "after the delayed grant was released cleanly")
	return gap
}

// killed: a holder process SIGKILLed while it holds the lock.
func (r *lockDelayRun) killed(t *testing.T) {
	var gaps []time.Duration
	for range LockDelayTrials {
		name := UniqueName(t)
		cmd := exec.Command(os.Args[0], "-test.run=^"+r.holderTest+"$", "-test.v")
		cmd.Env = append(os.Environ(), lockDelayURLEnv+"="+r.url, lockDelayNameEnv+"="+name)
		p := StartProc(t, cmd, ProcConfig{})
		var tok fencing.Token
		for tok == 0 {
			line, ok := <-p.Lines
			if !ok {
				t.Fatalf("holder process ended before holding %q: %s", name, p.Stderr.String())
			}
			if rest, ok := strings.CutPrefix(line, "held "); ok {
				var err error
				if tok, err = fencing.ParseToken(rest); err != nil {
					t.Fatalf("holder process wrote %q: %v", line, err)
				}
			}
		}
		if n := r.markers(t, name); n != 1 {
			t.Errorf("while the holder process holds %q: %d lock-delay markers; want 1", name, n)
		}
		gaps = append(gaps, r.delayed(t, name, tok, func() {
			if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill holder process %d: %v", p.Cmd.Process.Pid, err)
			}
			Recv(t, p.Exited(), 10*time.Second, "exit of the killed holder process")
		}))
	}
	t.Logf("after SIGKILL: grant - record removed: %v (lock-delay %v)", gaps, r.d)
}

// revoked: a holder revoked through another Locker.
func (r *lockDelayRun) revoked(t *testing.T) {
	rv, ok := r.inspector.(lock.Revoker)
	if !ok {
		t.Fatalf("%T is not a lock.Revoker", r.inspector)
	}
	holder := r.open(t)
	var gaps []time.Duration
	for range LockDelayTrials {
		name := UniqueName(t)
		le, err := holder.Acquire(r.ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		gaps = append(gaps, r.delayed(t, name, le.Token(), func() {
			if err := rv.Revoke(r.ctx, name, le.Token()); err != nil {
				t.Fatalf("Revoke(%q, %d) = %v", name, le.Token(), err)
			}
		}))
		Recv(t, le.Done(), 30*time.Second, "end of the revoked lease")
	}
	t.Logf("after a revocation: grant - record removed: %v (lock-delay %v)", gaps, r.d)
}

// closed: a holder whose Locker is closed while it holds the lock.
func (r *lockDelayRun) closed(t *testing.T) {
	var gaps []time.Duration
	for range LockDelayTrials {
		name := UniqueName(t)
		holder := r.open(t)
		le, err := holder.Acquire(r.ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		gaps = append(gaps, r.delayed(t, name, le.Token(), func() {
			if err := holder.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
		}))
	}
	t.Logf("after a Close while holding: grant - record removed: %v (lock-delay %v)", gaps, r.d)
}

// released: a holder that releases cleanly, then a fresh grant after a
// clean release of the second grant: no delay either time.
func (r *lockDelayRun) released(t *testing.T) {
	holder := r.open(t)
	slack := lockDelaySlack(r.d)
	var gaps []time.Duration
	for i := range LockDelayTrials {
		name := UniqueName(t)
		le, err := holder.Acquire(r.ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		grants := r.acquire(t, name)
		start := time.Now()
		if err := le.Release(r.ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
		g := Recv(t, grants, 30*time.Second, "grant after the release")
		if g.err != nil {
			t.Fatalf("Acquire() = %v", g.err)
		}
		gap := g.at.Sub(start)
		gaps = append(gaps, gap)
		t.Logf("trial %d: clean release; grant came %v after Release was called (lock-delay %v)", i, gap.Round(time.Millisecond), r.d)
		if gap >= slack {
			t.Errorf("trial %d: grant %v after a clean release; want no lock-delay (under %v)", i, gap, slack)
		}
		if err := g.le.Release(r.ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
		start = time.Now()
		le, err = r.waiter.Acquire(r.ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if gap := time.Since(start); gap >= slack {
			t.Errorf("trial %d: Acquire of a name released cleanly took %v; want no lock-delay (under %v)", i, gap, slack)
		}
		if err := le.Release(r.ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
		r.noMarkers(t, name, "after clean releases")
	}
	t.Logf("after a clean release: grant - Release called: %v", gaps)
}

// CancelTrials is how many calls RunCancelledCalls cancels.
const CancelTrials = 300

// RunCancelledCalls checks that an Acquire or TryAcquire cancelled in
// flight leaves nothing behind by the time it returns, with Lockers opened
// from url (lock-delay d, or none when d is 0): it cancels calls of one
// Locker at points from before their create request to their grant
// (0-1.9ms after the call), and as soon as each has returned (a lease it
// got released cleanly), another Locker's TryAcquire of the name must be
// granted, and with a lock-delay, in less than d and with no marker of
// the name left (markers counts them on the servers). A record or a
// marker that a cancelled call's request leaves, or creates after the
// call has returned, fails the trial.
func RunCancelledCalls(t *testing.T, url string, d time.Duration, markers func(t *testing.T, name string) int) {
	t.Helper()
	open := func() lock.Locker {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := lock.Open(ctx, url)
		if err != nil {
			t.Fatalf("lock.Open(%q) = %v", url, err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := open(), open()
	ctx := Context(t, 5*time.Minute)
	name := UniqueName(t)
	granted, refused := 0, 0
	for i := range CancelTrials {
		cctx, cancel := context.WithCancel(ctx)
		f := b.Acquire
		if i%2 == 1 {
			f = b.TryAcquire
		}
		done := make(chan error, 1)
		go func() {
			le, err := f(cctx, name)
			if le != nil {
				err = le.Release(ctx)
			}
			done <- err
		}()
		// Time is the subject: land the cancellation at varied points.
		if w := time.Duration(i%20) * 100 * time.Microsecond; w > 0 {
			time.Sleep(w)
		}
		cancel()
		if err := Recv(t, done, 30*time.Second, "cancelled call"); err == nil {
			granted++
		} else if !errors.Is(err, context.Canceled) {
			t.Fatalf("trial %d: cancelled call = %v; want a lease or an error wrapping %v", i, err, context.Canceled)
		}
		if d > 0 {
			if n := markers(t, name); n != 0 {
				t.Errorf("trial %d: %d lock-delay markers of %q left after a cancelled call returned; want 0", i, n, name)
			}
		}
		start := time.Now()
		le, err := a.TryAcquire(ctx, name)
		took := time.Since(start)
		if err != nil {
			refused++
			t.Errorf("trial %d (cancelled %v after the call): TryAcquire right after the cancelled call returned = %v; want a lease", i, time.Duration(i%20)*100*time.Microsecond, err)
			continue
		}
		if d > 0 && took >= d {
			t.Errorf("trial %d: TryAcquire right after a cancelled call took %v; want no lock-delay (under %v)", i, took, d)
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("trial %d: Release() = %v", i, err)
		}
	}
	t.Logf("%d calls cancelled in flight (lock-delay %v): %d granted first, %d later TryAcquire calls refused", CancelTrials, d, granted, refused)
}
