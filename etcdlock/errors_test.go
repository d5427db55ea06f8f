package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// TestErrorPrefixOnce checks that errors leaving the package through its
// public functions and methods carry the "etcdlock: " prefix exactly once,
// also when they wrap errors from inside (a lost or released lease, a
// closed Locker, invalid options), and still wrap their sentinels.
func TestErrorPrefixOnce(t *testing.T) {
	ctx := context.Background()
	client := newTestClient(t)
	l, err := New(client, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	s := newSession(l, 7, time.Now())
	s.end(fmt.Errorf("%w: test", lock.ErrLost), true) // no request goes out for its leases
	lost := &Lease{l: l, record: record{s: s, pfx: l.namePrefix("x"), key: l.namePrefix("x") + "7-1", rev: 5}, watch: &recordWatch{}}
	if got := lost.Name(); got != "x" {
		t.Errorf("Name() = %q; want %q", got, "x")
	}
	lost.lose(fmt.Errorf("%w: its record was deleted", lock.ErrLost), true)
	released := &Lease{l: l, record: record{s: s, pfx: l.namePrefix("y"), key: l.namePrefix("y") + "7-2", rev: 6}, watch: &recordWatch{}}
	released.end(lock.ErrReleased)

	tests := []struct {
		call string
		want error
		f    func() error
	}{
		{"New(bad options)", lock.ErrInvalidConfig, func() error {
			_, err := New(client, WithIdentity(""), WithTTL(1500*time.Millisecond), nil)
			return err
		}},
		{"New(nil client)", lock.ErrInvalidConfig, func() error { _, err := New(nil); return err }},
		{"lock.Open(bad query)", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "etcd://127.0.0.1:1/p?ttl=x")
			return err
		}},
		{"lock.Open(bad host)", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "etcd://127.0.0.1/p")
			return err
		}},
		{"lock.Open(bad option value)", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "etcd://127.0.0.1:1/p?loss_margin=9s")
			return err
		}},
		{"Acquire(closed)", lock.ErrClosed, func() error { _, err := l.Acquire(ctx, "x"); return err }},
		{"TryAcquire(closed)", lock.ErrClosed, func() error { _, err := l.TryAcquire(ctx, "x"); return err }},
		{"Acquire(bad name)", lock.ErrInvalidName, func() error { _, err := l.Acquire(ctx, "/x"); return err }},
		{"Holder(closed)", lock.ErrClosed, func() error { _, err := l.Holder(ctx, "x"); return err }},
		{"Observe(closed)", lock.ErrClosed, func() error { _, _, err := l.Observe(ctx, "x"); return err }},
		{"Lease.Err(lost)", lock.ErrLost, lost.Err},
		{"Lease.Release(lost)", lock.ErrLost, func() error { return lost.Release(ctx) }},
		{"Lease.Err(released)", lock.ErrReleased, released.Err},
		{"Lease.Release(released)", lock.ErrReleased, func() error { return released.Release(ctx) }},
		{"GuardedTxn(lost)", lock.ErrLost, func() error { _, err := GuardedTxn(ctx, client, lost); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			err := tt.f()
			if !errors.Is(err, tt.want) {
				t.Fatalf("%s = %v; want an error wrapping %v", tt.call, err, tt.want)
			}
			if n := strings.Count(err.Error(), "etcdlock:"); n != 1 || !strings.HasPrefix(err.Error(), "etcdlock: ") {
				t.Errorf("%s = %q: the prefix %q %d times; want once, at the start", tt.call, err, "etcdlock: ", n)
			}
		})
	}
}
