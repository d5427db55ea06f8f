package zklock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/lock"
)

// TestBadInput calls the exported functions and methods of the package with
// nil, typed-nil, zero and malformed values: each returns an error wrapping
// lock.ErrInvalidConfig or lock.ErrInvalidName, and none panics. None gets
// as far as I/O.
func TestBadInput(t *testing.T) {
	o, err := buildOptions(nil)
	if err != nil {
		t.Fatalf("buildOptions() = %v", err)
	}
	l := newLocker(o) // never started: every call below must stop before using it
	nilCtx := context.Context(nil)
	ctx := context.Background()
	var (
		nilLocker *Locker
		nilLease  *Lease
		servers   = []string{"127.0.0.1:1"}
	)
	tests := []struct {
		call string
		want error
		f    func() error
	}{
		{"Dial(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := Dial(nilCtx, servers); return err }},
		{"Dial(no servers)", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, nil); return err }},
		{"Dial(empty server)", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, []string{""}); return err }},
		{"Dial(nil option)", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, nil); return err }},
		{"Dial(WithIdentity(NUL))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithIdentity("a\x00b")); return err }},
		{"Dial(WithIdentity(newline))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithIdentity("a\nb")); return err }},
		{"Dial(WithACL(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithACL(nil)); return err }},
		{"Dial(WithLogger(&slog.Logger{}))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithLogger(&slog.Logger{})); return err }},
		{"Dial(WithLogger(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithLogger(nil)); return err }},
		{"Dial(WithDialer(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithDialer(nil)); return err }},
		{"Dial(WithSessionTimeout(0))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithSessionTimeout(0)); return err }},
		{"Dial(WithHostProvider(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithHostProvider(nil)); return err }},
		{"Dial(WithHostProvider(typed nil))", lock.ErrInvalidConfig, func() error {
			var hp *zk.DNSHostProvider
			_, err := Dial(ctx, servers, WithHostProvider(hp))
			return err
		}},
		{"lock.Open(nil ctx, zk://…)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(nilCtx, "zk://127.0.0.1:1/x"); return err }},
		{"Dial(WithMeterProvider(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithMeterProvider(nil)); return err }},
		{"Dial(WithMeterProvider(typed nil))", lock.ErrInvalidConfig, func() error {
			var mp *metricnoop.MeterProvider
			_, err := Dial(ctx, servers, WithMeterProvider(mp))
			return err
		}},
		{"Dial(WithTracerProvider(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithTracerProvider(nil)); return err }},
		{"Dial(WithTracerProvider(typed nil))", lock.ErrInvalidConfig, func() error {
			var tp *tracenoop.TracerProvider
			_, err := Dial(ctx, servers, WithTracerProvider(tp))
			return err
		}},
		{"Dial(WithNameAttribute(nil))", lock.ErrInvalidConfig, func() error { _, err := Dial(ctx, servers, WithNameAttribute(nil)); return err }},
		{"lock.Open(zk://…?identity=a, WithIdentity(b))", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "zk://127.0.0.1:1/x?identity=a", lock.WithIdentity("b"))
			return err
		}},
		{"lock.Open(zk://…, WithLogger(nil))", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "zk://127.0.0.1:1/x", lock.WithLogger(nil))
			return err
		}},
		{"nil Locker.Healthy", lock.ErrInvalidConfig, func() error { return nilLocker.Healthy(ctx) }},

		{"GuardedMulti(nil conn)", lock.ErrInvalidConfig, func() error { _, err := GuardedMulti(ctx, nil, nilLease); return err }},
		{"GuardedMulti(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := GuardedMulti(nilCtx, &zk.Conn{}, nilLease); return err }},
		{"GuardedMulti(typed-nil lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedMulti(ctx, &zk.Conn{}, nilLease); return err }},
		{"GuardedMulti(zero lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedMulti(ctx, &zk.Conn{}, &Lease{}); return err }},
		{"GuardedMulti(nil op)", lock.ErrInvalidConfig, func() error {
			_, err := GuardedMulti(ctx, &zk.Conn{}, nilLease, (*zk.SetDataRequest)(nil))
			return err
		}},
		{"GuardedMultiAll(nil conn)", lock.ErrInvalidConfig, func() error { _, err := GuardedMultiAll(ctx, nil, []lock.Lease{nilLease}); return err }},
		{"GuardedMultiAll(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := GuardedMultiAll(nilCtx, &zk.Conn{}, []lock.Lease{nilLease}); return err }},
		{"GuardedMultiAll(no leases)", lock.ErrInvalidConfig, func() error { _, err := GuardedMultiAll(ctx, &zk.Conn{}, nil); return err }},
		{"GuardedMultiAll(zero lease second)", lock.ErrInvalidConfig, func() error {
			_, err := GuardedMultiAll(ctx, &zk.Conn{}, []lock.Lease{nilLease, &Lease{}})
			return err
		}},
		{"GuardedMultiAll(nil lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedMultiAll(ctx, &zk.Conn{}, []lock.Lease{nil}); return err }},
		{"SetFenced(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := SetFenced(nilCtx, &zk.Conn{}, "/a", nil, 1); return err }},
		{"SetFenced(nil conn)", lock.ErrInvalidConfig, func() error { _, err := SetFenced(ctx, nil, "/a", nil, 1); return err }},
		{"SetFenced(relative path)", lock.ErrInvalidConfig, func() error { _, err := SetFenced(ctx, &zk.Conn{}, "a", nil, 1); return err }},
		{"SetFenced(control character)", lock.ErrInvalidConfig, func() error { _, err := SetFenced(ctx, &zk.Conn{}, "/a\x01", nil, 1); return err }},
		{"GetFenced(nil ctx)", lock.ErrInvalidConfig, func() error { _, _, err := GetFenced(nilCtx, &zk.Conn{}, "/a"); return err }},
		{"GetFenced(empty path)", lock.ErrInvalidConfig, func() error { _, _, err := GetFenced(ctx, &zk.Conn{}, ""); return err }},

		{"Locker.Acquire(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.Acquire(nilCtx, "a"); return err }},
		{"Locker.TryAcquire(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.TryAcquire(nilCtx, "a"); return err }},
		{"Locker.Holder(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.Holder(nilCtx, "a"); return err }},
		{"Locker.Observe(nil ctx)", lock.ErrInvalidConfig, func() error { _, _, err := l.Observe(nilCtx, "a"); return err }},
		{"Locker.Holder(bad name)", lock.ErrInvalidName, func() error { _, err := l.Holder(ctx, "a//b"); return err }},
		{"Locker.Observe(bad name)", lock.ErrInvalidName, func() error { _, _, err := l.Observe(ctx, ""); return err }},

		{"Locker.AcquireAll(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(nilCtx, []string{"a"}); return err }},
		{"Locker.TryAcquireAll(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.TryAcquireAll(nilCtx, []string{"a"}); return err }},
		{"Locker.AcquireAll(no names)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(ctx, nil); return err }},
		{"Locker.AcquireAll(name twice)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(ctx, []string{"a", "b", "a"}); return err }},
		{"Locker.TryAcquireAll(bad name)", lock.ErrInvalidName, func() error { _, err := l.TryAcquireAll(ctx, []string{"a", "b//c"}); return err }},
		{"Locker.AcquireAll(record-shaped name)", lock.ErrInvalidName, func() error {
			_, err := l.AcquireAll(ctx, []string{"a", "x-lock-0000000001"})
			return err
		}},
		{"(*Locker)(nil).AcquireAll", lock.ErrInvalidConfig, func() error { _, err := nilLocker.AcquireAll(ctx, []string{"a"}); return err }},
		{"(*Locker)(nil).Acquire", lock.ErrInvalidConfig, func() error { _, err := nilLocker.Acquire(ctx, "a"); return err }},
		{"(*Locker)(nil).TryAcquire", lock.ErrInvalidConfig, func() error { _, err := nilLocker.TryAcquire(ctx, "a"); return err }},
		{"(*Locker)(nil).Holder", lock.ErrInvalidConfig, func() error { _, err := nilLocker.Holder(ctx, "a"); return err }},
		{"(*Locker)(nil).Observe", lock.ErrInvalidConfig, func() error { _, _, err := nilLocker.Observe(ctx, "a"); return err }},
		{"(*Locker)(nil).Close", lock.ErrInvalidConfig, func() error { return nilLocker.Close() }},
		{"new(Locker).Acquire", lock.ErrInvalidConfig, func() error { _, err := new(Locker).Acquire(ctx, "a"); return err }},
		{"new(Locker).Close", lock.ErrInvalidConfig, func() error { return new(Locker).Close() }},

		{"(*Lease)(nil).Err", lock.ErrInvalidConfig, func() error { return nilLease.Err() }},
		{"(*Lease)(nil).Release", lock.ErrInvalidConfig, func() error { return nilLease.Release(ctx) }},
		{"new(Lease).Err", lock.ErrInvalidConfig, func() error { return new(Lease).Err() }},
		{"new(Lease).Release", lock.ErrInvalidConfig, func() error { return new(Lease).Release(ctx) }},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", tt.call, r)
					}
				}()
				err = tt.f()
			}()
			if !errors.Is(err, tt.want) {
				t.Errorf("%s = %v; want an error wrapping %v", tt.call, err, tt.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "zklock: ") && !strings.HasPrefix(err.Error(), "lock: ") {
				t.Errorf("%s = %q; want the package prefix", tt.call, err)
			}
		})
	}

	t.Run("zero values", func(t *testing.T) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a nil receiver panicked: %v", r)
			}
		}()
		if nilLocker.Identity() != "" || nilLocker.SessionTimeout() != 0 || nilLocker.SessionID() != 0 {
			t.Errorf("(*Locker)(nil) Identity, SessionTimeout, SessionID are not zero")
		}
		if nilLease.Name() != "" || nilLease.Token() != 0 || nilLease.Path() != "" || nilLease.Version() != 0 || nilLease.SessionID() != 0 {
			t.Errorf("(*Lease)(nil) Name, Token, Path, Version, SessionID are not zero")
		}
		if id := (&Lease{}).SessionID(); id != 0 {
			t.Errorf("(&Lease{}).SessionID() = %d; want 0", id)
		}
		if op := nilLease.CheckOp(); op == nil || op.Version >= -1 || !strings.HasPrefix(op.Path, "/zookeeper/") {
			t.Errorf("(*Lease)(nil).CheckOp() = %+v; want a check of a version no znode has, under the server's own /zookeeper", op)
		}
		select {
		case <-nilLease.Done():
		default:
			t.Errorf("(*Lease)(nil).Done() is open; want it closed: a nil lease holds nothing")
		}
	})
}
