package etcdlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/lock"
)

// TestBadInput calls every exported function and method of the package
// with nil, typed-nil, zero and malformed values: each returns an error
// wrapping lock.ErrInvalidConfig or lock.ErrInvalidName, none panics, and
// none does I/O (the client points at a closed port).
func TestBadInput(t *testing.T) {
	client := newTestClient(t)
	l, err := New(client, WithTTL(2e9))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	nilCtx := context.Context(nil)
	ctx := context.Background()
	var (
		nilClient *clientv3.Client
		nilLocker *Locker
		nilLease  *Lease
	)
	tests := []struct {
		call string
		want error
		f    func() error
	}{
		{"New(nil)", lock.ErrInvalidConfig, func() error { _, err := New(nil); return err }},
		{"New(&clientv3.Client{})", lock.ErrInvalidConfig, func() error { _, err := New(&clientv3.Client{}); return err }},
		{"New(client, nil option)", lock.ErrInvalidConfig, func() error { _, err := New(client, nil); return err }},
		{"New(WithIdentity(NUL))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithIdentity("a\x00b")); return err }},
		{"New(WithIdentity(1025 bytes))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithIdentity(strings.Repeat("x", 1025))); return err }},
		{"New(WithIdentity(bad UTF-8))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithIdentity("\xff")); return err }},
		{"New(WithLogger(&slog.Logger{}))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithLogger(&slog.Logger{})); return err }},
		{"New(WithLogger(nil))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithLogger(nil)); return err }},
		{"lock.Open(nil ctx, etcd://…)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(nilCtx, "etcd://127.0.0.1:1/x"); return err }},
		{"New(WithMeterProvider(nil))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithMeterProvider(nil)); return err }},
		{"New(WithMeterProvider(typed nil))", lock.ErrInvalidConfig, func() error {
			var mp *metricnoop.MeterProvider
			_, err := New(client, WithMeterProvider(mp))
			return err
		}},
		{"New(WithTracerProvider(nil))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithTracerProvider(nil)); return err }},
		{"New(WithTracerProvider(typed nil))", lock.ErrInvalidConfig, func() error {
			var tp *tracenoop.TracerProvider
			_, err := New(client, WithTracerProvider(tp))
			return err
		}},
		{"New(WithNameAttribute(nil))", lock.ErrInvalidConfig, func() error { _, err := New(client, WithNameAttribute(nil)); return err }},
		{"lock.Open(etcd://…?identity=a, WithIdentity(b))", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "etcd://127.0.0.1:1/x?identity=a", lock.WithIdentity("b"))
			return err
		}},
		{"lock.Open(etcd://…, WithLogger(nil))", lock.ErrInvalidConfig, func() error {
			_, err := lock.Open(ctx, "etcd://127.0.0.1:1/x", lock.WithLogger(nil))
			return err
		}},
		{"Locker.Healthy(nil ctx)", lock.ErrInvalidConfig, func() error { return l.Healthy(nilCtx) }},
		{"nil Locker.Healthy", lock.ErrInvalidConfig, func() error { return nilLocker.Healthy(ctx) }},

		// etcdlock.GuardedTxn with a typed-nil client panicked.
		{"GuardedTxn(typed-nil client)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, nilClient, nilLease); return err }},
		{"GuardedTxn(zero client)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, &clientv3.Client{}, nilLease); return err }},
		{"GuardedTxn(nil kv)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, nil, nilLease); return err }},
		{"GuardedTxn(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(nilCtx, client, nilLease); return err }},
		{"GuardedTxn(nil lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, client, nil); return err }},
		{"GuardedTxn(typed-nil lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, client, nilLease); return err }},
		{"GuardedTxn(zero lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxn(ctx, client, &Lease{}); return err }},
		{"PutFenced(typed-nil client)", lock.ErrInvalidConfig, func() error { _, err := PutFenced(ctx, nilClient, "k", "v", 1); return err }},
		{"PutFenced(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := PutFenced(nilCtx, client, "k", "v", 1); return err }},
		{"PutFenced(empty key)", lock.ErrInvalidConfig, func() error { _, err := PutFenced(ctx, client, "", "v", 1); return err }},
		{"GetFenced(typed-nil client)", lock.ErrInvalidConfig, func() error { _, _, err := GetFenced(ctx, nilClient, "k"); return err }},
		{"GetFenced(nil ctx)", lock.ErrInvalidConfig, func() error { _, _, err := GetFenced(nilCtx, client, "k"); return err }},

		{"GuardedTxnAll(no leases)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxnAll(ctx, client, nil); return err }},
		{"GuardedTxnAll(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxnAll(nilCtx, client, []lock.Lease{nilLease}); return err }},
		{"GuardedTxnAll(zero lease)", lock.ErrInvalidConfig, func() error { _, err := GuardedTxnAll(ctx, client, []lock.Lease{&Lease{}, nil}); return err }},
		{"Locker.AcquireAll(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(nilCtx, []string{"a"}); return err }},
		{"Locker.AcquireAll(no names)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(ctx, nil); return err }},
		{"Locker.AcquireAll(unsorted)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(ctx, []string{"b", "a"}); return err }},
		{"Locker.AcquireAll(twice)", lock.ErrInvalidConfig, func() error { _, err := l.AcquireAll(ctx, []string{"a", "a"}); return err }},
		{"Locker.TryAcquireAll(bad name)", lock.ErrInvalidName, func() error { _, err := l.TryAcquireAll(ctx, []string{"a", "b//c"}); return err }},
		{"(*Locker)(nil).AcquireAll", lock.ErrInvalidConfig, func() error { _, err := nilLocker.AcquireAll(ctx, []string{"a"}); return err }},
		{"new(Locker).TryAcquireAll", lock.ErrInvalidConfig, func() error { _, err := new(Locker).TryAcquireAll(ctx, []string{"a"}); return err }},
		{"Locker.Acquire(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.Acquire(nilCtx, "a"); return err }},
		{"Locker.TryAcquire(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.TryAcquire(nilCtx, "a"); return err }},
		{"Locker.Holder(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := l.Holder(nilCtx, "a"); return err }},
		{"Locker.Observe(nil ctx)", lock.ErrInvalidConfig, func() error { _, _, err := l.Observe(nilCtx, "a"); return err }},
		{"Locker.Acquire(bad name)", lock.ErrInvalidName, func() error { _, err := l.Acquire(ctx, "a//b"); return err }},
		{"Locker.TryAcquire(bad name)", lock.ErrInvalidName, func() error { _, err := l.TryAcquire(ctx, ""); return err }},
		{"Locker.Holder(bad name)", lock.ErrInvalidName, func() error { _, err := l.Holder(ctx, "/a"); return err }},
		{"Locker.Observe(bad name)", lock.ErrInvalidName, func() error { _, _, err := l.Observe(ctx, "a/"); return err }},

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
			if err != nil && !strings.HasPrefix(err.Error(), "etcdlock: ") && !strings.HasPrefix(err.Error(), "lock: ") {
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
		if nilLocker.Identity() != "" || nilLocker.Prefix() != "" || nilLocker.TTL() != 0 {
			t.Errorf("(*Locker)(nil) Identity, Prefix, TTL = %q, %q, %v; want zero values", nilLocker.Identity(), nilLocker.Prefix(), nilLocker.TTL())
		}
		if nilLease.Name() != "" || nilLease.Token() != 0 || nilLease.Key() != "" {
			t.Errorf("(*Lease)(nil) Name, Token, Key are not zero")
		}
		select {
		case <-nilLease.Done():
		default:
			t.Errorf("(*Lease)(nil).Done() is open; want it closed: a nil lease holds nothing")
		}
		_ = nilLease.IsHeld()
	})
}
