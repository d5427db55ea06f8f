// Package locktest checks that a [lock.Locker] keeps the contract of package
// lock, and provides an in-memory Locker for users' unit tests and examples.
//
// # The conformance suite
//
// [TestLocker] runs one subtest per rule of the contract against a backend
// reached through a [Harness]:
//
//   - the Locker: acquire and release, TryAcquire, rising tokens, mutual
//     exclusion between Lockers and within one, FIFO order, cancelled waits
//     (before, during and after the create request), Release with a
//     cancelled context, Holder, a released lease's Done closed before the
//     next grant, ending a lease twice and concurrently, Close (repeated,
//     concurrent, racing Acquire and Release), and name validation;
//   - [lock.Observer]: observation in order, its end at Close, and, with a
//     [SessionStaller], an observation that outlives the loss of its
//     connection and session;
//   - [lock.SharedLocker] and [lock.Semaphore]: readers share and exclude
//     writers, one FIFO queue without starvation, TryAcquireShared refused
//     while a writer holds or waits, tokens in request order, at most limit
//     holders, incompatible requests refused with [lock.ErrIncompatible],
//     a limit below 1 refused, and hand-over after a cancelled waiter, a
//     closed holder and an expired session;
//   - [lock.HolderLister], [lock.QueueLister] and [lock.Revoker]: every
//     holder in grant order; holders and waiters in arrival order; Revoke
//     ending only the holder with that token (else [lock.ErrNotHeld]), and,
//     with a [SessionFreezer], a holder cut off from the server.
//
// Each check also requires that no record is left behind. Like
// testing/fstest.TestFS it runs a check only when the optional interface
// it needs is present, on the Locker or on the Harness: a [RecordLister]
// lets the suite see records and know exactly when a waiter has queued; a
// [SessionExpirer] enables the session-loss checks (a lost lease's Err and
// Release, waiters of a lost session, a new session afterwards); a
// [SessionStaller] the check that a lease lost with its session has ended
// before anyone else is granted its lock. Checks that did not apply are
// listed with t.Log; [Options.RequireOptional] makes them failures. A
// backend's test calls
//
//	func TestConformance(t *testing.T) {
//		locktest.TestLocker(t, myHarness{...})
//	}
//
// Every subtest uses its own Lockers and a lock name no other run uses, so
// the suite can run against a shared, long-lived cluster. It orders its
// steps with channels and, with a RecordLister, by polling the records;
// only without one does it fall back to a grace period ([Options.Settle]).
// Release with a context already cancelled may still release and return
// nil, or return ctx's error; either way the lease must have ended and its
// record must go.
//
// The suite does not check the loss deadline under partial failures (a
// frozen server, a slow network, a drifting clock), that a release wakes
// one waiter rather than all, or performance: those need fault injection,
// and each backend's integration tests cover them.
//
// # The in-memory Locker
//
// [Memory] is a fake lock server: many [MemLocker]s share one Memory the way
// many clients share one etcd cluster. It follows the semantics both real
// backends share (tokens from one counter, one record per acquisition,
// FIFO waiters that each wait for one record, no records left by a failed
// or cancelled Acquire, observation) and implements every optional
// interface of package lock, by the queue rules on lock.SharedLocker. A
// test expires a session with [Memory.ExpireSession]. Memory has no
// network, no clock and no partition, so a lease is lost only when a test
// expires its session; it is for unit tests and examples, not production
// (it does not even span processes).
package locktest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// Harness builds Lockers on the backend under test.
type Harness interface {
	// NewLocker returns a new, independent Locker (with its own session)
	// on the backend under test, whose identity is identity. It reports
	// setup problems with t.Fatal. The suite closes every Locker it gets;
	// the harness may also close it from its own t.Cleanup.
	NewLocker(t *testing.T, identity string) lock.Locker
}

// SessionExpirer is implemented by a [Harness] that can end a Locker's
// session the way the server does when it expires it (etcd: revoke the
// lease; ZooKeeper: expire the session). Afterwards the Locker's leases must
// end with [lock.ErrLost], its waiting Acquire calls must return errors
// wrapping [lock.ErrLost], and its next Acquire must open a new session.
type SessionExpirer interface {
	// ExpireSession ends l's current session from the server side. l was
	// returned by the same Harness's NewLocker. If l has no session, it
	// does nothing.
	ExpireSession(t *testing.T, l lock.Locker)
}

// SessionStaller is implemented by a [Harness] that can make a Locker's
// session expire the way it does when the Locker is cut off: the Locker
// stops hearing from the server, and the server expires the session once
// its timeout has run out. Unlike [SessionExpirer], whose server-side end
// of a session is one a Locker cannot see coming, this is the loss a Locker
// must detect by itself, and report (Done closed, Err wrapping
// [lock.ErrLost]) before the server can grant its locks to anyone else.
// The suite checks exactly that ordering.
type SessionStaller interface {
	// StallSession cuts l off from the server until the server has
	// expired l's current session, then lets l reach the server again,
	// and returns. l was returned by the same Harness's NewLocker and
	// holds at least one lease.
	StallSession(t *testing.T, l lock.Locker)
}

// SessionFreezer is implemented by a [Harness] that can cut a Locker off
// from the server for a moment, as a frozen (SIGSTOPped) or partitioned
// process is: the Locker neither hears from the server nor reaches it,
// and its session stays alive on the server until its timeout runs out.
// The suite uses it to check that [lock.Revoker.Revoke] needs no help from
// the revoked holder's process.
type SessionFreezer interface {
	// FreezeSession cuts l off from the server and returns a function
	// that lets it reach the server again. The suite calls the function
	// well within the session's timeout, and once. l was returned by the
	// same Harness's NewLocker.
	FreezeSession(t *testing.T, l lock.Locker) (thaw func())
}

// RecordLister is implemented by a [Harness] that can list the records
// (etcd keys, ZooKeeper znodes) that exist for a lock name.
type RecordLister interface {
	// Records returns the records of name that exist right now: one per
	// holder and per queued waiter, in any order. A lock nobody holds or
	// waits for has none. The suite calls it only from the test's own
	// goroutine, so it may report failures with t.Fatal.
	Records(t *testing.T, name string) []string
}

// Options tunes [TestLockerWith] for slow backends. The zero value of each
// field means its default.
type Options struct {
	// Rounds is the number of grants in the token subtest, and of grants
	// per Locker in the mutual-exclusion subtest. Default 50.
	Rounds int

	// Lockers and Goroutines shape the mutual-exclusion subtest: that many
	// Lockers, each used by that many goroutines at once. Default 4 and 4.
	Lockers, Goroutines int

	// Timeout bounds every wait for the backend to make progress (a grant,
	// a return from a cancelled or interrupted Acquire, a record to
	// vanish). It is only reached when something is wrong. Default 10s.
	Timeout time.Duration

	// Settle is how long the suite waits for a blocked Acquire to queue
	// its record when the Harness is not a [RecordLister] and so cannot
	// tell. Default 200ms. Unused with a RecordLister.
	Settle time.Duration

	// ObserveMaySkip relaxes the Observe subtest for a backend whose
	// [lock.Observer] can miss a grant that begins and ends between two of
	// its reads (a ZooKeeper child watch, which fires once and is then
	// re-armed by a listing). Changes made one at a time, each observed
	// before the next, must still all be reported; of a burst of quick
	// grants the suite then only requires that what is reported is a
	// subsequence of what happened, in order, up to the current holder.
	// By default every change must be reported.
	ObserveMaySkip bool

	// RequireOptional makes a missing optional interface ([SessionExpirer],
	// [SessionStaller], [SessionFreezer], [lock.Observer],
	// [lock.SharedLocker], [lock.Semaphore], [lock.HolderLister],
	// [lock.Revoker], [lock.QueueLister], [lock.HealthChecker]) a test
	// failure. By default the checks that need it are left out and listed
	// with t.Log. A backend's own conformance test sets it, so that a
	// harness that loses an interface cannot quietly drop checks.
	RequireOptional bool
}

func (o Options) withDefaults() Options {
	if o.Rounds <= 0 {
		o.Rounds = 50
	}
	if o.Lockers <= 0 {
		o.Lockers = 4
	}
	if o.Goroutines <= 0 {
		o.Goroutines = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 200 * time.Millisecond
	}
	return o
}

// TestLocker runs the conformance suite against the backend behind h, each
// check as a subtest (t.Run) with fresh Lockers and a unique lock name. It
// uses the default [Options].
func TestLocker(t *testing.T, h Harness) {
	t.Helper()
	TestLockerWith(t, h, Options{})
}

// TestLockerWith is [TestLocker] with options.
func TestLockerWith(t *testing.T, h Harness, opts Options) {
	t.Helper()
	s := &suite{h: h, o: opts.withDefaults()}
	s.expirer, _ = h.(SessionExpirer)
	s.staller, _ = h.(SessionStaller)
	s.freezer, _ = h.(SessionFreezer)
	s.lister, _ = h.(RecordLister)
	// Which optional interfaces a Locker has is a property of the Locker
	// type: ask one.
	probe := h.NewLocker(t, identity("probe"))
	if probe == nil {
		t.Fatalf("NewLocker() = nil")
	}
	s.has = map[string]bool{
		needsExpirer: s.expirer != nil, needsStaller: s.staller != nil, needsFreezer: s.freezer != nil,
		needsObserver: is[lock.Observer](probe), needsShared: is[lock.SharedLocker](probe),
		needsSem: is[lock.Semaphore](probe), needsHolders: is[lock.HolderLister](probe),
		needsRevoker: is[lock.Revoker](probe), needsQueue: is[lock.QueueLister](probe),
		needsHealth: is[lock.HealthChecker](probe),
	}
	if err := probe.Close(); err != nil {
		t.Errorf("Close() of an unused Locker = %v; want nil", err)
	}
	var missing []string
	for _, st := range s.subtests() {
		if m := s.missing(st.needs); m != "" {
			missing = append(missing, fmt.Sprintf("%s (needs %s)", st.name, m))
			continue
		}
		t.Run(st.name, st.fn)
	}
	if len(missing) > 0 {
		msg := "locktest: checks not applicable to this backend: " + strings.Join(missing, ", ")
		if s.o.RequireOptional {
			t.Error(msg + "; Options.RequireOptional is set")
		} else {
			t.Log(msg)
		}
	}
}

// is reports whether l implements T.
func is[T any](l lock.Locker) bool {
	_, ok := l.(T)
	return ok
}
