package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestMemory(t *testing.T) {
	locktest.TestLocker(t, locktest.MemoryHarness(locktest.NewMemory()))
}

// plainHarness hides the optional interfaces of the Memory harness, so the
// suite runs the way it does for a backend that has neither.
type plainHarness struct{ h locktest.Harness }

func (p plainHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	return p.h.NewLocker(t, identity)
}

func TestMemoryWithoutOptionalInterfaces(t *testing.T) {
	locktest.TestLockerWith(t, plainHarness{locktest.MemoryHarness(locktest.NewMemory())},
		locktest.Options{Settle: 20 * time.Millisecond, ObserveMaySkip: true})
}

// bareHarness hides the optional interfaces of the Memory's Lockers too,
// so the suite runs the way it does for a backend with plain Lockers.
type bareHarness struct{ h locktest.Harness }

func (b bareHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	return struct{ lock.Locker }{b.h.NewLocker(t, identity)}
}

func TestMemoryBareLocker(t *testing.T) {
	locktest.TestLockerWith(t, bareHarness{locktest.MemoryHarness(locktest.NewMemory())},
		locktest.Options{Settle: 20 * time.Millisecond})
}

// refusingHarness hands out Memory Lockers that refuse shared and
// semaphore requests, as a layout of a recipe without them does.
type refusingHarness struct{ h locktest.Harness }

type refusing struct{ *locktest.MemLocker }

func (r refusingHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	return refusing{r.h.NewLocker(t, identity).(*locktest.MemLocker)}
}

var errNoKinds = fmt.Errorf("%w: exclusive only", lock.ErrIncompatible)

func (refusing) AcquireShared(context.Context, string) (lock.Lease, error)    { return nil, errNoKinds }
func (refusing) TryAcquireShared(context.Context, string) (lock.Lease, error) { return nil, errNoKinds }
func (refusing) AcquireSemaphore(context.Context, string, int) (lock.Lease, error) {
	return nil, errNoKinds
}
func (refusing) TryAcquireSemaphore(context.Context, string, int) (lock.Lease, error) {
	return nil, errNoKinds
}

// TestMemoryRefusing runs the suite on Lockers that refuse shared and
// semaphore requests: with the Options that say so, Refused replaces the
// subtests that need them (a Locker that does not refuse fails it: see
// the fault claims-refusal).
func TestMemoryRefusing(t *testing.T) {
	locktest.TestLockerWith(t, refusingHarness{locktest.MemoryHarness(locktest.NewMemory())},
		locktest.Options{RefusesShared: true, RefusesSemaphores: true})
}

// The suite is only worth something if it fails for Lockers that break the
// contract. Each case below runs one subtest of the suite, in a child
// process (a failing subtest cannot be contained in-process), against the
// Memory Locker wrapped with one fault, and checks that it fails with the
// expected complaint. A control run with no fault must pass.

const faultEnv = "LOCKTEST_FAULT"

// TestFaulty is the child's side: it runs the suite against a faulty
// harness when faultEnv is set, and is skipped otherwise.
func TestFaulty(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		return // run by TestSuiteCatchesFaults in a child process
	}
	opts := locktest.Options{Timeout: time.Second}
	if fault, ok := strings.CutSuffix(fault, "+mayskip"); ok {
		opts.ObserveMaySkip = true
		os.Setenv(faultEnv, fault)
	}
	// Options that claim a refusal the Locker does not make.
	if fault == "claims-refusal" {
		opts.RefusesShared, opts.RefusesSemaphores = true, true
	}
	opts.SessionKeyed = fault == "claims-session-keyed"
	// A harness that lacks the optional interfaces its backend's own
	// test requires.
	if fault == "required-missing" {
		opts.RequireOptional = true
		locktest.TestLockerWith(t, plainHarness{locktest.MemoryHarness(locktest.NewMemory())}, opts)
		return
	}
	m := locktest.NewMemory()
	if os.Getenv(faultEnv) == "semaphore-no-touch" {
		locktest.SkipTouches(m)
	}
	locktest.TestLockerWith(t, &faultyHarness{fault: os.Getenv(faultEnv), m: m}, opts)
}

func TestSuiteCatchesFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	tests := []struct {
		fault    string
		subtest  string
		wantFail bool
		want     string // in the child's output
	}{
		{"none", "", false, "PASS"},
		{"token-per-locker", "TokensIncrease", true, "want >"},
		{"token-per-name", "TokensAcrossNames", true, "want >"},
		{"done-never-closed", "AcquireRelease", true, "Done() open after Release returned"},
		{"reentrant", "SameLockerExcludes", true, "second Acquire on the same Locker"},
		{"reentrant", "MutualExclusion", true, "--- FAIL"},
		{"split-brain", "TryAcquire", true, "want nil, an error wrapping locked by another holder"},
		{"split-brain", "MutualExclusion", true, "tokens not increasing"},
		{"split-brain", "FIFO", true, "--- FAIL"},
		{"ignore-cancel", "CancelWait", true, "did not return within"},
		{"ignore-cancel", "CancelledContext", true, "with a cancelled context"},
		{"abandon-on-cancel", "CancelWait", true, "cancelled waiter's record deleted"},
		{"try-leaves-record", "TryAcquire", true, "after TryAcquire returned ErrLocked"},
		{"release-twice-nil", "ReleaseTwice", true, "Release() #2 = <nil>"},
		{"close-noop", "Close", true, "Done() open after Close returned"},
		{"accept-invalid", "InvalidName", true, "want nil, an error wrapping invalid name"},
		{"retry-on-lost", "SessionExpiryWaiter", true, "Acquire waiting on an expired session did not return"},
		{"observe-skips-free", "Observe", true, "want {Identity: Token:0 "},
		{"observe-skips-free+mayskip", "Observe", true, "released after quick grants"},
		{"observe-conflates", "Observe", true, "quick grants: observed"},
		// What ObserveMaySkip allows: a burst reported as its last state.
		{"observe-conflates+mayskip", "Observe", false, "PASS"},
		{"ignore-deadline", "DeadlineWait", true, "Acquire with a deadline did not return"},
		{"holder-cached", "Holder", true, "Holder("},
		{"reject-long", "LongName", true, "want a lease"},
		{"prefix-locks", "IndependentNames", true, "while only other names are held"},
		{"expiry-reports-released", "SessionExpiry", true, "Err() after session expiry"},
		{"close-leaves-records", "Close", true, "orphaned records"},
		{"done-after-grant", "DoneBeforeNextGrant", true, "Done() was still open"},
		{"done-after-grant", "LossDoneBeforeNextGrant", true, "Done() was still open"},
		{"release-lost-ends-regrant", "ReleaseLostLease", true, "after Release of a lost lease"},
		{"release-concurrent-nil", "ReleaseConcurrent", true, "concurrent Release() calls returned nil; want exactly 1"},
		{"close-concurrent-early", "CloseConcurrent", true, "concurrent Close() calls returned"},
		{"close-misses-racing-acquire", "CloseRace", true, "still held after Close returned"},
		{"cancel-drops-late-grant", "CancelInFlight", true, "--- FAIL"},
		{"release-cancelled-noop", "ReleaseCancelledContext", true, "Done() open after Release returned"},
		{"observe-outlives-close", "ObserveEndsOnClose", true, "channel open after Close returned"},
		{"none", "ObserveSessionLoss", false, "PASS"},
		{"observe-ends-on-loss", "ObserveSessionLoss", true, "observation ended: observe: watch lost with the connection"},
		{"observe-deaf-after-loss", "ObserveSessionLoss", true, "the next holder observed did not return within"},
		{"observe-repeats-after-loss", "ObserveSessionLoss", true, "twice in a row"},
		{"shared-is-exclusive", "SharedExclusion", true, "AcquireShared while another Locker's reader holds did not return"},
		{"shared-ignores-writer", "SharedExclusion", true, "TryAcquire while readers hold = "},
		{"readers-overtake", "SharedFIFO", true, "reader that arrived after a queued writer returned"},
		{"readers-overtake", "TryAcquireShared", true, "TryAcquireShared while a writer waits = "},
		{"reader-token-offset", "SharedTokens", true, "(a reader admitted before it)"},
		{"ignore-cancel", "SharedHandover", true, "writer's Acquire after its context was cancelled did not return"},
		{"close-noop", "SharedHandover", true, "reader lease after Close of its Locker"},
		{"retry-on-lost", "SharedSessionExpiry", true, "AcquireShared waiting on an expired session did not return"},
		{"expiry-reports-released", "SharedSessionExpiry", true, "reader Err() after session expiry"},
		{"semaphore-off-by-one", "SemaphoreLimit", true, "holders at once; want at most 3"},
		{"semaphore-off-by-one", "SemaphoreFIFO", true, "with every permit taken = "},
		{"semaphore-lifo", "SemaphoreFIFO", true, "first waiter after the later holder released did not return"},
		// The waiter behind an admitted permit is never told to watch the
		// holders, and misses the next release.
		{"semaphore-no-touch", "SemaphoreFIFO", true, "second waiter after both first holders released did not return"},
		{"ignore-incompatible", "SemaphoreIncompatible", true, "want nil, an error wrapping incompatible request"},
		{"limit-default", "SemaphoreIncompatible", true, "TryAcquireSemaphore(limit 0) = "},
		{"ignore-cancel", "SemaphoreHandover", true, "AcquireSemaphore after its context was cancelled did not return"},
		{"close-noop", "SemaphoreHandover", true, "permit after Close of its Locker"},
		{"retry-on-lost", "SemaphoreSessionExpiry", true, "AcquireSemaphore waiting on an expired session did not return"},
		{"expiry-reports-released", "SemaphoreSessionExpiry", true, "permit Err() after session expiry"},
		{"revoke-any-token", "Revoke", true, "while token"},
		{"expiry-reports-released", "Revoke", true, "revoked lease: Err() = "},
		{"revoke-all-permits", "RevokeSemaphore", true, "Err() = "},
		{"revoke-needs-holder", "RevokeFrozenHolder", true, "waiter's Acquire after a frozen holder was revoked did not return"},
		{"queue-waiters-reversed", "Queue", true, "want rising tokens (queue order)"},
		{"queue-stale", "Queue", true, "after the holder released"},
		{"queue-all-held", "Queue", true, "Held:true Position:1"},
		{"queue-no-kind", "QueueShared", true, "shared true, token"},
		{"holders-reversed", "Holders", true, "(grant order)"},
		{"holders-not-shared", "Holders", true, "two readers and a queued writer"},
		{"healthy-after-close", "Healthy", true, "Healthy() after Close = <nil>"},
		{"healthy-stays-lost", "HealthyAfterExpiry", true, "Healthy() after the session expired = "},
		{"multi-one-short", "MultiAcquireRelease", true, "on another Locker while a MultiLease holds it = "},
		{"multi-shuffled", "MultiNoDeadlock", true, "context deadline exceeded; want a MultiLease within"},
		{"multi-keeps-taken", "MultiTryAcquire", true, "after TryAcquireAll returned ErrLocked = "},
		{"multi-keeps-taken", "MultiCancel", true, "after a cancelled AcquireAll = "},
		{"multi-no-wait", "MultiWaitsForEach", true, "AcquireAll queued behind a plain lease: Records("},
		{"claims-refusal", "Refused", true, "want nil, an error wrapping incompatible request"},
		{"claims-session-keyed", "IndependentNames", true, "while a name below it is held = "},
		{"required-missing", "AcquireRelease", true, "SessionFreezer (Harness)), HealthyAfterExpiry (needs lock.HealthChecker (Locker) and SessionExpirer (Harness)); Options.RequireOptional is set"},
	}
	for _, tt := range tests {
		t.Run(tt.fault+"/"+tt.subtest, func(t *testing.T) {
			t.Parallel()
			run := "^TestFaulty$"
			if tt.subtest != "" {
				run += "/^" + tt.subtest + "$"
			}
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1", "-test.timeout=60s")
			cmd.Env = append(os.Environ(), faultEnv+"="+tt.fault)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("running the child: %v", err)
			case tt.wantFail && err == nil:
				t.Fatalf("suite passed a Locker with fault %q; want subtest %s to fail. Output:\n%s", tt.fault, tt.subtest, out)
			case !tt.wantFail && err != nil:
				t.Fatalf("suite failed with fault %q: %v. Output:\n%s", tt.fault, err, out)
			}
			// A fault in the options fails the suite itself, not a check.
			failed := "--- FAIL: TestFaulty/" + tt.subtest
			if tt.fault == "required-missing" {
				failed = "--- FAIL: TestFaulty ("
			}
			if tt.wantFail && !strings.Contains(string(out), failed) {
				t.Errorf("child output lacks a failure of subtest %s. Output:\n%s", tt.subtest, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("child output lacks %q. Output:\n%s", tt.want, out)
			}
		})
	}
}

// faultyHarness hands out Memory Lockers wrapped with one fault.
type faultyHarness struct {
	fault string
	m     *locktest.Memory

	mu     sync.Mutex
	mems   []*locktest.Memory        // split-brain: one Memory per Locker
	frozen map[*faulty]chan struct{} // closed when the Locker thaws
	perTok map[string]fencing.Token  // token-per-name: one counter per name
}

func (h *faultyHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	m := h.m
	if h.fault == "split-brain" {
		m = locktest.NewMemory()
		h.mu.Lock()
		h.mems = append(h.mems, m)
		h.mu.Unlock()
	}
	ml := m.NewLocker(identity)
	t.Cleanup(func() { _ = ml.Close() })
	f := &faulty{MemLocker: ml, m: m, h: h, fault: h.fault, held: map[string]lock.Lease{}, latest: map[string]lock.Lease{}}
	switch h.fault {
	case "close-leaves-records", "close-misses-racing-acquire":
		// A second client of the same identity, never closed by the
		// Locker's Close (only when the test ends).
		f.shadow = m.NewLocker(identity)
		t.Cleanup(func() { _ = f.shadow.Close() })
	}
	return f
}

// FreezeSession marks the Locker frozen until thawed: only the
// revoke-needs-holder fault looks at it, as a Memory has no network.
func (h *faultyHarness) FreezeSession(t *testing.T, l lock.Locker) func() {
	f := l.(*faulty)
	thawed := make(chan struct{})
	f.cutOff()
	h.mu.Lock()
	if h.frozen == nil {
		h.frozen = map[*faulty]chan struct{}{}
	}
	h.frozen[f] = thawed
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.frozen, f)
		h.mu.Unlock()
		close(thawed)
	}
}

func (h *faultyHarness) StallSession(t *testing.T, l lock.Locker) {
	h.ExpireSession(t, l)
}

func (h *faultyHarness) ExpireSession(t *testing.T, l lock.Locker) {
	f := l.(*faulty)
	f.cutOff()
	f.m.ExpireSession(f.MemLocker)
}

func (h *faultyHarness) Records(t *testing.T, name string) []string {
	if h.fault == "semaphore-lifo" {
		return append(h.m.Records(name), h.m.Records(name+"/wait")...)
	}
	if h.fault != "split-brain" {
		return h.m.Records(name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var recs []string
	for _, m := range h.mems {
		recs = append(recs, m.Records(name)...)
	}
	return recs
}

// faulty is a MemLocker with one fault.
type faulty struct {
	*locktest.MemLocker
	m     *locktest.Memory
	h     *faultyHarness
	fault string

	shadow *locktest.MemLocker // close-leaves-records, close-misses-racing-acquire

	mu      sync.Mutex
	nextTok fencing.Token
	held    map[string]lock.Lease        // reentrant
	latest  map[string]lock.Lease        // the last lease granted per name
	seen    map[string]lock.Holder       // holder-cached
	queues  map[string][]lock.QueueEntry // queue-stale
	cut     chan struct{}                // closed and replaced when the harness cuts the Locker off
	closers int                          // close-concurrent-early: Close calls in progress
	arrived chan struct{}                // close-concurrent-early: closed when a second Close arrives
}

func (f *faulty) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	switch f.fault {
	case "ignore-deadline":
		// Honours cancellation but not a deadline.
		inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			if errors.Is(ctx.Err(), context.Canceled) {
				cancel()
			}
		})
		defer stop()
		return f.wrap(f.MemLocker.Acquire(inner, name))
	case "close-misses-racing-acquire":
		le, err := f.MemLocker.Acquire(ctx, name)
		if errors.Is(err, lock.ErrClosed) {
			return f.wrap(f.shadow.TryAcquire(ctx, name))
		}
		return f.wrap(le, err)
	case "cancel-drops-late-grant":
		// The grant's reply takes a moment; a call cancelled meanwhile
		// forgets the record it created.
		le, err := f.MemLocker.TryAcquire(context.WithoutCancel(ctx), name)
		if errors.Is(err, lock.ErrLocked) {
			return f.wrap(f.MemLocker.Acquire(ctx, name))
		}
		if err == nil {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
		return f.wrap(le, err)
	case "prefix-locks":
		if err := f.prefixHeld(name); err != nil {
			return nil, err
		}
	case "reject-long":
		if len(name) > 200 {
			return nil, fmt.Errorf("faulty: %q: %w: longer than 200 bytes", name, lock.ErrInvalidName)
		}
	case "ignore-cancel":
		return f.wrap(f.MemLocker.Acquire(context.WithoutCancel(ctx), name))
	case "abandon-on-cancel":
		// Gives up on the wait but leaves the inner Acquire queued.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		type res struct {
			le  lock.Lease
			err error
		}
		ch := make(chan res, 1)
		go func() {
			le, err := f.MemLocker.Acquire(context.WithoutCancel(ctx), name)
			ch <- res{le, err}
		}()
		select {
		case r := <-ch:
			return f.wrap(r.le, r.err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "retry-on-lost":
		for {
			le, err := f.MemLocker.Acquire(ctx, name)
			if !errors.Is(err, lock.ErrLost) {
				return f.wrap(le, err)
			}
		}
	case "reentrant":
		f.mu.Lock()
		defer f.mu.Unlock()
		if le := f.held[name]; le != nil && le.Err() == nil {
			return le, nil
		}
		le, err := f.MemLocker.Acquire(ctx, name)
		if err == nil {
			f.held[name] = le
		}
		return le, err
	case "accept-invalid":
		return f.wrap(f.MemLocker.Acquire(ctx, validName(name)))
	}
	return f.wrap(f.MemLocker.Acquire(ctx, name))
}

// prefixHeld is the prefix-locks fault: a name counts as held when a
// string prefix of it is, as with a range read by key prefix.
func (f *faulty) prefixHeld(name string) error {
	for i := 1; i < len(name); i++ {
		if len(f.m.Records(name[:i])) > 0 {
			return fmt.Errorf("faulty: %q: %w", name, lock.ErrLocked)
		}
	}
	return nil
}

func (f *faulty) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	switch f.fault {
	case "close-misses-racing-acquire":
		le, err := f.MemLocker.TryAcquire(ctx, name)
		if errors.Is(err, lock.ErrClosed) {
			return f.wrap(f.shadow.TryAcquire(ctx, name))
		}
		return f.wrap(le, err)
	case "prefix-locks":
		if err := f.prefixHeld(name); err != nil {
			return nil, err
		}
	case "reject-long":
		if len(name) > 200 {
			return nil, fmt.Errorf("faulty: %q: %w: longer than 200 bytes", name, lock.ErrInvalidName)
		}
	case "ignore-cancel":
		return f.wrap(f.MemLocker.TryAcquire(context.WithoutCancel(ctx), name))
	case "try-leaves-record":
		le, err := f.MemLocker.TryAcquire(ctx, name)
		if errors.Is(err, lock.ErrLocked) {
			// Queues a record nobody will collect (Close ends it), and
			// returns once it exists.
			n := len(f.m.Records(name))
			go func() { _, _ = f.MemLocker.Acquire(context.WithoutCancel(ctx), name) }()
			for len(f.m.Records(name)) == n {
				runtime.Gosched()
			}
		}
		return f.wrap(le, err)
	case "accept-invalid":
		return f.wrap(f.MemLocker.TryAcquire(ctx, validName(name)))
	}
	return f.wrap(f.MemLocker.TryAcquire(ctx, name))
}

func (f *faulty) Holder(ctx context.Context, name string) (lock.Holder, error) {
	switch f.fault {
	case "accept-invalid":
		name = validName(name)
	case "holder-cached":
		// Remembers the first holder it saw of each name.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.seen == nil {
			f.seen = map[string]lock.Holder{}
		}
		if h, ok := f.seen[name]; ok {
			return h, nil
		}
		h, err := f.MemLocker.Holder(ctx, name)
		if err == nil {
			f.seen[name] = h
		}
		return h, err
	}
	return f.MemLocker.Holder(ctx, name)
}

func (f *faulty) Close() error {
	switch f.fault {
	case "close-noop":
		return nil
	case "close-leaves-records":
		// Ends the leases but puts their records back, as a Close that
		// forgets to delete them would leave them.
		f.mu.Lock()
		var names []string
		for n, le := range f.latest {
			if le.Err() == nil {
				names = append(names, n)
			}
		}
		f.mu.Unlock()
		err := f.MemLocker.Close()
		for _, n := range names {
			_, _ = f.shadow.TryAcquire(context.Background(), n)
		}
		return err
	case "close-concurrent-early":
		// A Close that finds another in progress returns at once. The
		// first one takes a while, as a Close busy with the network would.
		f.mu.Lock()
		f.closers++
		first := f.closers == 1
		f.mu.Unlock()
		if !first {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
		return f.MemLocker.Close()
	}
	return f.MemLocker.Close()
}

func (f *faulty) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	ch, errf, err := f.MemLocker.Observe(ctx, name)
	if err != nil {
		return ch, errf, err
	}
	out := make(chan lock.Holder)
	switch f.fault {
	case "observe-ends-on-loss", "observe-deaf-after-loss", "observe-repeats-after-loss":
		out, errf := f.observeAfterLoss(ctx, ch, errf)
		return out, errf, nil
	case "observe-outlives-close":
		// Forwards until ctx ends, not when the Locker closes.
		go func() {
			defer close(out)
			for h := range ch {
				select {
				case out <- h:
				case <-ctx.Done():
					return
				}
			}
			<-ctx.Done()
		}()
		return out, errf, nil
	case "observe-skips-free":
	case "observe-conflates":
		// Keeps only the latest holder while the reader is busy, as an
		// observer that re-reads the state after each notification does.
		go func() {
			defer close(out)
			var latest lock.Holder
			have := false
			for {
				var send chan<- lock.Holder
				if have {
					send = out
				}
				select {
				case h, ok := <-ch:
					if !ok {
						return
					}
					latest, have = h, true
				case send <- latest:
					have = false
				}
			}
		}()
		return out, errf, nil
	default:
		return ch, errf, err
	}
	go func() {
		defer close(out)
		first := true
		for h := range ch {
			if h == (lock.Holder{}) && !first {
				continue
			}
			first = false
			select {
			case out <- h:
			case <-ctx.Done():
			}
		}
	}()
	return out, errf, nil
}

// cutOff tells the observe-*-after-loss faults that the harness cut the
// Locker off (froze, stalled or expired its session).
// Healthy implements lock.HealthChecker, with the faults
// healthy-after-close (a closed Locker still says it is healthy) and
// healthy-stays-lost (once cut off, it never recovers).
func (f *faulty) Healthy(ctx context.Context) error {
	switch f.fault {
	case "healthy-after-close":
		if err := f.MemLocker.Healthy(ctx); errors.Is(err, lock.ErrClosed) {
			return nil
		}
	case "healthy-stays-lost":
		f.mu.Lock()
		cut := f.cut != nil
		f.mu.Unlock()
		if cut {
			return fmt.Errorf("faulty: healthy: %w: the session expired", lock.ErrLost)
		}
	}
	return f.MemLocker.Healthy(ctx)
}

func (f *faulty) cutOff() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut != nil {
		close(f.cut)
	}
	f.cut = make(chan struct{})
}

func (f *faulty) cutChan() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut == nil {
		f.cut = make(chan struct{})
	}
	return f.cut
}

// observeAfterLoss forwards an observation until the harness cuts the
// Locker off, and then, by fault: ends it (as an observer that treats a
// lost connection as the end), stops forwarding (one whose watch is not
// set again on the new connection), or sends the last holder again (one
// that reports the listing it takes after reconnecting unconditionally).
func (f *faulty) observeAfterLoss(ctx context.Context, ch <-chan lock.Holder, errf func() error) (<-chan lock.Holder, func() error) {
	out := make(chan lock.Holder)
	var mu sync.Mutex
	var endErr error
	cut := f.cutChan()
	go func() {
		defer close(out)
		var last lock.Holder
		have := false
		for {
			select {
			case h, ok := <-ch:
				if !ok {
					return
				}
				last, have = h, true
				select {
				case out <- h:
				case <-ctx.Done():
					return
				}
			case <-cut:
				switch f.fault {
				case "observe-ends-on-loss":
					mu.Lock()
					endErr = errors.New("observe: watch lost with the connection")
					mu.Unlock()
					return
				case "observe-deaf-after-loss":
					<-ctx.Done()
					return
				}
				cut = f.cutChan()
				if have {
					select {
					case out <- last:
					case <-ctx.Done():
						return
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, func() error {
		mu.Lock()
		defer mu.Unlock()
		if endErr != nil {
			return endErr
		}
		return errf()
	}
}

func validName(name string) string {
	if lock.ValidateName(name) != nil {
		return "fallback"
	}
	return name
}

func (f *faulty) wrap(le lock.Lease, err error) (lock.Lease, error) {
	if err != nil {
		return le, err
	}
	w := &faultyLease{Lease: le, f: f, fault: f.fault, tok: le.Token()}
	f.mu.Lock()
	switch f.fault {
	case "token-per-locker":
		f.nextTok++
		w.tok = f.nextTok
	case "token-per-name":
		// Rising per name, as a per-name sequence counter would be, but
		// unrelated across names.
		f.h.mu.Lock()
		if f.h.perTok == nil {
			f.h.perTok = map[string]fencing.Token{}
		}
		f.h.perTok[le.Name()]++
		w.tok = f.h.perTok[le.Name()]
		f.h.mu.Unlock()
	}
	f.latest[le.Name()] = w
	f.mu.Unlock()
	return w, nil
}

type faultyLease struct {
	lock.Lease
	f     *faulty
	fault string
	tok   fencing.Token

	lateOnce sync.Once
	late     chan struct{} // done-after-grant

	mu        sync.Mutex
	releasing int           // release-concurrent-nil: calls in progress
	second    chan struct{} // release-concurrent-nil: closed when a second call arrives
}

var never = make(chan struct{})

func (l *faultyLease) Token() fencing.Token { return l.tok }

func (l *faultyLease) Done() <-chan struct{} {
	switch l.fault {
	case "done-never-closed":
		return never
	case "done-after-grant":
		// Closes once the lease has ended and the lock has a new holder
		// (or after a second), as a Done driven by a slow notification
		// would.
		l.lateOnce.Do(func() {
			l.late = make(chan struct{})
			go func() {
				defer close(l.late)
				<-l.Lease.Done()
				deadline := time.Now().Add(time.Second)
				for time.Now().Before(deadline) {
					recs := l.f.m.Records(l.Name())
					if len(recs) > 0 && recs[0] != fmt.Sprintf("%s/%d", l.Name(), l.tok) {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
		})
		return l.late
	}
	return l.Lease.Done()
}

func (l *faultyLease) Err() error {
	err := l.Lease.Err()
	if l.fault == "expiry-reports-released" && errors.Is(err, lock.ErrLost) {
		return fmt.Errorf("faulty: %w", lock.ErrReleased)
	}
	return err
}

func (l *faultyLease) Release(ctx context.Context) error {
	switch l.fault {
	case "release-cancelled-noop":
		if err := ctx.Err(); err != nil {
			return err
		}
	case "release-lost-ends-regrant":
		// Releasing a lost lease releases the Locker's current lease of
		// the name: the release is keyed by name, not by grant.
		if errors.Is(l.Lease.Err(), lock.ErrLost) {
			l.f.mu.Lock()
			cur := l.f.latest[l.Name()]
			l.f.mu.Unlock()
			if cur != nil && cur != lock.Lease(l) {
				_ = cur.Release(ctx)
			}
		}
	case "release-concurrent-nil":
		// A Release that finds another in progress waits for it and
		// reports success too. The first waits a moment for a second
		// caller, as a Release busy with the network would.
		l.mu.Lock()
		l.releasing++
		if l.releasing > 1 {
			if l.releasing == 2 {
				close(l.second)
			}
			l.mu.Unlock()
			<-l.Lease.Done()
			return nil
		}
		l.second = make(chan struct{})
		second := l.second
		l.mu.Unlock()
		select {
		case <-second:
		case <-time.After(200 * time.Millisecond):
		}
	}
	err := l.Lease.Release(ctx)
	if l.fault == "release-twice-nil" && errors.Is(err, lock.ErrReleased) {
		return nil
	}
	return err
}

func TestMemoryZeroValue(t *testing.T) {
	var m locktest.Memory
	l := m.NewLocker("zero")
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	le, err := l.Acquire(ctx, "zero/value")
	if err != nil {
		t.Fatalf("Acquire() on a zero Memory = %v; want nil", err)
	}
	if le.Token() != 1 {
		t.Errorf("first Token() = %d; want 1", le.Token())
	}
	if got := m.Records("zero/value"); len(got) != 1 {
		t.Errorf("Records() = %q; want one record", got)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
}

func TestMemoryDefaultIdentity(t *testing.T) {
	m := locktest.NewMemory()
	a, b := m.NewLocker(""), m.NewLocker("")
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	host, _ := os.Hostname()
	for _, id := range []string{a.Identity(), b.Identity()} {
		if parts := strings.Split(id, "/"); len(parts) != 3 || parts[1] != fmt.Sprint(os.Getpid()) || (host != "" && parts[0] != host) {
			t.Errorf("default Identity() = %q; want hostname/pid/random", id)
		}
	}
	if a.Identity() == b.Identity() {
		t.Errorf("two default identities are both %q; want them distinct", a.Identity())
	}
}

func TestMemoryObserveEndsOnClose(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("watcher")
	ch, errf, err := l.Observe(context.Background(), "observed/close")
	if err != nil {
		t.Fatalf("Observe() = %v; want nil", err)
	}
	if h := <-ch; h != (lock.Holder{}) {
		t.Errorf("first observed holder = %+v; want the zero Holder (free)", h)
	}
	if err := errf(); err != nil {
		t.Errorf("error function during the observation = %v; want nil", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}
	// Close waited for the observation's goroutine, so the channel is
	// already closed.
	select {
	case h, ok := <-ch:
		if ok {
			t.Errorf("observed %+v after Close; want the channel closed", h)
		}
	default:
		t.Fatalf("observation channel still open after Close returned")
	}
	if err := errf(); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("error function after Close = %v; want an error wrapping %v", err, lock.ErrClosed)
	}
}

// The faults of the optional interfaces for read-write locks, semaphores
// and the list of holders. Side names (name + "/…") stand for grants made
// outside the name's queue, as a backend that keys them apart would make.

// bigLimit makes a semaphore that admits everyone.
const bigLimit = 1 << 20

func (f *faulty) AcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	switch f.fault {
	case "shared-is-exclusive":
		return f.wrap(f.MemLocker.Acquire(ctx, name))
	case "shared-ignores-writer":
		return f.wrap(f.MemLocker.AcquireSemaphore(ctx, name+"/r", bigLimit))
	case "readers-overtake":
		if le, ok := f.overtake(ctx, name); ok {
			return le, nil
		}
	case "ignore-cancel":
		ctx = context.WithoutCancel(ctx)
	case "retry-on-lost":
		for {
			le, err := f.MemLocker.AcquireShared(ctx, name)
			if !errors.Is(err, lock.ErrLost) {
				return f.wrapShared(le, err)
			}
		}
	case "ignore-incompatible":
		le, err := f.MemLocker.AcquireShared(ctx, name)
		if errors.Is(err, lock.ErrIncompatible) {
			return f.wrap(f.MemLocker.AcquireShared(ctx, name+"/shared"))
		}
		return f.wrap(le, err)
	}
	return f.wrapShared(f.MemLocker.AcquireShared(ctx, name))
}

func (f *faulty) TryAcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	switch f.fault {
	case "shared-is-exclusive":
		return f.wrap(f.MemLocker.TryAcquire(ctx, name))
	case "shared-ignores-writer":
		return f.wrap(f.MemLocker.TryAcquireSemaphore(ctx, name+"/r", bigLimit))
	case "readers-overtake":
		if le, ok := f.overtake(ctx, name); ok {
			return le, nil
		}
	case "ignore-incompatible":
		le, err := f.MemLocker.TryAcquireShared(ctx, name)
		if errors.Is(err, lock.ErrIncompatible) {
			return f.wrap(f.MemLocker.TryAcquireShared(ctx, name+"/shared"))
		}
		return f.wrap(le, err)
	}
	return f.wrapShared(f.MemLocker.TryAcquireShared(ctx, name))
}

// overtake is the readers-overtake fault: a reader is admitted at once
// whenever only readers hold the lock, queued writers or not, as by a
// backend that looks at the holders rather than at the queue. It still
// queues a record (collected by Close), so that the suite sees one record
// per request.
func (f *faulty) overtake(ctx context.Context, name string) (lock.Lease, bool) {
	hs, err := f.MemLocker.Holders(ctx, name)
	if err != nil || len(hs) == 0 || slices.ContainsFunc(hs, func(h lock.Holder) bool { return !h.Shared }) {
		return nil, false
	}
	n := len(f.m.Records(name))
	go func() { _, _ = f.MemLocker.AcquireShared(context.WithoutCancel(ctx), name) }()
	// Bounded, in case the Locker closes meanwhile and no record comes.
	for deadline := time.Now().Add(time.Second); len(f.m.Records(name)) == n && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	le, err := f.wrap(f.MemLocker.TryAcquireSemaphore(ctx, name+"/overtake", bigLimit))
	return le, err == nil
}

// wrapShared wraps a shared grant; with reader-token-offset its token comes
// from a range of its own, as if readers drew tokens from another counter.
func (f *faulty) wrapShared(le lock.Lease, err error) (lock.Lease, error) {
	le, err = f.wrap(le, err)
	if err == nil && f.fault == "reader-token-offset" {
		le.(*faultyLease).tok += 1 << 40
	}
	return le, err
}

func (f *faulty) AcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	switch f.fault {
	case "semaphore-off-by-one":
		limit++
	case "limit-default":
		limit = max(limit, 1)
	case "ignore-cancel":
		ctx = context.WithoutCancel(ctx)
	case "retry-on-lost":
		for {
			le, err := f.MemLocker.AcquireSemaphore(ctx, name, limit)
			if !errors.Is(err, lock.ErrLost) {
				return f.wrap(le, err)
			}
		}
	case "ignore-incompatible":
		le, err := f.MemLocker.AcquireSemaphore(ctx, name, limit)
		if errors.Is(err, lock.ErrIncompatible) {
			return f.wrap(f.MemLocker.AcquireSemaphore(ctx, fmt.Sprintf("%s/%d", name, limit), limit))
		}
		return f.wrap(le, err)
	case "semaphore-lifo":
		return f.lifo(ctx, name, limit)
	}
	return f.wrap(f.MemLocker.AcquireSemaphore(ctx, name, limit))
}

func (f *faulty) TryAcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	switch f.fault {
	case "semaphore-off-by-one":
		limit++
	case "limit-default":
		limit = max(limit, 1)
	case "ignore-incompatible":
		le, err := f.MemLocker.TryAcquireSemaphore(ctx, name, limit)
		if errors.Is(err, lock.ErrIncompatible) {
			return f.wrap(f.MemLocker.TryAcquireSemaphore(ctx, fmt.Sprintf("%s/%d", name, limit), limit))
		}
		return f.wrap(le, err)
	}
	return f.wrap(f.MemLocker.TryAcquireSemaphore(ctx, name, limit))
}

// lifo is the semaphore-lifo fault: waiters queue apart (under name +
// "/wait", which the harness counts as records of name) and the newest
// takes the next free permit.
func (f *faulty) lifo(ctx context.Context, name string, limit int) (lock.Lease, error) {
	le, err := f.MemLocker.TryAcquireSemaphore(ctx, name, limit)
	if !errors.Is(err, lock.ErrLocked) {
		return f.wrap(le, err)
	}
	ph, err := f.MemLocker.AcquireSemaphore(ctx, name+"/wait", bigLimit)
	if err != nil {
		return nil, err
	}
	defer ph.Release(context.Background())
	mine := fmt.Sprintf("%s/wait/%d", name, ph.Token())
	for {
		// The placeholder may be gone already (Close, expiry): then
		// ph.Done below ends the wait.
		if recs := f.m.Records(name + "/wait"); len(recs) > 0 && recs[len(recs)-1] == mine {
			le, err := f.MemLocker.TryAcquireSemaphore(ctx, name, limit)
			if !errors.Is(err, lock.ErrLocked) {
				return f.wrap(le, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ph.Done():
			return nil, ph.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (f *faulty) Holders(ctx context.Context, name string) ([]lock.Holder, error) {
	hs, err := f.MemLocker.Holders(ctx, name)
	switch f.fault {
	case "holders-reversed":
		slices.Reverse(hs)
	case "holders-not-shared":
		for i := range hs {
			hs[i].Shared, hs[i].Limit = false, 0
		}
	}
	return hs, err
}

// Revoke faults. Lockers of a harness find one another's leases through
// the harness.
func (f *faulty) Revoke(ctx context.Context, name string, token fencing.Token) error {
	switch f.fault {
	case "revoke-any-token":
		// Revokes whoever holds name, whatever the token: a revocation
		// keyed by name.
		h, err := f.MemLocker.Holder(ctx, name)
		if err != nil {
			return err
		}
		return f.MemLocker.Revoke(ctx, name, h.Token)
	case "revoke-all-permits":
		// Revokes every holder of name once one of them matches.
		hs, err := f.MemLocker.Holders(ctx, name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(hs, func(h lock.Holder) bool { return h.Token == token }) {
			return f.MemLocker.Revoke(ctx, name, token)
		}
		for _, h := range hs {
			if err := f.MemLocker.Revoke(ctx, name, h.Token); err != nil {
				return err
			}
		}
		return nil
	case "revoke-needs-holder":
		// The holder's process does the deletion: while it is frozen,
		// nothing happens.
		f.h.mu.Lock()
		var wait chan struct{}
		for g, thawed := range f.h.frozen {
			g.mu.Lock()
			if le := g.latest[name]; le != nil && le.Token() == token {
				wait = thawed
			}
			g.mu.Unlock()
		}
		f.h.mu.Unlock()
		if wait != nil {
			go func() {
				<-wait
				_ = f.MemLocker.Revoke(context.Background(), name, token)
			}()
			return nil
		}
	}
	return f.MemLocker.Revoke(ctx, name, token)
}

func (f *faulty) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	es, err := f.MemLocker.Queue(ctx, name)
	if err != nil {
		return es, err
	}
	switch f.fault {
	case "queue-waiters-reversed":
		// Waiters listed newest first, as by a listing sorted the wrong
		// way; positions renumbered.
		i := slices.IndexFunc(es, func(e lock.QueueEntry) bool { return !e.Held })
		if i >= 0 {
			slices.Reverse(es[i:])
		}
		for j := range es {
			es[j].Position = j
		}
	case "queue-stale":
		// Remembers the first non-empty listing of each name.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.queues == nil {
			f.queues = map[string][]lock.QueueEntry{}
		}
		if old, ok := f.queues[name]; ok {
			return old, nil
		}
		if len(es) > 0 {
			f.queues[name] = es
		}
	case "queue-all-held":
		for j := range es {
			es[j].Held = true
		}
	case "queue-no-kind":
		for j := range es {
			es[j].Shared, es[j].Limit = false, 0
		}
	}
	return es, nil
}

// AcquireAll and TryAcquireAll make every faulty Locker a lock.MultiLocker
// that takes the names one by one in the sorted order it is given, so that
// the Multi subtests run lock.AcquireAll's native path too.
func (f *faulty) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return f.all(ctx, names, f.fault == "multi-no-wait")
}

func (f *faulty) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return f.all(ctx, names, true)
}

// all takes names, with the faults multi-one-short (the last name is
// taken under another name), multi-shuffled (in random order, pausing
// between names, as a backend that does not sort them), multi-keeps-taken
// (on an error, the names taken stay held) and multi-no-wait (AcquireAll
// does not wait).
func (f *faulty) all(ctx context.Context, names []string, try bool) ([]lock.Lease, error) {
	order := slices.Clone(names)
	if f.fault == "multi-shuffled" {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	var les []lock.Lease
	for i, name := range order {
		as, call := name, f.Acquire
		if try {
			call = f.TryAcquire
		}
		if f.fault == "multi-one-short" && i == len(order)-1 {
			as += "-short"
		}
		le, err := call(ctx, as)
		if err != nil {
			for _, held := range les {
				if f.fault != "multi-keeps-taken" {
					_ = held.Release(context.WithoutCancel(ctx))
				}
			}
			return nil, err
		}
		les = append(les, renamed{le, name})
		if f.fault == "multi-shuffled" {
			time.Sleep(time.Millisecond)
		}
	}
	slices.SortFunc(les, func(a, b lock.Lease) int { return strings.Compare(a.Name(), b.Name()) })
	return les, nil
}

// renamed is a lease that reports name as its Name.
type renamed struct {
	lock.Lease
	name string
}

func (r renamed) Name() string { return r.name }
