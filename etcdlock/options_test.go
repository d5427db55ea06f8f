package etcdlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/lock"
)

// newTestClient returns a client that is never used for I/O: New and Open do
// none, so option handling needs no server.
func newTestClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatalf("clientv3.New() = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNewOptions(t *testing.T) {
	client := newTestClient(t)
	tests := []struct {
		name       string
		opts       []Option
		wantErr    bool
		prefix     string
		ttl        time.Duration
		lossMargin time.Duration
	}{
		{name: "defaults", prefix: DefaultPrefix, ttl: DefaultTTL, lossMargin: DefaultTTL / 5},
		{name: "prefix without slash", opts: []Option{WithPrefix("app/locks")}, prefix: "app/locks/", ttl: DefaultTTL, lossMargin: 2 * time.Second},
		{name: "prefix with slash", opts: []Option{WithPrefix("app/")}, prefix: "app/", ttl: DefaultTTL, lossMargin: 2 * time.Second},
		{name: "ttl", opts: []Option{WithTTL(3 * time.Second)}, prefix: DefaultPrefix, ttl: 3 * time.Second, lossMargin: 600 * time.Millisecond},
		{name: "ttl and margin", opts: []Option{WithTTL(4 * time.Second), WithLossMargin(time.Second)}, prefix: DefaultPrefix, ttl: 4 * time.Second, lossMargin: time.Second},
		{name: "margin half the ttl", opts: []Option{WithTTL(2 * time.Second), WithLossMargin(time.Second)}, prefix: DefaultPrefix, ttl: 2 * time.Second, lossMargin: time.Second},
		{name: "empty prefix", opts: []Option{WithPrefix("")}, prefix: "", ttl: DefaultTTL, lossMargin: 2 * time.Second},
		{name: "slash prefix", opts: []Option{WithPrefix("/")}, prefix: "/", ttl: DefaultTTL, lossMargin: 2 * time.Second},
		{name: "double slash prefix", opts: []Option{WithPrefix("//")}, wantErr: true},
		{name: "bad prefix byte", opts: []Option{WithPrefix("a#b")}, wantErr: true},
		{name: "zero ttl", opts: []Option{WithTTL(0)}, wantErr: true},
		{name: "negative ttl", opts: []Option{WithTTL(-time.Second)}, wantErr: true},
		{name: "ttl below a second", opts: []Option{WithTTL(500 * time.Millisecond)}, wantErr: true},
		{name: "fractional ttl", opts: []Option{WithTTL(1500 * time.Millisecond)}, wantErr: true},
		{name: "empty identity", opts: []Option{WithIdentity("")}, wantErr: true},
		{name: "nil logger", opts: []Option{WithLogger(nil)}, wantErr: true},
		{name: "zero margin", opts: []Option{WithLossMargin(0)}, wantErr: true},
		{name: "zero lock delay", opts: []Option{WithLockDelay(0)}, wantErr: true},
		{name: "negative lock delay", opts: []Option{WithLockDelay(-time.Second)}, wantErr: true},
		{name: "margin above half the ttl", opts: []Option{WithTTL(2 * time.Second), WithLossMargin(1001 * time.Millisecond)}, wantErr: true},
		{name: "nil option", opts: []Option{nil}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(client, tt.opts...)
			if tt.wantErr {
				if !errors.Is(err, lock.ErrInvalidConfig) {
					t.Fatalf("New() = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
				}
				if !strings.HasPrefix(err.Error(), "etcdlock: ") {
					t.Errorf("New() error %q; want the prefix %q", err, "etcdlock: ")
				}
				return
			}
			if err != nil {
				t.Fatalf("New() = %v; want nil", err)
			}
			defer l.Close()
			if got := l.Prefix(); got != tt.prefix {
				t.Errorf("Prefix() = %q; want %q", got, tt.prefix)
			}
			if got := l.TTL(); got != tt.ttl {
				t.Errorf("TTL() = %v; want %v", got, tt.ttl)
			}
			if got := l.opts.LossMargin; got != tt.lossMargin {
				t.Errorf("loss margin = %v; want %v", got, tt.lossMargin)
			}
			if l.Identity() == "" {
				t.Errorf("Identity() = %q; want a default", l.Identity())
			}
		})
	}
}

func TestNewNilClient(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, lock.ErrInvalidConfig) {
		t.Fatalf("New(nil) = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
	}
}

func TestDefaultIdentity(t *testing.T) {
	client := newTestClient(t)
	a, err := New(client)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer a.Close()
	b, err := New(client)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer b.Close()
	if a.Identity() == b.Identity() {
		t.Errorf("two default identities are both %q; want them to differ", a.Identity())
	}
	if n := strings.Count(a.Identity(), "/"); n != 2 {
		t.Errorf("Identity() = %q; want hostname/pid/random", a.Identity())
	}
	if l, err := New(client, WithIdentity("worker-7")); err != nil || l.Identity() != "worker-7" {
		t.Errorf("New(WithIdentity(%q)) = %v, %v; want that identity", "worker-7", l, err)
	} else {
		l.Close()
	}
}

func TestRecordPrefix(t *testing.T) {
	l, err := New(newTestClient(t), WithPrefix("p"))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer l.Close()
	a, ab := l.namePrefix("a"), l.namePrefix("a/b")
	if strings.HasPrefix(ab, a) || strings.HasPrefix(a, ab) {
		t.Errorf("namePrefix(a) = %q and namePrefix(a/b) = %q; want neither a prefix of the other", a, ab)
	}
}

func TestClosedLocker(t *testing.T) {
	l, err := New(newTestClient(t))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if id, ok := l.SessionLease(); ok {
		t.Errorf("SessionLease() before any grant = %x, true; want false", int64(id))
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil (no session was started)", err)
	}
	if l.client.Ctx().Err() != nil {
		t.Errorf("borrowed client closed by Close; want it left open")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close() = %v; want nil", err)
	}
	if id, ok := l.SessionLease(); ok {
		t.Errorf("SessionLease() after Close = %x, true; want false", int64(id))
	}
	if id, ok := new(Locker).SessionLease(); ok {
		t.Errorf("SessionLease() of a zero Locker = %x, true; want false", int64(id))
	}
	ctx := context.Background()
	if _, err := l.Acquire(ctx, "x"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Acquire() after Close = %v; want %v", err, lock.ErrClosed)
	}
	if _, err := l.TryAcquire(ctx, "x"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryAcquire() after Close = %v; want %v", err, lock.ErrClosed)
	}
	if _, err := l.Holder(ctx, "x"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Holder() after Close = %v; want %v", err, lock.ErrClosed)
	}
	if _, _, err := l.Observe(ctx, "x"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Observe() after Close = %v; want %v", err, lock.ErrClosed)
	}
	if _, err := l.Acquire(ctx, "bad name"); !errors.Is(err, lock.ErrInvalidName) {
		t.Errorf("Acquire(%q) = %v; want %v", "bad name", err, lock.ErrInvalidName)
	}
}

func TestLockDelayOption(t *testing.T) {
	client := newTestClient(t)
	for _, tt := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{name: "default", want: 0},
		{name: "given", opts: []Option{WithLockDelay(3 * time.Second)}, want: 3 * time.Second},
		{name: "sub-second", opts: []Option{WithLockDelay(250 * time.Millisecond)}, want: 250 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(client, tt.opts...)
			if err != nil {
				t.Fatalf("New() = %v; want nil", err)
			}
			defer l.Close()
			if got := l.opts.LockDelay; got != tt.want {
				t.Errorf("lock delay = %v; want %v", got, tt.want)
			}
		})
	}
	lk, err := lock.Open(context.Background(), "etcd://127.0.0.1:1/app?lock_delay=1500ms")
	if err != nil {
		t.Fatalf("Open(lock_delay=1500ms) = %v; want nil", err)
	}
	defer lk.Close()
	if got := lk.(*Locker).opts.LockDelay; got != 1500*time.Millisecond {
		t.Errorf("Open(lock_delay=1500ms): lock delay = %v; want 1.5s", got)
	}
}

func TestOpenURL(t *testing.T) {
	tests := []struct {
		url     string
		wantErr error
		prefix  string
		ttl     time.Duration
		ident   string
	}{
		{url: "etcd://127.0.0.1:1", prefix: DefaultPrefix, ttl: DefaultTTL},
		{url: "etcd://127.0.0.1:1,127.0.0.1:2/app/locks?ttl=3s&identity=w1&loss_margin=1s", prefix: "app/locks/", ttl: 3 * time.Second, ident: "w1"},
		{url: "etcd://127.0.0.1:1/app/", prefix: "app/", ttl: DefaultTTL},
		{url: "etcd://127.0.0.1:1/?ttl=1500ms", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?ttl=0s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?ttl=soon", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?ttl=2s&loss_margin=2s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?identity=", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?lock_delay=0s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?lock_delay=-1s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?lock_delay=later", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?lock_delay=1s&lock_delay=2s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?session_timeout=2s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/?ttl=2s&ttl=3s", wantErr: lock.ErrInvalidConfig},
		{url: "etcd:///app", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1/app", wantErr: lock.ErrInvalidConfig},
		{url: "etcd://127.0.0.1:1/a//b", wantErr: lock.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			lk, err := lock.Open(context.Background(), tt.url)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Open() = %v; want an error wrapping %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open() = %v; want nil", err)
			}
			l, ok := lk.(*Locker)
			if !ok {
				t.Fatalf("Open() = %T; want *etcdlock.Locker", lk)
			}
			if l.Prefix() != tt.prefix || l.TTL() != tt.ttl || (tt.ident != "" && l.Identity() != tt.ident) {
				t.Errorf("Open() = prefix %q, ttl %v, identity %q; want %q, %v, %q", l.Prefix(), l.TTL(), l.Identity(), tt.prefix, tt.ttl, tt.ident)
			}
			if !l.ownsClient {
				t.Errorf("Open() returned a Locker that does not own its client")
			}
			if err := l.Close(); err != nil {
				t.Errorf("Close() = %v; want nil", err)
			}
			if l.client.Ctx().Err() == nil {
				t.Errorf("client still open after Close; want it closed (the Locker owns it)")
			}
		})
	}
}

// namespaceForms are the namespaces both backends must treat alike:
// zklock's options test has the same list, and "" and "/" too, which
// etcdlock alone accepts (see TestNewOptions).
var namespaceForms = []struct {
	in     string
	prefix string // "" when it must be refused
}{
	{"app/locks", "app/locks/"},
	{"app/locks/", "app/locks/"},
	{"/app/locks", "/app/locks/"},
	{"/app/locks/", "/app/locks/"},
	{"/my-lock/", "/my-lock/"}, // etcd's concurrency.NewMutex(s, "/my-lock/")
	{"registry", "registry/"},
	{"/tenant:42/locks", "/tenant:42/locks/"},
	{"//", ""},
	{"//app", ""},
	{"app//locks", ""},
	{"app/locks//", ""},
	{"/app/../locks", ""},
	{"/./app", ""},
	{"app locks", ""},
	{"a#b", ""},
	{"/zookeeper", ""},
	{"zookeeper/x", ""},
	{strings.Repeat("a", 256), ""},
}

func TestWithPrefixForms(t *testing.T) {
	client := newTestClient(t)
	for _, tt := range namespaceForms {
		t.Run(tt.in, func(t *testing.T) {
			l, err := New(client, WithPrefix(tt.in))
			if tt.prefix == "" {
				if !errors.Is(err, lock.ErrInvalidConfig) || l != nil || !strings.HasPrefix(err.Error(), "etcdlock: ") {
					t.Errorf("New(WithPrefix(%q)) = %v, %v; want nil and an error wrapping %v", tt.in, l, err, lock.ErrInvalidConfig)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(WithPrefix(%q)) = %v; want nil", tt.in, err)
			}
			defer l.Close()
			if got := l.Prefix(); got != tt.prefix {
				t.Errorf("WithPrefix(%q): Prefix() = %q; want %q", tt.in, got, tt.prefix)
			}
			if rp, want := l.namePrefix("jobs/nightly"), tt.prefix+"jobs/nightly/#"; rp != want {
				t.Errorf("namePrefix(jobs/nightly) = %q; want %q", rp, want)
			}
		})
	}
}

func TestOpenURLPrefix(t *testing.T) {
	for _, tt := range []struct{ url, prefix string }{
		{"etcd://127.0.0.1:1", DefaultPrefix},
		{"etcd://127.0.0.1:1/", DefaultPrefix},
		{"etcd://127.0.0.1:1/app/locks", "app/locks/"},
		{"etcd://127.0.0.1:1/app/locks/", "app/locks/"},
		{"etcd://127.0.0.1:1//app/locks", "/app/locks/"},
		{"etcd://127.0.0.1:1//app/locks/", "/app/locks/"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			l, err := lock.Open(context.Background(), tt.url)
			if err != nil {
				t.Fatalf("lock.Open(%q) = %v; want nil", tt.url, err)
			}
			defer l.Close()
			if got := l.(*Locker).Prefix(); got != tt.prefix {
				t.Errorf("lock.Open(%q): Prefix() = %q; want %q", tt.url, got, tt.prefix)
			}
		})
	}
	for _, raw := range []string{
		"etcd://127.0.0.1:1///app",
		"etcd://127.0.0.1:1//",
		"etcd://127.0.0.1:1/a//b",
		"etcd://127.0.0.1:1/zookeeper",
		"etcd://user@127.0.0.1:1/app",
		"etcd://user:pw@127.0.0.1:1/app?password_env=FENCELOCK_TEST_UNSET",
		"etcd://user:pw@127.0.0.1:1/app?ca_file=/nonexistent/ca.crt",
		"etcd://user:pw@127.0.0.1:1/app?cert_file=/nonexistent/c.crt",
		"etcd://127.0.0.1:1/app#frag",
		"etcd://127.0.0.1:1/app#",
		"etcd://127.0.0.1:1/app?ttl=5s&ttl=6s",
		"etcd://127.0.0.1:1/app?bogus=1",
		"etcd://127.0.0.1:1/app?identity=a%00b",
	} {
		t.Run(raw, func(t *testing.T) {
			l, err := lock.Open(context.Background(), raw)
			if !errors.Is(err, lock.ErrInvalidConfig) || l != nil {
				if l != nil {
					l.Close()
				}
				t.Fatalf("lock.Open(%q) = %v, %v; want nil and an error wrapping %v", raw, l, err, lock.ErrInvalidConfig)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("lock.Open(%q) = %q; want no password in it", raw, err)
			}
		})
	}
}
