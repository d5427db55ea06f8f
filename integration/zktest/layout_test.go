package zktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKConformanceLayouts runs the conformance suite on Lockers whose
// records are those of Curator's InterProcessMutex (curator) and
// InterProcessReadWriteLock (curator-rw). Such a layout refuses the
// requests it has no record for (semaphores; shared locks but in
// curator-rw) with lock.ErrIncompatible. That is asserted here, on the
// Locker itself, and the suite is given the Locker through a view
// without the refused interfaces, so that their subtests do not apply;
// the view is checked to keep every other interface, which the suite
// would otherwise only log as missing.
func TestZKConformanceLayouts(t *testing.T) {
	c := startEnsemble(t)
	for _, tt := range []struct {
		layout zklock.Layout
		shared bool // the layout has shared locks
	}{{zklock.LayoutCurator, false}, {zklock.LayoutCuratorReadWrite, true}} {
		t.Run(string(tt.layout), func(t *testing.T) {
			h := newHarness(t, c.Endpoints())
			h.opts = append(h.opts, zklock.WithLayout(tt.layout))
			checkRefusals(t, h, tt.shared)
			lh := &layoutHarness{harness: h, shared: tt.shared}
			v := lh.NewLocker(t, "probe")
			checkView(t, v, tt.shared)
			locktest.TestLockerWith(t, lh, locktest.Options{ObserveMaySkip: true})
		})
	}
}

// checkRefusals checks that the layout's Locker refuses semaphores, and
// shared locks unless shared, with lock.ErrIncompatible, writing nothing.
func checkRefusals(t *testing.T, h *harness, shared bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := h.dial(t)
	name := "refused-" + randHex(3)
	calls := map[string]func() (lock.Lease, error){
		"AcquireSemaphore":    func() (lock.Lease, error) { return l.AcquireSemaphore(ctx, name, 2) },
		"TryAcquireSemaphore": func() (lock.Lease, error) { return l.TryAcquireSemaphore(ctx, name, 2) },
	}
	if !shared {
		calls["AcquireShared"] = func() (lock.Lease, error) { return l.AcquireShared(ctx, name) }
		calls["TryAcquireShared"] = func() (lock.Lease, error) { return l.TryAcquireShared(ctx, name) }
	}
	for what, call := range calls {
		if le, err := call(); !errors.Is(err, lock.ErrIncompatible) {
			t.Errorf("%s() = %v, %v; want an error wrapping %v", what, le, err, lock.ErrIncompatible)
		}
	}
	if ok, _, err := h.admin.conn.Exists(h.root + "/" + name); err != nil || ok {
		t.Errorf("after the refused calls, %s/%s exists = %v, %v; want nothing written", h.root, name, ok, err)
	}
}

// checkView checks that v hides exactly the interfaces the layout refuses.
func checkView(t *testing.T, v lock.Locker, shared bool) {
	t.Helper()
	_, sh := v.(lock.SharedLocker)
	_, sem := v.(lock.Semaphore)
	_, obs := v.(lock.Observer)
	_, hl := v.(lock.HolderLister)
	_, rv := v.(lock.Revoker)
	_, ql := v.(lock.QueueLister)
	_, hc := v.(lock.HealthChecker)
	_, ml := v.(lock.MultiLocker)
	if sh != shared || sem || !obs || !hl || !rv || !ql || !hc || !ml {
		t.Fatalf("view: shared %v, semaphore %v, observer %v, holders %v, revoker %v, queue %v, health %v, multi %v; want shared %v, no semaphore, all else",
			sh, sem, obs, hl, rv, ql, hc, ml, shared)
	}
}

// layoutHarness is the harness giving out views of its Lockers (lockView,
// rwView); its session faults act on the Locker behind the view.
type layoutHarness struct {
	*harness
	shared bool
}

func (h *layoutHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	v := lockView{h.harness.NewLocker(t, identity).(*zklock.Locker)}
	if h.shared {
		return rwView{v}
	}
	return v
}

func (h *layoutHarness) StallSession(t *testing.T, l lock.Locker) {
	t.Helper()
	h.harness.StallSession(t, behind(l))
}

func (h *layoutHarness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	h.harness.ExpireSession(t, behind(l))
}

func (h *layoutHarness) FreezeSession(t *testing.T, l lock.Locker) func() {
	t.Helper()
	return h.harness.FreezeSession(t, behind(l))
}

// behind returns the Locker behind a view.
func behind(l lock.Locker) lock.Locker {
	switch v := l.(type) {
	case lockView:
		return v.l
	case rwView:
		return v.l
	}
	return l
}

// lockView is a zklock Locker without its shared and semaphore calls.
type lockView struct{ l *zklock.Locker }

func (v lockView) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return v.l.Acquire(ctx, name)
}

func (v lockView) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return v.l.TryAcquire(ctx, name)
}

func (v lockView) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return v.l.AcquireAll(ctx, names)
}

func (v lockView) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return v.l.TryAcquireAll(ctx, names)
}

func (v lockView) Holder(ctx context.Context, name string) (lock.Holder, error) {
	return v.l.Holder(ctx, name)
}

func (v lockView) Holders(ctx context.Context, name string) ([]lock.Holder, error) {
	return v.l.Holders(ctx, name)
}

func (v lockView) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	return v.l.Queue(ctx, name)
}

func (v lockView) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	return v.l.Observe(ctx, name)
}

func (v lockView) Revoke(ctx context.Context, name string, token fencing.Token) error {
	return v.l.Revoke(ctx, name, token)
}

func (v lockView) Healthy(ctx context.Context) error { return v.l.Healthy(ctx) }

func (v lockView) Close() error { return v.l.Close() }

// rwView is a zklock Locker without its semaphore calls.
type rwView struct{ lockView }

func (v rwView) AcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return v.l.AcquireShared(ctx, name)
}

func (v rwView) TryAcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return v.l.TryAcquireShared(ctx, name)
}
