package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// suite holds what every subtest needs.
type suite struct {
	h       Harness
	o       Options
	expirer SessionExpirer // nil if h does not implement it
	staller SessionStaller // nil if h does not implement it
	freezer SessionFreezer // nil if h does not implement it
	lister  RecordLister   // nil if h does not implement it
	implements
}

// implements says which optional interfaces the Lockers implement.
type implements struct {
	observer bool // lock.Observer
	shared   bool // lock.SharedLocker
	sem      bool // lock.Semaphore
	holders  bool // lock.HolderLister
	revoker  bool // lock.Revoker
	queuer   bool // lock.QueueLister
	health   bool // lock.HealthChecker
}

// A subtest is one check. needs names the optional interface it depends
// on ("" for none); it runs only when that interface is present.
type subtest struct {
	name  string
	fn    func(t *testing.T)
	needs string
}

// Optional interfaces, as named in subtest.needs and in the log line that
// lists the checks that did not apply.
const (
	needsExpirer  = "SessionExpirer (Harness)"
	needsStaller  = "SessionStaller (Harness)"
	needsObserver = "lock.Observer (Locker)"
	needsShared   = "lock.SharedLocker (Locker)"
	needsSem      = "lock.Semaphore (Locker)"
	needsHolders  = "lock.HolderLister (Locker)"
	needsRevoker  = "lock.Revoker (Locker)"
	needsFreezer  = "SessionFreezer (Harness)"
	needsQueue    = "lock.QueueLister (Locker)"
	needsHealth   = "lock.HealthChecker (Locker)"
	// Two interfaces at once.
	needsSharedExpirer = needsShared + " and " + needsExpirer
	needsSemExpirer    = needsSem + " and " + needsExpirer
	needsRevokerSem    = needsRevoker + " and " + needsSem
	needsRevokerFreeze = needsRevoker + " and " + needsFreezer
	needsQueueShared   = needsQueue + " and " + needsShared
	needsObserveLoss   = needsObserver + " and " + needsStaller
	needsHealthExpirer = needsHealth + " and " + needsExpirer
)

func (s *suite) subtests() []subtest {
	return []subtest{
		{"AcquireRelease", s.testAcquireRelease, ""},
		{"TryAcquire", s.testTryAcquire, ""},
		{"TokensIncrease", s.testTokensIncrease, ""},
		{"TokensAcrossNames", s.testTokensAcrossNames, ""},
		{"SameLockerExcludes", s.testSameLockerExcludes, ""},
		{"MutualExclusion", s.testMutualExclusion, ""},
		{"FIFO", s.testFIFO, ""},
		{"CancelWait", s.testCancelWait, ""},
		{"DeadlineWait", s.testDeadlineWait, ""},
		{"CancelledContext", s.testCancelledContext, ""},
		{"CancelInFlight", s.testCancelInFlight, ""},
		{"ReleaseCancelledContext", s.testReleaseCancelledContext, ""},
		{"Holder", s.testHolder, ""},
		{"DoneBeforeNextGrant", s.testDoneBeforeNextGrant, ""},
		{"ReleaseTwice", s.testReleaseTwice, ""},
		{"ReleaseConcurrent", s.testReleaseConcurrent, ""},
		{"Close", s.testClose, ""},
		{"CloseConcurrent", s.testCloseConcurrent, ""},
		{"CloseRace", s.testCloseRace, ""},
		{"InvalidName", s.testInvalidName, ""},
		{"LongName", s.testLongName, ""},
		{"IndependentNames", s.testIndependentNames, ""},
		{"SessionExpiry", s.testSessionExpiry, needsExpirer},
		{"SessionExpiryWaiter", s.testSessionExpiryWaiter, needsExpirer},
		{"ReleaseLostLease", s.testReleaseLostLease, needsExpirer},
		{"LossDoneBeforeNextGrant", s.testLossDoneBeforeNextGrant, needsStaller},
		{"Observe", s.testObserve, needsObserver},
		{"ObserveEndsOnClose", s.testObserveEndsOnClose, needsObserver},
		{"ObserveSessionLoss", s.testObserveSessionLoss, needsObserveLoss},
		{"SharedExclusion", s.testSharedExclusion, needsShared},
		{"SharedFIFO", s.testSharedFIFO, needsShared},
		{"TryAcquireShared", s.testTryAcquireShared, needsShared},
		{"SharedTokens", s.testSharedTokens, needsShared},
		{"SharedHandover", s.testSharedHandover, needsShared},
		{"SharedSessionExpiry", s.testSharedSessionExpiry, needsSharedExpirer},
		{"SemaphoreLimit", s.testSemaphoreLimit, needsSem},
		{"SemaphoreFIFO", s.testSemaphoreFIFO, needsSem},
		{"SemaphoreIncompatible", s.testSemaphoreIncompatible, needsSem},
		{"SemaphoreHandover", s.testSemaphoreHandover, needsSem},
		{"SemaphoreSessionExpiry", s.testSemaphoreSessionExpiry, needsSemExpirer},
		{"Holders", s.testHolders, needsHolders},
		{"Revoke", s.testRevoke, needsRevoker},
		{"RevokeSemaphore", s.testRevokeSemaphore, needsRevokerSem},
		{"RevokeFrozenHolder", s.testRevokeFrozen, needsRevokerFreeze},
		{"Queue", s.testQueue, needsQueue},
		{"QueueShared", s.testQueueShared, needsQueueShared},
		{"Healthy", s.testHealthy, needsHealth},
		{"HealthyAfterExpiry", s.testHealthyAfterExpiry, needsHealthExpirer},
	}
}

// has reports whether the optional interface need names is present.
func (s *suite) has(need string) bool {
	switch need {
	case "":
		return true
	case needsExpirer:
		return s.expirer != nil
	case needsStaller:
		return s.staller != nil
	case needsObserver:
		return s.observer
	case needsShared:
		return s.shared
	case needsSem:
		return s.sem
	case needsHolders:
		return s.holders
	case needsSharedExpirer:
		return s.shared && s.expirer != nil
	case needsSemExpirer:
		return s.sem && s.expirer != nil
	case needsRevoker:
		return s.revoker
	case needsFreezer:
		return s.freezer != nil
	case needsRevokerSem:
		return s.revoker && s.sem
	case needsRevokerFreeze:
		return s.revoker && s.freezer != nil
	case needsQueue:
		return s.queuer
	case needsQueueShared:
		return s.queuer && s.shared
	case needsObserveLoss:
		return s.observer && s.staller != nil
	case needsHealth:
		return s.health
	case needsHealthExpirer:
		return s.health && s.expirer != nil
	}
	panic("locktest: unknown optional interface " + need)
}

// newLocker returns a Locker from the harness that is closed when t ends.
func (s *suite) newLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	l := s.h.NewLocker(t, identity)
	if l == nil {
		t.Fatalf("NewLocker(%q) = nil", identity)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
	})
	return l
}

// identity returns an identity unique to this run, so that a Holder check
// cannot pass by matching a record another run left behind.
func identity(who string) string {
	return fmt.Sprintf("locktest-%s-%s", who, randHex(3))
}

// lockName returns a valid lock name that no other test or run uses.
func lockName(t *testing.T) string {
	t.Helper()
	b := []byte(t.Name())
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 150 {
		b = b[len(b)-150:]
	}
	return "locktest/" + string(b) + "-" + randHex(4)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}

// ctx returns a context for the calls of one subtest, cancelled when t
// ends. It outlasts the waits bounded by Options.Timeout, so that a call
// that hangs is reported as hanging rather than as failing with ctx's
// error.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.o.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// result is what a background Acquire returned.
type result struct {
	lease lock.Lease
	err   error
}

// goAcquire runs l.Acquire in a goroutine and delivers its result. The
// goroutine ends when Acquire returns: at the latest when ctx ends or when
// the Locker is closed by t's cleanup. A lease nobody collects is released
// by that Close.
func goAcquire(ctx context.Context, l lock.Locker, name string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		ch <- result{le, err}
	}()
	return ch
}

// await waits for a background Acquire to return.
func (s *suite) await(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r
	case <-timer.C:
		t.Fatalf("%s did not return within %v", what, s.o.Timeout)
		return result{}
	}
}

// awaitLease waits for a background Acquire to return a lease.
func (s *suite) awaitLease(t *testing.T, ch <-chan result, what string) lock.Lease {
	t.Helper()
	r := s.await(t, ch, what)
	if r.err != nil {
		t.Fatalf("%s = %v; want a lease", what, r.err)
	}
	if r.lease == nil {
		t.Fatalf("%s = nil lease, nil error", what)
	}
	return r.lease
}

// notReturned fails t if a background Acquire has returned.
func notReturned(t *testing.T, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v, %v) while the lock was held; want it to wait", what, r.lease, r.err)
	default:
	}
}

// waitRecords waits until name has n records: with a RecordLister by
// polling it, without one by waiting Options.Settle, the only place where
// the suite relies on time to order steps.
func (s *suite) waitRecords(t *testing.T, name string, n int, why string) {
	t.Helper()
	if s.lister == nil {
		time.Sleep(s.o.Settle)
		return
	}
	deadline := time.Now().Add(s.o.Timeout)
	for {
		recs := s.lister.Records(t, name)
		if len(recs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Records(%q) = %q after %v; want %d records", why, name, recs, s.o.Timeout, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// noOrphans checks, with a RecordLister, that name has no record left, or
// gets none within Options.Timeout (a backend may delete asynchronously).
func (s *suite) noOrphans(t *testing.T, name string, after string) {
	t.Helper()
	if s.lister == nil {
		return
	}
	deadline := time.Now().Add(s.o.Timeout)
	for {
		recs := s.lister.Records(t, name)
		if len(recs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after %s: Records(%q) = %q; want none (orphaned records)", after, name, recs)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkRecords checks, with a RecordLister, that name has n records now.
func (s *suite) checkRecords(t *testing.T, name string, n int, when string) {
	t.Helper()
	if s.lister == nil {
		return
	}
	if recs := s.lister.Records(t, name); len(recs) != n {
		t.Errorf("%s: Records(%q) = %q; want %d records", when, name, recs, n)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitDone waits for a lease's Done channel.
func (s *suite) waitDone(t *testing.T, le lock.Lease, what string) {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case <-le.Done():
	case <-timer.C:
		t.Fatalf("%s: Done() not closed within %v", what, s.o.Timeout)
	}
}

// mustAcquire acquires name on l or stops the test.
func (s *suite) mustAcquire(t *testing.T, ctx context.Context, l lock.Locker, name string) lock.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v; want a lease", name, err)
	}
	if le == nil {
		t.Fatalf("Acquire(%q) = nil lease, nil error", name)
	}
	return le
}

// mustRelease releases le or fails the test.
func mustRelease(t *testing.T, ctx context.Context, le lock.Lease) {
	t.Helper()
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() of %q token %d = %v; want nil", le.Name(), le.Token(), err)
	}
}

// checkHeld checks the state of a lease that should be held.
func checkHeld(t *testing.T, le lock.Lease, name string) {
	t.Helper()
	if got := le.Name(); got != name {
		t.Errorf("Name() = %q; want %q", got, name)
	}
	if le.Token() == 0 {
		t.Errorf("Token() = 0; want a non-zero token")
	}
	if err := le.Err(); err != nil {
		t.Errorf("Err() = %v while held; want nil", err)
	}
	if isClosed(le.Done()) {
		t.Errorf("Done() closed while held; want open")
	}
}

// checkReleased checks the state of a lease that Release ended.
func checkReleased(t *testing.T, le lock.Lease) {
	t.Helper()
	if !isClosed(le.Done()) {
		t.Errorf("Done() open after Release returned; want closed")
	}
	if err := le.Err(); !errors.Is(err, lock.ErrReleased) {
		t.Errorf("Err() = %v after Release; want an error wrapping %v", err, lock.ErrReleased)
	}
}

func (s *suite) holderIs(t *testing.T, ctx context.Context, l lock.Locker, name string, want lock.Holder) {
	t.Helper()
	got, err := l.Holder(ctx, name)
	if err != nil || got != want {
		t.Errorf("Holder(%q) = %+v, %v; want %+v, nil", name, got, err, want)
	}
}

func (s *suite) notHeld(t *testing.T, ctx context.Context, l lock.Locker, name string) {
	t.Helper()
	if got, err := l.Holder(ctx, name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder(%q) = %+v, %v; want an error wrapping %v", name, got, err, lock.ErrNotHeld)
	}
}
