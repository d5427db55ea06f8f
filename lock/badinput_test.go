package lock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// mustErr calls f, fails the test if it panics, and checks that its error
// wraps want.
func mustErr(t *testing.T, call string, want error, f func() error) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v; want an error wrapping %v", call, r, want)
			}
		}()
		err = f()
	}()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v; want an error wrapping %v", call, err, want)
	}
}

// nilCtxDriver uses ctx the way a real driver does, so that Open must
// refuse a nil ctx before calling it.
type nilCtxDriver struct{}

func (nilCtxDriver) Open(ctx context.Context, u *url.URL, _ lock.OpenConfig) (lock.Locker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("not reached in these tests")
}

// typedNilDriver returns a nil *MemLocker in the Locker interface.
type typedNilDriver struct{}

func (typedNilDriver) Open(context.Context, *url.URL, lock.OpenConfig) (lock.Locker, error) {
	var l *locktest.MemLocker
	return l, nil
}

// fakeLease is a Lease type whose nil pointer panics on use.
type fakeLease struct{ done chan struct{} }

func (l *fakeLease) Name() string                  { return "fake" }
func (l *fakeLease) Token() fencing.Token          { return 1 }
func (l *fakeLease) Done() <-chan struct{}         { return l.done }
func (l *fakeLease) Err() error                    { return nil }
func (l *fakeLease) Release(context.Context) error { return nil }

// TestBadInputLock calls every exported function of package lock that
// takes a context, a pointer, an interface, a function or a string with
// nil, typed-nil, zero and malformed values: each returns an error wrapping
// the sentinel, and none panics.
func TestBadInputLock(t *testing.T) {
	nilCtx := context.Context(nil)
	ctx := context.Background()
	m := locktest.NewMemory()
	l := m.NewLocker("bad-input")
	t.Cleanup(func() { l.Close() })
	var typedNil *locktest.MemLocker
	fn := func(context.Context, lock.Lease) error { return nil }
	scheme := uniqueScheme("nilctx")
	lock.Register(scheme, nilCtxDriver{})
	tnScheme := uniqueScheme("typednil")
	lock.Register(tnScheme, typedNilDriver{})

	tests := []struct {
		call string
		want error
		f    func() error
	}{
		// lock.Open(nil, "etcd://…") panicked in the etcd driver.
		{"Open(nil ctx)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(nilCtx, scheme+"://h:1/x"); return err }},
		{"Open(empty)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(ctx, ""); return err }},
		{"Open(fragment)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(ctx, scheme+"://h:1/x#f"); return err }},
		{"Open(empty fragment)", lock.ErrInvalidConfig, func() error { _, err := lock.Open(ctx, scheme+"://h:1/x#"); return err }},
		{"Open(driver returns typed nil)", lock.ErrInvalidConfig, func() error {
			l, err := lock.Open(ctx, tnScheme+"://h:1/x")
			if l != nil {
				return errors.New("returned a Locker")
			}
			if err != nil {
				return lock.ErrInvalidConfig // any error will do, as long as no nil Locker comes back as a success
			}
			return nil
		}},
		{"URLHosts(nil)", lock.ErrInvalidConfig, func() error { _, err := lock.URLHosts(nil); return err }},
		{"URLHosts(port 0)", lock.ErrInvalidConfig, func() error { _, err := lock.URLHosts(&url.URL{Scheme: "x", Host: "h:0"}); return err }},
		{"URLHosts(port 65536)", lock.ErrInvalidConfig, func() error { _, err := lock.URLHosts(&url.URL{Scheme: "x", Host: "h:65536"}); return err }},
		{"URLPath(nil)", lock.ErrInvalidConfig, func() error { _, err := lock.URLPath(nil); return err }},
		{"CheckQuery(nil)", lock.ErrInvalidConfig, func() error { _, err := lock.CheckQuery(nil); return err }},
		{"URLDuration(twice)", lock.ErrInvalidConfig, func() error {
			_, _, err := lock.URLDuration(url.Values{"ttl": {"1s", "2s"}}, "ttl")
			return err
		}},
		{"ValidateName(empty)", lock.ErrInvalidName, func() error { return lock.ValidateName("") }},
		{"ValidateIdentity(empty)", lock.ErrInvalidConfig, func() error { return lock.ValidateIdentity("") }},
		{"ValidateIdentity(NUL)", lock.ErrInvalidConfig, func() error { return lock.ValidateIdentity("a\x00b") }},
		{"ValidateIdentity(newline)", lock.ErrInvalidConfig, func() error { return lock.ValidateIdentity("a\nb") }},
		{"ValidateIdentity(bad UTF-8)", lock.ErrInvalidConfig, func() error { return lock.ValidateIdentity("\xff") }},
		{"ValidateIdentity(1025 bytes)", lock.ErrInvalidConfig, func() error { return lock.ValidateIdentity(strings.Repeat("x", 1025)) }},

		{"Do(nil ctx)", lock.ErrInvalidConfig, func() error { return lock.Do(nilCtx, l, "a", fn) }},
		{"Do(nil Locker)", lock.ErrInvalidConfig, func() error { return lock.Do(ctx, nil, "a", fn) }},
		{"Do(typed-nil Locker)", lock.ErrInvalidConfig, func() error { return lock.Do(ctx, typedNil, "a", fn) }},
		{"Do(nil fn)", lock.ErrInvalidConfig, func() error { return lock.Do(ctx, l, "a", nil) }},
		{"Do(bad name)", lock.ErrInvalidName, func() error { return lock.Do(ctx, l, "a b", fn) }},
		{"TryDo(nil ctx)", lock.ErrInvalidConfig, func() error { return lock.TryDo(nilCtx, l, "a", fn) }},
		{"TryDo(nil Locker)", lock.ErrInvalidConfig, func() error { return lock.TryDo(ctx, nil, "a", fn) }},
		{"TryDo(typed-nil Locker)", lock.ErrInvalidConfig, func() error { return lock.TryDo(ctx, typedNil, "a", fn) }},
		{"TryDo(nil fn)", lock.ErrInvalidConfig, func() error { return lock.TryDo(ctx, l, "a", nil) }},

		// lock.LeaseContext(ctx, nil) panicked in its goroutine.
		{"LeaseContext(ctx, nil)", lock.ErrInvalidConfig, func() error {
			c, stop := lock.LeaseContext(ctx, nil)
			defer stop()
			<-c.Done()
			return context.Cause(c)
		}},
		{"LeaseContext(ctx, typed nil)", lock.ErrInvalidConfig, func() error {
			c, stop := lock.LeaseContext(ctx, (*fakeLease)(nil))
			defer stop()
			<-c.Done()
			return context.Cause(c)
		}},
		{"LeaseContext(nil, lease)", lock.ErrInvalidConfig, func() error {
			c, stop := lock.LeaseContext(nilCtx, &fakeLease{done: make(chan struct{})})
			defer stop()
			<-c.Done()
			return context.Cause(c)
		}},

		{"NewElection(nil Locker)", lock.ErrInvalidConfig, func() error {
			_, err := lock.NewElection(nil, "e", lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
			return err
		}},
		{"NewElection(typed-nil Locker)", lock.ErrInvalidConfig, func() error {
			_, err := lock.NewElection(typedNil, "e", lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
			return err
		}},
		{"NewElection(nil OnStarted)", lock.ErrInvalidConfig, func() error { _, err := lock.NewElection(l, "e", lock.ElectionConfig{}); return err }},
		{"NewElection(typed-nil MeterProvider)", lock.ErrInvalidConfig, func() error {
			var mp *metricnoop.MeterProvider
			_, err := lock.NewElection(l, "e", lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}, MeterProvider: mp})
			return err
		}},
		{"NewElection(bad name)", lock.ErrInvalidName, func() error {
			_, err := lock.NewElection(l, "", lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
			return err
		}},
		{"(*Election)(nil).Run", lock.ErrInvalidConfig, func() error { return (*lock.Election)(nil).Run(ctx) }},
		{"(*Election)(nil).Resign", lock.ErrInvalidConfig, func() error { return (*lock.Election)(nil).Resign(ctx) }},
		{"(*Election)(nil).Leader", lock.ErrInvalidConfig, func() error { _, err := (*lock.Election)(nil).Leader(ctx); return err }},
		{"(*Election)(nil).Observe", lock.ErrInvalidConfig, func() error { _, _, err := (*lock.Election)(nil).Observe(ctx); return err }},
		{"new(Election).Run", lock.ErrInvalidConfig, func() error { return new(lock.Election).Run(ctx) }},
	}
	e, err := lock.NewElection(l, "e", lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	if err != nil {
		t.Fatalf("NewElection() = %v", err)
	}
	tests = append(tests, []struct {
		call string
		want error
		f    func() error
	}{
		{"Election.Run(nil)", lock.ErrInvalidConfig, func() error { return e.Run(nilCtx) }},
		{"Election.Resign(nil)", lock.ErrInvalidConfig, func() error { return e.Resign(nilCtx) }},
		{"Election.Leader(nil)", lock.ErrInvalidConfig, func() error { _, err := e.Leader(nilCtx); return err }},
		{"Election.Observe(nil)", lock.ErrInvalidConfig, func() error { _, _, err := e.Observe(nilCtx); return err }},
	}...)
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) { mustErr(t, tt.call, tt.want, tt.f) })
	}
	if got := (*lock.Election)(nil).Name(); got != "" {
		t.Errorf("(*Election)(nil).Name() = %q; want \"\"", got)
	}
}

func TestDefaultIdentityIsValid(t *testing.T) {
	a, b := lock.DefaultIdentity(), lock.DefaultIdentity()
	if err := lock.ValidateIdentity(a); err != nil {
		t.Errorf("ValidateIdentity(DefaultIdentity() = %q) = %v; want nil", a, err)
	}
	if a == b {
		t.Errorf("DefaultIdentity() = %q twice; want the random part to differ", a)
	}
	if parts := strings.Split(a, "/"); len(parts) < 3 || len(parts[len(parts)-1]) != 12 {
		t.Errorf("DefaultIdentity() = %q; want hostname/pid/<12 hex digits>", a)
	}
}
