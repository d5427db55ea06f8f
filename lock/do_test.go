package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

func TestDoHoldsWhileFnRuns(t *testing.T) {
	for _, try := range []bool{false, true} {
		t.Run(fmt.Sprintf("try=%v", try), func(t *testing.T) {
			m := locktest.NewMemory()
			l := m.NewLocker("a")
			t.Cleanup(func() { _ = l.Close() })
			name := uniqueName(t)
			errFn := errors.New("fn failed")
			do := lock.Do
			if try {
				do = lock.TryDo
			}
			calls := 0
			err := do(context.Background(), l, name, func(ctx context.Context, lease lock.Lease) error {
				calls++
				if lease.Name() != name || lease.Token() == 0 {
					t.Errorf("lease = %q with token %v; want %q with a token", lease.Name(), lease.Token(), name)
				}
				h, err := l.Holder(ctx, name)
				if err != nil || h != (lock.Holder{Identity: "a", Token: lease.Token()}) {
					t.Errorf("Holder() in fn = %+v, %v; want a with token %v", h, err, lease.Token())
				}
				if ctx.Err() != nil {
					t.Errorf("fn's ctx.Err() = %v; want nil while the lease is held", ctx.Err())
				}
				return errFn
			})
			if !errors.Is(err, errFn) || errors.Is(err, lock.ErrLost) {
				t.Errorf("Do() = %v; want fn's error alone", err)
			}
			if calls != 1 {
				t.Errorf("fn called %d times; want 1", calls)
			}
			if h, err := l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Holder() after Do = %+v, %v; want ErrNotHeld", h, err)
			}
		})
	}
}

func TestDoLeaseLost(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	name := uniqueName(t)
	errFn := errors.New("fn interrupted")
	var cause error
	err := lock.Do(context.Background(), l, name, func(ctx context.Context, lease lock.Lease) error {
		m.ExpireSession(l)
		recv(t, ctx.Done(), "end of fn's context")
		cause = context.Cause(ctx)
		return errFn
	})
	if !errors.Is(cause, lock.ErrLost) {
		t.Errorf("context.Cause(fn's ctx) = %v; want an error wrapping ErrLost", cause)
	}
	if !errors.Is(err, errFn) || !errors.Is(err, lock.ErrLost) {
		t.Errorf("Do() = %v; want fn's error joined with an error wrapping ErrLost", err)
	}
	// The lease's error already names the lease, with its backend's
	// prefix; Do adds none of its own.
	if err != nil {
		if got := strings.Count(err.Error(), "locktest:"); got != 1 {
			t.Errorf("Do() = %q: backend prefix %d times; want once", err, got)
		}
		if strings.Contains(err.Error(), "lock:") {
			t.Errorf("Do() = %q: has a \"lock:\" prefix on top of the lease's own", err)
		}
	}
	if recs := m.Records(name); len(recs) != 0 {
		t.Errorf("Records() = %v; want none after a lost lease", recs)
	}
}

func TestDoContextCancelled(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	name := uniqueName(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := lock.Do(ctx, l, name, func(fctx context.Context, lease lock.Lease) error {
		cancel()
		recv(t, fctx.Done(), "end of fn's context")
		if lease.Err() != nil {
			t.Errorf("lease.Err() in fn = %v; want nil: cancelling ctx ends fn, not the lease", lease.Err())
		}
		return fctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, lock.ErrLost) {
		t.Errorf("Do() = %v; want fn's context.Canceled alone", err)
	}
	// Released on a fresh context although ctx is done.
	if h, err := l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder() after Do = %+v, %v; want ErrNotHeld", h, err)
	}
}

func TestTryDoLocked(t *testing.T) {
	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	name := uniqueName(t)
	err := lock.Do(context.Background(), a, name, func(ctx context.Context, _ lock.Lease) error {
		return lock.TryDo(ctx, b, name, func(context.Context, lock.Lease) error {
			t.Error("fn called although the lock is held")
			return nil
		})
	})
	if !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryDo() on a held lock = %v; want an error wrapping ErrLocked", err)
	}
}

func TestDoBadInput(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	fn := func(context.Context, lock.Lease) error { t.Error("fn called; want no call"); return nil }
	tests := []struct {
		desc string
		l    lock.Locker
		name string
		fn   func(context.Context, lock.Lease) error
		want error
	}{
		{"nil Locker", nil, "n", fn, lock.ErrInvalidConfig},
		{"nil fn", l, "n", nil, lock.ErrInvalidConfig},
		{"bad name", l, "a b", fn, lock.ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if err := lock.Do(context.Background(), tt.l, tt.name, tt.fn); !errors.Is(err, tt.want) {
				t.Errorf("Do() = %v; want an error wrapping %v", err, tt.want)
			}
			if err := lock.TryDo(context.Background(), tt.l, tt.name, tt.fn); !errors.Is(err, tt.want) {
				t.Errorf("TryDo() = %v; want an error wrapping %v", err, tt.want)
			}
		})
	}
}

func TestDoLockerClosed(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	name := uniqueName(t)
	err := lock.Do(context.Background(), l, name, func(ctx context.Context, _ lock.Lease) error {
		if err := l.Close(); err != nil {
			t.Errorf("Close() = %v; want nil", err)
		}
		recv(t, ctx.Done(), "end of fn's context")
		return nil
	})
	if !errors.Is(err, lock.ErrReleased) {
		t.Errorf("Do() = %v; want an error wrapping ErrReleased (the Locker was closed)", err)
	}
}

func TestLeaseContextStop(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	lease, err := l.Acquire(context.Background(), uniqueName(t))
	if err != nil {
		t.Fatalf("Acquire() = %v; want nil", err)
	}
	ctx, stop := lock.LeaseContext(context.Background(), lease)
	stop()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("ctx.Err() after stop = %v; want context.Canceled", ctx.Err())
	}
	if lease.Err() != nil {
		t.Errorf("lease.Err() after stop = %v; want nil: stop does not release", lease.Err())
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
}

func ExampleDo() {
	mem := locktest.NewMemory()
	l := mem.NewLocker("worker-1")
	defer l.Close()

	err := lock.Do(context.Background(), l, "jobs/nightly", func(ctx context.Context, lease lock.Lease) error {
		// Send lease.Token() with every write; ctx ends if the lease does.
		fmt.Println("running with token", lease.Token())
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// running with token 1
	// Do: <nil>
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	m := locktest.NewMemory()
	l := m.NewLocker("a")
	t.Cleanup(func() { _ = l.Close() })
	name := uniqueName(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recover() = %v; want the panic of fn", r)
			}
		}()
		_ = lock.Do(context.Background(), l, name, func(context.Context, lock.Lease) error { panic("boom") })
	}()
	if h, err := l.Holder(context.Background(), name); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Holder() after a panic in fn = %+v, %v; want ErrNotHeld", h, err)
	}
}

func TestOneInvalidConfigSentinel(t *testing.T) {
	if lock.ErrInvalidConfig != fencing.ErrInvalidConfig {
		t.Fatal("lock.ErrInvalidConfig and fencing.ErrInvalidConfig are different values")
	}
	for _, err := range []error{lock.ErrLocked, lock.ErrNotHeld, lock.ErrLost, lock.ErrReleased, lock.ErrClosed, lock.ErrInvalidName, lock.ErrInvalidConfig, fencing.ErrStaleToken, fencing.ErrInvalidToken} {
		if msg := err.Error(); strings.Contains(msg, ":") {
			t.Errorf("sentinel %q has a prefix; the function that returns it adds one", msg)
		}
	}
}
