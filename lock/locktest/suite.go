package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// suite holds what every subtest needs; a missing optional interface is nil.
type suite struct {
	h       Harness
	o       Options
	expirer SessionExpirer
	staller SessionStaller
	freezer SessionFreezer
	lister  RecordLister
	has     map[string]bool
}

// The optional interfaces, as subtests need them and the log names them.
const (
	needsExpirer  = "SessionExpirer (Harness)"
	needsStaller  = "SessionStaller (Harness)"
	needsFreezer  = "SessionFreezer (Harness)"
	needsObserver = "lock.Observer (Locker)"
	needsShared   = "lock.SharedLocker (Locker)"
	needsSem      = "lock.Semaphore (Locker)"
	needsHolders  = "lock.HolderLister (Locker)"
	needsRevoker  = "lock.Revoker (Locker)"
	needsQueue    = "lock.QueueLister (Locker)"
	needsHealth   = "lock.HealthChecker (Locker)"
)

// A subtest is one check, run only when every interface it needs is present.
type subtest struct {
	name  string
	fn    func(t *testing.T)
	needs []string
}

func (s *suite) subtests() []subtest {
	n := func(needs ...string) []string { return needs }
	return []subtest{
		{"AcquireRelease", s.testAcquireRelease, nil},
		{"TryAcquire", s.testTryAcquire, nil},
		{"TokensIncrease", s.testTokensIncrease, nil},
		{"TokensAcrossNames", s.testTokensAcrossNames, nil},
		{"SameLockerExcludes", s.testSameLockerExcludes, nil},
		{"MutualExclusion", s.testMutualExclusion, nil},
		{"FIFO", s.testFIFO, nil},
		{"CancelWait", s.testCancelWait, nil},
		{"DeadlineWait", s.testDeadlineWait, nil},
		{"CancelledContext", s.testCancelledContext, nil},
		{"CancelInFlight", s.testCancelInFlight, nil},
		{"ReleaseCancelledContext", s.testReleaseCancelledContext, nil},
		{"Holder", s.testHolder, nil},
		{"DoneBeforeNextGrant", s.testDoneBeforeNextGrant, nil},
		{"ReleaseTwice", s.testReleaseTwice, nil},
		{"ReleaseConcurrent", s.testReleaseConcurrent, nil},
		{"Close", s.testClose, nil},
		{"CloseConcurrent", s.testCloseConcurrent, nil},
		{"CloseRace", s.testCloseRace, nil},
		{"InvalidName", s.testInvalidName, nil},
		{"LongName", s.testLongName, nil},
		{"IndependentNames", s.testIndependentNames, nil},
		{"MultiAcquireRelease", s.testMultiAcquireRelease, nil},
		{"MultiTryAcquire", s.testMultiTryAcquire, nil},
		{"MultiWaitsForEach", s.testMultiWaitsForEach, nil},
		{"MultiCancel", s.testMultiCancel, nil},
		{"MultiBadInput", s.testMultiBadInput, nil},
		{"MultiNoDeadlock", s.testMultiNoDeadlock, nil},
		{"MultiLoss", s.testMultiLoss, n(needsExpirer)},
		{"SessionExpiry", s.testSessionExpiry, n(needsExpirer)},
		{"SessionExpiryWaiter", s.testSessionExpiryWaiter, n(needsExpirer)},
		{"ReleaseLostLease", s.testReleaseLostLease, n(needsExpirer)},
		{"LossDoneBeforeNextGrant", s.testLossDoneBeforeNextGrant, n(needsStaller)},
		{"Observe", s.testObserve, n(needsObserver)},
		{"ObserveEndsOnClose", s.testObserveEndsOnClose, n(needsObserver)},
		{"ObserveSessionLoss", s.testObserveSessionLoss, n(needsObserver, needsStaller)},
		{"SharedExclusion", s.testSharedExclusion, n(needsShared)},
		{"SharedFIFO", s.testSharedFIFO, n(needsShared)},
		{"TryAcquireShared", s.testTryAcquireShared, n(needsShared)},
		{"SharedTokens", s.testSharedTokens, n(needsShared)},
		{"SharedHandover", s.testSharedHandover, n(needsShared)},
		{"SharedSessionExpiry", s.testSharedSessionExpiry, n(needsShared, needsExpirer)},
		{"SemaphoreLimit", s.testSemaphoreLimit, n(needsSem)},
		{"SemaphoreFIFO", s.testSemaphoreFIFO, n(needsSem)},
		{"SemaphoreIncompatible", s.testSemaphoreIncompatible, n(needsSem)},
		{"SemaphoreHandover", s.testSemaphoreHandover, n(needsSem)},
		{"SemaphoreSessionExpiry", s.testSemaphoreSessionExpiry, n(needsSem, needsExpirer)},
		{"Holders", s.testHolders, n(needsHolders)},
		{"Revoke", s.testRevoke, n(needsRevoker)},
		{"RevokeSemaphore", s.testRevokeSemaphore, n(needsRevoker, needsSem)},
		{"RevokeFrozenHolder", s.testRevokeFrozen, n(needsRevoker, needsFreezer)},
		{"Queue", s.testQueue, n(needsQueue)},
		{"QueueShared", s.testQueueShared, n(needsQueue, needsShared)},
		{"Healthy", s.testHealthy, n(needsHealth)},
		{"HealthyAfterExpiry", s.testHealthyAfterExpiry, n(needsHealth, needsExpirer)},
	}
}

// missing returns needs joined by " and " if one is absent, else "".
func (s *suite) missing(needs []string) string {
	for _, n := range needs {
		if !s.has[n] {
			return strings.Join(needs, " and ")
		}
	}
	return ""
}

// newLocker returns a Locker from the harness that is closed when t ends.
func (s *suite) newLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	l := s.h.NewLocker(t, identity)
	if l == nil {
		t.Fatalf("NewLocker(%q) = nil", identity)
	}
	t.Cleanup(func() {
		noErr(t, "Close()", l.Close())
	})
	return l
}

// setup returns a context, a lock name of its own, n Lockers and their ids.
func (s *suite) setup(t *testing.T, n int) (context.Context, string, []lock.Locker, []string) {
	t.Helper()
	ls, ids := make([]lock.Locker, n), make([]string, n)
	for i := range n {
		ids[i] = identity(fmt.Sprintf("l%d", i))
		ls[i] = s.newLocker(t, ids[i])
	}
	return s.ctx(t), lockName(t), ls, ids
}

// identity returns an identity unique to this run, so that no Holder check
// passes by matching a record another run left behind.
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
// ends. It outlasts Options.Timeout, so that a call that hangs is reported
// as hanging rather than failing with ctx's error.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.o.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// kind is what a request asks for: excl, shared or a permit(limit).
type kind struct {
	shared, sem bool
	limit       int
}

var (
	excl   = kind{}
	shared = kind{shared: true}
)

func permit(limit int) kind { return kind{sem: true, limit: limit} }

// call makes the request for k on l, or with try its Try form.
func (k kind) call(ctx context.Context, l lock.Locker, name string, try bool) (lock.Lease, error) {
	switch {
	case k.sem && try:
		return l.(lock.Semaphore).TryAcquireSemaphore(ctx, name, k.limit)
	case k.sem:
		return l.(lock.Semaphore).AcquireSemaphore(ctx, name, k.limit)
	case k.shared && try:
		return l.(lock.SharedLocker).TryAcquireShared(ctx, name)
	case k.shared:
		return l.(lock.SharedLocker).AcquireShared(ctx, name)
	case try:
		return l.TryAcquire(ctx, name)
	}
	return l.Acquire(ctx, name)
}

// op names the request for k, for messages.
func (k kind) op(try bool) string {
	op := "Acquire"
	if k.shared {
		op += "Shared"
	}
	if try {
		op = "Try" + op
	}
	if k.sem {
		return fmt.Sprintf("%sSemaphore(limit %d)", op, k.limit)
	}
	return op
}

// mustTry makes the Try request for k, which must grant.
func mustTry(t *testing.T, ctx context.Context, l lock.Locker, name string, k kind, when string) lock.Lease {
	t.Helper()
	le, err := k.call(ctx, l, name, true)
	if err != nil || le == nil {
		t.Fatalf("%s on %q %s = %v, %v; want a lease", k.op(true), name, when, le, err)
	}
	checkHeld(t, name, le)
	return le
}

// result is what a background Acquire returned.
type result struct {
	lease lock.Lease
	err   error
}

// goCall runs acquire in a goroutine; t's cleanup closes the Locker, which
// ends it and releases a lease nobody collects.
func goCall(acquire func() (lock.Lease, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		le, err := acquire()
		ch <- result{lease: le, err: err}
	}()
	return ch
}

func goAcquire(ctx context.Context, l lock.Locker, name string, k kind) <-chan result {
	return goCall(func() (lock.Lease, error) { return k.call(ctx, l, name, false) })
}

// enqueue is goAcquire, then waitRecords of n, the new waiter included.
func (s *suite) enqueue(t *testing.T, ctx context.Context, l lock.Locker, name string, k kind, n int, what string) <-chan result {
	t.Helper()
	ch := goAcquire(ctx, l, name, k)
	if s.o.SessionKeyed {
		time.Sleep(s.o.Settle) // it may wait with no record
	} else {
		s.waitRecords(t, name, n, what)
	}
	return ch
}

// recv waits for a value from ch or its close (ok false); what names it.
func recv[T any](t *testing.T, s *suite, ch <-chan T, what string) (v T, ok bool) {
	t.Helper()
	timer := time.NewTimer(s.o.Timeout)
	defer timer.Stop()
	select {
	case v, ok = <-ch:
	case <-timer.C:
		t.Fatalf("%s did not return within %v", what, s.o.Timeout)
	}
	return v, ok
}

// await is recv of a value; a closed channel yields the zero value.
func await[T any](t *testing.T, s *suite, ch <-chan T, what string) T {
	t.Helper()
	v, _ := recv(t, s, ch, what)
	return v
}

// awaitLease waits for a background Acquire to return a lease.
func (s *suite) awaitLease(t *testing.T, ch <-chan result, what string) lock.Lease {
	t.Helper()
	r := await(t, s, ch, what)
	if r.err != nil {
		t.Fatalf("%s = %v; want a lease", what, r.err)
	}
	if r.lease == nil {
		t.Fatalf("%s = nil lease, nil error", what)
	}
	return r.lease
}

// awaitRefused waits for a background Acquire to be refused with want.
func (s *suite) awaitRefused(t *testing.T, ch <-chan result, what string, want error) {
	t.Helper()
	r := await(t, s, ch, what)
	refused(t, what, r.lease, r.err, want)
}

// refuses makes the request for k (its Try form if try) on l, which must
// return no lease and an error wrapping want; when says in what state.
func refuses(t *testing.T, ctx context.Context, l lock.Locker, name string, k kind, try bool, when string, want error) {
	t.Helper()
	le, err := k.call(ctx, l, name, try)
	refused(t, k.op(try)+when, le, err, want)
}

// refused checks that a call returned no lease and an error wrapping want.
func refused(t *testing.T, call string, le lock.Lease, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || le != nil {
		t.Errorf("%s = %v, %v; want nil, an error wrapping %v", call, le, err, want)
	}
	if le != nil {
		_ = le.Release(context.Background())
	}
}

// outcome returns the lease of a call that may grant, or nil once it has
// checked that the call failed with one of allowed.
func outcome(t *testing.T, what string, r result, allowed ...error) lock.Lease {
	t.Helper()
	switch {
	case r.err == nil && r.lease == nil:
		t.Errorf("%s = nil lease, nil error", what)
	case r.err == nil:
		return r.lease
	case r.lease != nil:
		t.Errorf("%s = %v, %v; want no lease with an error", what, r.lease, r.err)
	default:
		wantErr(t, what, r.err, allowed...)
	}
	return nil
}

// refusesAll fails t unless Acquire, TryAcquire, Holder and (on an
// Observer) Observe of name on l return errors wrapping want; when, if not
// empty, starts with a space.
func refusesAll(t *testing.T, ctx context.Context, l lock.Locker, name, when string, want error) {
	t.Helper()
	for _, try := range []bool{false, true} {
		refuses(t, ctx, l, name, excl, try, fmt.Sprintf("(%q)%s", name, when), want)
	}
	_, err := l.Holder(ctx, name)
	wantErr(t, fmt.Sprintf("Holder(%q)%s", name, when), err, want)
	if o, ok := l.(lock.Observer); ok {
		_, _, err := o.Observe(ctx, name)
		wantErr(t, fmt.Sprintf("Observe(%q)%s", name, when), err, want)
	}
}

// notReturned fails t if a background Acquire has returned.
func notReturned[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned %+v while the lock was held; want it to wait", what, r)
	default:
	}
}

// waitRecords waits until name has n records: with a RecordLister by
// polling it, without one by waiting Options.Settle.
func (s *suite) waitRecords(t *testing.T, name string, n int, why string) {
	t.Helper()
	if s.lister == nil {
		time.Sleep(s.o.Settle)
		return
	}
	deadline := time.Now().Add(s.o.Timeout)
	for recs := s.lister.Records(t, name); len(recs) != n; recs = s.lister.Records(t, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: Records(%q) = %q after %v; want %d records", why, name, recs, s.o.Timeout, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// noOrphans checks, with a RecordLister, that name's records are all gone.
func (s *suite) noOrphans(t *testing.T, name string, after string) {
	t.Helper()
	if s.lister != nil {
		s.waitRecords(t, name, 0, "orphaned records after "+after)
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

// releaseLast releases les, the last grants of name, then noOrphans.
func (s *suite) releaseLast(t *testing.T, ctx context.Context, name, after string, les ...lock.Lease) {
	t.Helper()
	mustRelease(t, ctx, les...)
	s.noOrphans(t, name, after)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkLost waits for le to end and checks that its Err wraps ErrLost.
func (s *suite) checkLost(t *testing.T, le lock.Lease, wait, what string) {
	t.Helper()
	await(t, s, le.Done(), wait+": Done()")
	wantErr(t, what, le.Err(), lock.ErrLost)
}

func (s *suite) mustAcquire(t *testing.T, ctx context.Context, l lock.Locker, name string) lock.Lease {
	t.Helper()
	return s.awaitLease(t, goAcquire(ctx, l, name, excl), fmt.Sprintf("Acquire(%q)", name))
}

// mustShared acquires a shared grant of name on l or stops the test.
func (s *suite) mustShared(t *testing.T, ctx context.Context, l lock.Locker, name, what string) lock.Lease {
	t.Helper()
	le := s.awaitLease(t, goAcquire(ctx, l, name, shared), what)
	checkHeld(t, name, le)
	return le
}

func mustRelease(t *testing.T, ctx context.Context, les ...lock.Lease) {
	t.Helper()
	for _, le := range les {
		noErr(t, fmt.Sprintf("Release() of %q token %d", le.Name(), le.Token()), le.Release(ctx))
	}
}

// checkHeld checks the state of leases that should be held.
func checkHeld(t *testing.T, name string, les ...lock.Lease) {
	t.Helper()
	for _, le := range les {
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
}

// checkReleased checks the state of a lease that Release ended.
func checkReleased(t *testing.T, le lock.Lease) {
	t.Helper()
	if !isClosed(le.Done()) {
		t.Errorf("Done() open after Release returned; want closed")
	}
	wantErr(t, "Err() after Release", le.Err(), lock.ErrReleased)
}

// checkAfter checks that le (what), granted after prev, has a higher token.
func checkAfter(t *testing.T, le, prev lock.Lease, what string) {
	t.Helper()
	if le.Token() <= prev.Token() {
		t.Errorf("%s: Token() = %d; want > %d (the token granted before it)", what, le.Token(), prev.Token())
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
	_, err := l.Holder(ctx, name)
	wantErr(t, fmt.Sprintf("Holder(%q)", name), err, lock.ErrNotHeld)
}

// wantErr fails t unless err, returned by call, wraps one of want.
func wantErr(t *testing.T, call string, err error, want ...error) {
	t.Helper()
	if errorsIsAny(err, want...) {
		return
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w.Error()
	}
	t.Errorf("%s = %v; want an error wrapping %s", call, err, strings.Join(names, " or "))
}

func noErr(t *testing.T, call string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s = %v; want nil", call, err)
	}
}

func errorsIsAny(err error, targets ...error) bool {
	return slices.ContainsFunc(targets, func(t error) bool { return errors.Is(err, t) })
}
