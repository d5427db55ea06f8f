package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// TestErrorPrefixOnce checks that errors leaving the package through its
// public functions and methods carry the "zklock: " prefix exactly once,
// also when they wrap errors from inside (a lost lease, a closed Locker,
// invalid options), and still wrap their sentinels.
func TestErrorPrefixOnce(t *testing.T) {
	ctx := context.Background()
	o, err := buildOptions([]Option{WithSessionTimeout(time.Second), WithLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(o) // never connected
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	lost := &Lease{l: l, s: &session{id: 1, done: make(chan struct{})}, path: l.parent("x") + "/~0~1", czxid: 5}
	if got := lost.Name(); got != "x" {
		t.Errorf("Name() = %q; want %q", got, "x")
	}
	lost.lose(fmt.Errorf("%w: its znode was deleted", lock.ErrLost))
	released := &Lease{l: l, s: &session{id: 1, done: make(chan struct{})}, path: l.parent("y") + "/~0~1", czxid: 6}
	released.end(fmt.Errorf("lease %q: %w", "y", lock.ErrReleased))

	tests := []struct {
		call string
		want error
		f    func() error
	}{
		{"Dial(bad options)", lock.ErrInvalidConfig, func() error {
			_, err := Dial(ctx, []string{"h:1"}, WithIdentity(""), WithLossMargin(-1), nil)
			return err
		}},
		{"Dial(empty server list)", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, nil); return err }},
		{"lock.Open(bad query)", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "zk://127.0.0.1:1/root?session_timeout=x")
			return err
		}},
		{"lock.Open(bad option value)", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "zk://127.0.0.1:1/root?loss_margin=-1s")
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
		{"GuardedMulti(lost)", lock.ErrLost, func() error { _, err := GuardedMulti(ctx, &zk.Conn{}, lost); return err }},
		{"GuardedMultiAll(released, lost)", lock.ErrReleased, func() error {
			_, err := GuardedMultiAll(ctx, &zk.Conn{}, []lock.Lease{released, lost})
			return err
		}},
		{"AcquireAll(closed)", lock.ErrClosed, func() error { _, err := l.AcquireAll(ctx, []string{"x", "y"}); return err }},
		{"TryAcquireAll(bad name)", lock.ErrInvalidName, func() error { _, err := l.TryAcquireAll(ctx, []string{"x", "/y"}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			err := tt.f()
			if !errors.Is(err, tt.want) {
				t.Fatalf("%s = %v; want an error wrapping %v", tt.call, err, tt.want)
			}
			if n := strings.Count(err.Error(), "zklock:"); n != 1 || !strings.HasPrefix(err.Error(), "zklock: ") {
				t.Errorf("%s = %q: the prefix %q %d times; want once, at the start", tt.call, err, "zklock: ", n)
			}
		})
	}
}
