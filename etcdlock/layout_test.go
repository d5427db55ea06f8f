package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

func TestWithLayout(t *testing.T) {
	client := newTestClient(t)
	for _, tc := range []struct {
		opts []Option
		want Layout // "": an error wrapping lock.ErrInvalidConfig
	}{
		{nil, LayoutFencelock},
		{[]Option{WithLayout(LayoutFencelock)}, LayoutFencelock},
		{[]Option{WithLayout(LayoutConcurrency)}, LayoutConcurrency},
		{[]Option{WithLayout("")}, ""},
		{[]Option{WithLayout("Concurrency")}, ""},
		{[]Option{WithLayout("curator")}, ""},
	} {
		l, err := New(client, tc.opts...)
		switch {
		case tc.want == "" && !errors.Is(err, lock.ErrInvalidConfig):
			t.Errorf("New(%d options) = %v; want an error wrapping lock.ErrInvalidConfig", len(tc.opts), err)
		case tc.want == "":
			if !strings.Contains(err.Error(), "layout") {
				t.Errorf("New() = %q; want an error that names the layout", err)
			}
		case err != nil:
			t.Errorf("New() = %v; want nil", err)
		default:
			if l.opts.layout != tc.want {
				t.Errorf("layout = %q; want %q", l.opts.layout, tc.want)
			}
			l.Close()
		}
	}
}

func TestOpenLayout(t *testing.T) {
	for url, want := range map[string]Layout{
		"etcd://127.0.0.1:1/app":                                       LayoutFencelock,
		"etcd://127.0.0.1:1/app?layout=fencelock":                      LayoutFencelock,
		"etcd://127.0.0.1:1/app?layout=concurrency":                    LayoutConcurrency,
		"etcd://127.0.0.1:1/app?layout=concurrency&lock_delay=1s":      LayoutConcurrency,
		"etcd://127.0.0.1:1/app?layout=":                               "",
		"etcd://127.0.0.1:1/app?layout=mutex":                          "",
		"etcd://127.0.0.1:1/app?layout=concurrency&layout=concurrency": "",
	} {
		lk, err := lock.Open(context.Background(), url)
		if want == "" {
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Errorf("Open(%q) = %v; want an error wrapping lock.ErrInvalidConfig", url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q) = %v; want nil", url, err)
			continue
		}
		if got := lk.(*Locker).opts.layout; got != want {
			t.Errorf("Open(%q): layout %q; want %q", url, got, want)
		}
		lk.Close()
	}
}

// TestConcurrencyKeys checks the keys of LayoutConcurrency against those
// of etcd's concurrency.Mutex with pfx "<prefix><name>", for every kind of
// prefix, and that the guard and lock-delay markers stay outside every
// name's range.
func TestConcurrencyKeys(t *testing.T) {
	for prefix, mutexPfx := range map[string]string{"": "jobs", "/": "/jobs", "/app": "/app/jobs", "app/": "app/jobs"} {
		l, err := New(newTestClient(t), WithPrefix(prefix), WithLayout(LayoutConcurrency), WithLockDelay(time.Second))
		if err != nil {
			t.Fatalf("New(WithPrefix(%q)) = %v", prefix, err)
		}
		s := newSession(l, 0x694d7a3c12, time.Now())
		a := l.newAcquisition(s, "jobs", queue.ExclusiveRequest, false)
		if want := mutexPfx + "/" + fmt.Sprintf("%x", int64(0x694d7a3c12)); a.key != want {
			t.Errorf("prefix %q: key %q; want %q", prefix, a.key, want)
		}
		if le := (&Lease{l: l, record: a.record}); le.Name() != "jobs" {
			t.Errorf("prefix %q: Name() = %q; want jobs", prefix, le.Name())
		}
		for _, k := range []string{s.guard.key, a.marker} {
			if strings.HasPrefix(k, l.namePrefix("jobs")) || !strings.HasPrefix(k, l.opts.prefix+"#") {
				t.Errorf("prefix %q: key %q in the name's range or not under %q", prefix, k, l.opts.prefix+"#")
			}
		}
		if a2 := l.newAcquisition(s, "jobs", queue.ExclusiveRequest, false); a2.key != a.key {
			t.Errorf("prefix %q: a second acquisition's key %q; want the session's %q", prefix, a2.key, a.key)
		}
		l.Close()
	}
}

// TestConcurrencyRefusesKinds checks that shared and semaphore requests are
// refused at once, without a request to the (unreachable) server.
func TestConcurrencyRefusesKinds(t *testing.T) {
	l, err := New(newTestClient(t), WithLayout(LayoutConcurrency))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, f := range map[string]func() (lock.Lease, error){
		"AcquireShared":       func() (lock.Lease, error) { return l.AcquireShared(ctx, "x") },
		"TryAcquireShared":    func() (lock.Lease, error) { return l.TryAcquireShared(ctx, "x") },
		"AcquireSemaphore":    func() (lock.Lease, error) { return l.AcquireSemaphore(ctx, "x", 2) },
		"TryAcquireSemaphore": func() (lock.Lease, error) { return l.TryAcquireSemaphore(ctx, "x", 2) },
	} {
		if le, err := f(); le != nil || !errors.Is(err, lock.ErrIncompatible) || !strings.Contains(err.Error(), "layout concurrency") {
			t.Errorf("%s = %v, %v; want an error wrapping lock.ErrIncompatible naming the layout", name, le, err)
		}
	}
	if _, ok := l.SessionLease(); ok {
		t.Errorf("a refused request started a session")
	}
}

// TestReserve checks that two acquisitions of a name through one session
// take turns for their shared key, and that the wait ends with ctx, with
// the session, or at once for a TryAcquire.
func TestReserve(t *testing.T) {
	l, err := New(newTestClient(t), WithLayout(LayoutConcurrency))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := newSession(l, 0x42, time.Now())
	ctx := context.Background()
	first := l.newAcquisition(s, "x", queue.ExclusiveRequest, false)
	if err := first.reserve(ctx); err != nil {
		t.Fatalf("reserve() = %v", err)
	}
	if other := l.newAcquisition(s, "y", queue.ExclusiveRequest, false); other.reserve(ctx) != nil {
		t.Errorf("another name's key was not free")
	}
	if err := l.newAcquisition(s, "x", queue.ExclusiveRequest, true).reserve(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("a TryAcquire's reserve = %v; want lock.ErrLocked", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.newAcquisition(s, "x", queue.ExclusiveRequest, false).reserve(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("reserve(expiring ctx) = %v; want context.DeadlineExceeded", err)
	}
	second := l.newAcquisition(s, "x", queue.ExclusiveRequest, false)
	done := make(chan error, 1)
	go func() { done <- second.reserve(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the second reserve returned %v while the first held the key", err)
	case <-time.After(50 * time.Millisecond):
	}
	stale := first.record
	stale.slot = make(chan struct{})
	stale.free() // not the reservation: changes nothing
	select {
	case err := <-done:
		t.Fatalf("a stale free let the second reserve return %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	first.free()
	first.free()
	if err := <-done; err != nil {
		t.Fatalf("the second reserve = %v after the first freed the key", err)
	}
	third := l.newAcquisition(s, "x", queue.ExclusiveRequest, false)
	go func() { done <- third.reserve(ctx) }()
	s.end(fmt.Errorf("%w: test", lock.ErrLost), true)
	if err := <-done; !errors.Is(err, lock.ErrLost) {
		t.Errorf("reserve() = %v after the session ended; want lock.ErrLost", err)
	}
}
