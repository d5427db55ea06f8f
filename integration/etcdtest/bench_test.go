package etcdtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// BenchmarkUncontended measures one acquire and release of a free lock:
// etcdlock, etcd's concurrency.Mutex (session created once, then Lock and
// Unlock per op), and the floor of any lock on etcd, a bare Put and Delete.
// All three run on the same cluster in the same process.
func BenchmarkUncontended(b *testing.B) {
	c := startCluster(b)
	cli := newClient(b, c.Endpoints())
	ctx := context.Background()

	b.Run("etcdlock", func(b *testing.B) {
		l := newLocker(b, cli, etcdlock.WithTTL(10*time.Second))
		name := testutil.UniqueName(b)
		for b.Loop() {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				b.Fatalf("Acquire() = %v", err)
			}
			if err := le.Release(ctx); err != nil {
				b.Fatalf("Release() = %v", err)
			}
		}
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			b.Fatalf("NewSession() = %v", err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "bench-mutex/"+testutil.UniqueName(b))
		for b.Loop() {
			if err := m.Lock(ctx); err != nil {
				b.Fatalf("Lock() = %v", err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatalf("Unlock() = %v", err)
			}
		}
	})
	b.Run("put+delete", func(b *testing.B) {
		key := "bench-floor/" + testutil.UniqueName(b)
		for b.Loop() {
			if _, err := cli.Put(ctx, key, "x"); err != nil {
				b.Fatalf("Put() = %v", err)
			}
			if _, err := cli.Delete(ctx, key); err != nil {
				b.Fatalf("Delete() = %v", err)
			}
		}
	})
}

// BenchmarkHandoff has two clients ping-pong one lock: each acquires,
// releases at once and queues again, so every grant after the first is a
// handoff from one client to the other. It reports grants/s.
func BenchmarkHandoff(b *testing.B) {
	c := startCluster(b)
	ctx := context.Background()

	b.Run("etcdlock", func(b *testing.B) {
		name := testutil.UniqueName(b)
		var lockers [2]*etcdlock.Locker
		for i := range lockers {
			lockers[i] = newLocker(b, newClient(b, c.Endpoints()), etcdlock.WithTTL(10*time.Second))
		}
		pingPong(b, func(i int) (func() error, error) {
			le, err := lockers[i].Acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return func() error { return le.Release(ctx) }, nil
		})
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		pfx := "bench-mutex/" + testutil.UniqueName(b)
		var mutexes [2]*concurrency.Mutex
		for i := range mutexes {
			s, err := concurrency.NewSession(newClient(b, c.Endpoints()), concurrency.WithTTL(10))
			if err != nil {
				b.Fatalf("NewSession() = %v", err)
			}
			b.Cleanup(func() { s.Close() })
			mutexes[i] = concurrency.NewMutex(s, pfx)
		}
		pingPong(b, func(i int) (func() error, error) {
			if err := mutexes[i].Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return mutexes[i].Unlock(ctx) }, nil
		})
	})
}

// pingPong runs b.N grants shared by two goroutines that each loop
// acquire(i) then release, and reports grants/s and how many grants went
// to the other client than the previous one.
func pingPong(b *testing.B, acquire func(i int) (release func() error, err error)) {
	b.Helper()
	var (
		left     atomic.Int64
		mu       sync.Mutex
		last     = -1
		switches int
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				release, err := acquire(i)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				mu.Lock()
				if last != -1 && last != i {
					switches++
				}
				last = i
				mu.Unlock()
				if err := release(); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatalf("ping-pong: %v", firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
	if b.N > 1 {
		b.ReportMetric(float64(switches)/float64(b.N-1), "handoff-ratio")
	}
}
