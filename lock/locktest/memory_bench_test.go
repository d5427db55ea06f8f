package locktest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// BenchmarkMemory measures the in-memory Locker, the lock that unit tests
// of code using a Locker run against, so its cost is the floor of what
// those tests pay per acquisition.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()

	b.Run("acquire-release", func(b *testing.B) {
		l := newMemLocker(b, locktest.NewMemory(), "a")
		b.ReportAllocs()
		for b.Loop() {
			le, err := l.Acquire(ctx, "jobs/nightly")
			if err != nil {
				b.Fatalf("Acquire() = %v; want nil", err)
			}
			if err := le.Release(ctx); err != nil {
				b.Fatalf("Release() = %v; want nil", err)
			}
		}
	})

	b.Run("try-acquire-refused", func(b *testing.B) {
		m := locktest.NewMemory()
		holder := newMemLocker(b, m, "holder")
		if _, err := holder.Acquire(ctx, "jobs/nightly"); err != nil {
			b.Fatalf("Acquire() = %v; want nil", err)
		}
		l := newMemLocker(b, m, "other")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.TryAcquire(ctx, "jobs/nightly"); err == nil {
				b.Fatal("TryAcquire() = nil; want an error wrapping lock.ErrLocked")
			}
		}
	})

	// parallel-names: every goroutine acquires and releases its own name,
	// so the figure shows what the one mutex of a Memory costs under
	// concurrency.
	b.Run("parallel-names", func(b *testing.B) {
		m := locktest.NewMemory()
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			l := m.NewLocker("")
			defer l.Close()
			name := fmt.Sprintf("jobs/%d", seq.Add(1))
			for pb.Next() {
				le, err := l.Acquire(ctx, name)
				if err != nil {
					b.Errorf("Acquire(%q) = %v; want nil", name, err)
					return
				}
				if err := le.Release(ctx); err != nil {
					b.Errorf("Release() = %v; want nil", err)
					return
				}
			}
		})
	})

	for _, clients := range []int{2, 8} {
		b.Run(fmt.Sprintf("handoff-%d", clients), func(b *testing.B) {
			benchHandoff(b, clients)
		})
	}
}

// benchHandoff has clients Lockers, one goroutine each, loop acquire and
// release on one name until b.N grants were made, so that every grant but
// the first waits for a release. It reports grants/s and checks that the
// lock was never held twice.
func benchHandoff(b *testing.B, clients int) {
	ctx := context.Background()
	m := locktest.NewMemory()
	lockers := make([]lock.Locker, clients)
	for i := range lockers {
		lockers[i] = newMemLocker(b, m, fmt.Sprintf("c%d", i))
	}
	var (
		left    atomic.Int64
		holding atomic.Int32
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	fail := func(err error) { errOnce.Do(func() { failed = err }) }
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for _, l := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				le, err := l.Acquire(ctx, "jobs/handoff")
				if err != nil {
					fail(fmt.Errorf("Acquire() = %w; want nil", err))
					return
				}
				if n := holding.Add(1); n != 1 {
					fail(fmt.Errorf("%d holders at once; want 1", n))
				}
				holding.Add(-1)
				if err := le.Release(ctx); err != nil {
					fail(fmt.Errorf("Release() = %w; want nil", err))
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grants/s")
}

// newMemLocker returns a Locker on m closed in b.Cleanup.
func newMemLocker(b *testing.B, m *locktest.Memory, identity string) *locktest.MemLocker {
	b.Helper()
	l := m.NewLocker(identity)
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Errorf("Close() = %v; want nil", err)
		}
	})
	return l
}
