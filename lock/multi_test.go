package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// The conformance suite (lock/locktest, subtests Multi*) checks AcquireAll
// on every Locker; these tests cover what it cannot reach from outside.

// multiSetup returns two Lockers on one Memory and a MultiLease of names
// held by the first.
func multiSetup(t *testing.T, names ...string) (a, b *locktest.MemLocker, m *lock.MultiLease) {
	t.Helper()
	mem := locktest.NewMemory()
	a, b = mem.NewLocker("a"), mem.NewLocker("b")
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	m, err := lock.AcquireAll(context.Background(), a, names...)
	if err != nil {
		t.Fatalf("AcquireAll(%q) = %v; want nil", names, err)
	}
	return a, b, m
}

// mustTake checks that l can take each of names at once.
func mustTake(t *testing.T, l lock.Locker, names []string, when string) {
	t.Helper()
	for _, n := range names {
		le, err := l.TryAcquire(context.Background(), n)
		if err != nil {
			t.Errorf("TryAcquire(%q) %s = %v; want a lease", n, when, err)
			continue
		}
		_ = le.Release(context.Background())
	}
}

// TestMultiLeaseEnds checks that a MultiLease ends when one of its leases
// ends otherwise than by Release, and releases the others at once.
func TestMultiLeaseEnds(t *testing.T) {
	names := []string{"multi/ends/a", "multi/ends/b", "multi/ends/c"}
	for _, tt := range []struct {
		what string
		end  func(a, b *locktest.MemLocker, m *lock.MultiLease) error
		want error
	}{
		{"one name revoked", func(_, b *locktest.MemLocker, m *lock.MultiLease) error {
			return b.Revoke(context.Background(), names[1], m.Token(names[1]))
		}, lock.ErrLost},
		{"Locker closed", func(a, _ *locktest.MemLocker, _ *lock.MultiLease) error { return a.Close() }, lock.ErrReleased},
	} {
		t.Run(tt.what, func(t *testing.T) {
			a, b, m := multiSetup(t, names...)
			if err := tt.end(a, b, m); err != nil {
				t.Fatalf("ending one lease: %v", err)
			}
			<-m.Done()
			if err := m.Err(); !errors.Is(err, tt.want) {
				t.Errorf("Err() = %v; want an error wrapping %v", err, tt.want)
			}
			// Done closes before the leases are released; Release waits
			// for that.
			if err := m.Release(context.Background()); !errors.Is(err, tt.want) {
				t.Errorf("Release() of an ended MultiLease = %v; want an error wrapping %v", err, tt.want)
			}
			mustTake(t, b, names, "once the MultiLease ended and Release returned")
		})
	}
}

// TestMultiLeaseReleaseContext checks that Release refuses a nil context,
// holding on, and releases every name even with a cancelled one.
func TestMultiLeaseReleaseContext(t *testing.T) {
	names := []string{"multi/ctx/a", "multi/ctx/b"}
	_, b, m := multiSetup(t, names...)
	var nilCtx context.Context
	if err := m.Release(nilCtx); !errors.Is(err, lock.ErrInvalidConfig) {
		t.Errorf("Release(nil) = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
	}
	if err := m.Err(); err != nil {
		t.Errorf("Err() after Release(nil) = %v; want nil (still held)", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Release(done); err != nil {
		t.Errorf("Release() with a cancelled context = %v; want nil", err)
	}
	mustTake(t, b, names, "after Release with a cancelled context")
}

// TestMultiLeaseReleaseConcurrent checks that of concurrent Releases
// exactly one returns nil, the others an error wrapping ErrReleased.
func TestMultiLeaseReleaseConcurrent(t *testing.T) {
	_, _, m := multiSetup(t, "multi/concurrent/a", "multi/concurrent/b")
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = m.Release(context.Background()) })
	}
	wg.Wait()
	nils := 0
	for _, err := range errs {
		if err == nil {
			nils++
		} else if !errors.Is(err, lock.ErrReleased) {
			t.Errorf("concurrent Release() = %v; want nil or an error wrapping %v", err, lock.ErrReleased)
		}
	}
	if nils != 1 {
		t.Errorf("%d of %d concurrent Release() calls returned nil; want 1", nils, len(errs))
	}
}

// native is a MemLocker with a lock.MultiLocker that records the names it
// is given and fails with err if set.
type native struct {
	*locktest.MemLocker
	got   [][]string
	err   error
	short bool // return a nil lease for the last name
}

func (n *native) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	n.got = append(n.got, names)
	if n.err != nil {
		return nil, n.err
	}
	var les []lock.Lease
	for _, name := range names {
		le, err := n.Acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		les = append(les, le)
	}
	if n.short {
		les[len(les)-1] = nil
	}
	return les, nil
}

func (n *native) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return n.AcquireAll(ctx, names)
}

// TestAcquireAllNative checks that AcquireAll hands a MultiLocker the
// names sorted, uses its leases as they are, and returns its error.
func TestAcquireAllNative(t *testing.T) {
	n := &native{MemLocker: locktest.NewMemory().NewLocker("a")}
	t.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	m, err := lock.AcquireAll(ctx, n, "multi/native/b", "multi/native/a")
	if err != nil {
		t.Fatalf("AcquireAll() = %v; want nil", err)
	}
	want := []string{"multi/native/a", "multi/native/b"}
	if len(n.got) != 1 || !slices.Equal(n.got[0], want) {
		t.Errorf("MultiLocker.AcquireAll got %q; want %q once", n.got, want)
	}
	if got := m.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %q; want %q", got, want)
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
	n.err = errors.New("native failure")
	for _, call := range []func(context.Context, lock.Locker, ...string) (*lock.MultiLease, error){lock.AcquireAll, lock.TryAcquireAll} {
		if m, err := call(ctx, n, want...); m != nil || !errors.Is(err, n.err) {
			t.Errorf("AcquireAll() with a failing MultiLocker = %v, %v; want nil, its error", m, err)
		}
	}
	n.err = nil
	n.short = true
	if m, err := lock.AcquireAll(ctx, n, want...); m != nil || !errors.Is(err, lock.ErrInvalidConfig) {
		t.Errorf("AcquireAll() with a MultiLocker returning a nil lease = %v, %v; want nil, ErrInvalidConfig", m, err)
	}
	if _, err := n.TryAcquire(ctx, want[0]); err != nil {
		t.Errorf("TryAcquire(%q) after a refused MultiLocker result = %v; want the lease released", want[0], err)
	}
}
