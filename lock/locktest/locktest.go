// Package locktest checks that a [lock.Locker] keeps the contract of package
// lock, and provides an in-memory Locker for users' unit tests and examples.
//
// [TestLocker] runs one subtest per rule of the contract against a backend
// reached through a [Harness], and each also requires that no record is
// left behind. Like testing/fstest.TestFS, it runs a check only when the
// optional interface it needs is present, on the Locker (those of package
// lock) or on the Harness ([RecordLister], [SessionExpirer],
// [SessionStaller], [SessionFreezer]); the checks left out are listed with
// t.Log, or failed with [Options.RequireOptional]. A backend's test calls
//
//	func TestConformance(t *testing.T) {
//		locktest.TestLocker(t, myHarness{...})
//	}
//
// Every subtest uses its own Lockers and a lock name no other run uses, so
// the suite can run against a shared, long-lived cluster. It does not
// check the loss deadline under partial failures, that a release wakes one
// waiter rather than all, or performance: each backend's integration tests
// cover them with fault injection.
//
// [Memory] and its [MemLocker]s are an in-memory Locker that keeps the
// contract, for tests and examples, not production.
package locktest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// Harness builds Lockers on the backend under test.
type Harness interface {
	// NewLocker returns a new, independent Locker (with its own session)
	// of the given identity, or reports setup problems with t.Fatal. The
	// suite closes every Locker it gets; the harness may close it too.
	NewLocker(t *testing.T, identity string) lock.Locker
}

// SessionExpirer is implemented by a [Harness] that can end a Locker's
// session from the server side (etcd: revoke the lease; ZooKeeper: expire
// the session). The Locker's leases and waiting calls must then end with
// [lock.ErrLost], and its next Acquire must open a new session.
type SessionExpirer interface {
	// ExpireSession ends the current session, if any, of l.
	ExpireSession(t *testing.T, l lock.Locker)
}

// SessionStaller is implemented by a [Harness] that can cut a Locker off
// until the server expires its session: a loss the Locker must report by
// itself before the server grants its locks to anyone else.
type SessionStaller interface {
	// StallSession cuts l, holding a lease, off from the server until the
	// server has expired its session, then lets it reach the server again.
	StallSession(t *testing.T, l lock.Locker)
}

// SessionFreezer is implemented by a [Harness] that can cut a Locker off
// from the server for a moment, as a frozen process is, while its session
// stays alive: [lock.Revoker.Revoke] must need no help from that process.
type SessionFreezer interface {
	// FreezeSession cuts l off from the server and returns a function that
	// reconnects it, which the suite calls once, well within the timeout.
	FreezeSession(t *testing.T, l lock.Locker) (thaw func())
}

// RecordLister is implemented by a [Harness] that can list the records
// (etcd keys, ZooKeeper znodes) of a lock name.
type RecordLister interface {
	// Records returns the records of name that exist now, one per holder
	// and per waiter, in any order. It is called only from the test's
	// goroutine, so it may call t.Fatal.
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

	// Timeout bounds every wait for the backend to make progress; it is
	// only reached when something is wrong. Default 10s.
	Timeout time.Duration

	// Settle is how long the suite waits for a blocked Acquire to queue
	// its record when the Harness is not a [RecordLister]. Default 200ms.
	Settle time.Duration

	// ObserveMaySkip relaxes the Observe subtest for a backend whose
	// [lock.Observer] can miss a grant that begins and ends between two of
	// its reads: of a burst of quick grants, what is reported need only be
	// a subsequence of what happened, in order.
	ObserveMaySkip bool

	// RequireOptional makes a missing optional interface (of the Harness
	// or of package lock) a test failure rather than a t.Log line, so that
	// a harness that loses an interface cannot quietly drop checks.
	RequireOptional bool

	// RefusesShared and RefusesSemaphores say that the Locker refuses
	// those requests by design (a layout of a recipe that has none) with
	// [lock.ErrIncompatible]; the subtest Refused checks that it does.
	RefusesShared, RefusesSemaphores bool

	// SessionKeyed says that the Locker keys a name's record by its
	// session alone, like etcd's concurrency.Mutex: a second acquisition
	// of a name through a Locker waits with no record, and a held name
	// below a name holds it too (IndependentNames checks that).
	SessionKeyed bool
}

func (o Options) withDefaults() Options {
	o.Rounds = orDefault(o.Rounds, 50)
	o.Lockers = orDefault(o.Lockers, 4)
	o.Goroutines = orDefault(o.Goroutines, 4)
	o.Timeout = orDefault(o.Timeout, 10*time.Second)
	o.Settle = orDefault(o.Settle, 200*time.Millisecond)
	return o
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// TestLocker runs the conformance suite on h with the default [Options].
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
	// Which optional interfaces a Locker has depends on its type: ask one.
	probe := s.newLocker(t, identity("probe"))
	s.has = map[string]bool{
		needsExpirer: s.expirer != nil, needsStaller: s.staller != nil, needsFreezer: s.freezer != nil,
		needsObserver: is[lock.Observer](probe), needsShared: is[lock.SharedLocker](probe),
		needsSem: is[lock.Semaphore](probe), needsHolders: is[lock.HolderLister](probe),
		needsRevoker: is[lock.Revoker](probe), needsQueue: is[lock.QueueLister](probe),
		needsHealth: is[lock.HealthChecker](probe),
	}
	noErr(t, "Close() of an unused Locker", probe.Close())
	// A request the Locker refuses is for Refused alone to make.
	refused := map[string]bool{needsShared: s.o.RefusesShared, needsSem: s.o.RefusesSemaphores}
	s.has[needsShared] = s.has[needsShared] && !s.o.RefusesShared
	s.has[needsSem] = s.has[needsSem] && !s.o.RefusesSemaphores
	var missing []string
	for _, st := range s.subtests() {
		if slices.ContainsFunc(st.needs, func(n string) bool { return refused[n] }) {
			continue
		}
		if m := s.missing(st.needs); m != "" {
			missing = append(missing, fmt.Sprintf("%s (needs %s)", st.name, m))
			continue
		}
		t.Run(st.name, st.fn)
	}
	if s.o.RefusesShared || s.o.RefusesSemaphores {
		t.Run("Refused", s.testRefused)
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

func is[T any](l lock.Locker) bool {
	_, ok := l.(T)
	return ok
}
