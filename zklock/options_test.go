package zklock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestDialInvalidConfig(t *testing.T) {
	ctx := context.Background()
	servers := []string{"127.0.0.1:1"}
	tests := []struct {
		name    string
		servers []string
		opts    []Option
	}{
		{"no servers", nil, nil},
		{"empty server", []string{""}, nil},
		{"comma in server", []string{"a:1,b:2"}, nil},
		{"zero session timeout", servers, []Option{WithSessionTimeout(0)}},
		{"negative session timeout", servers, []Option{WithSessionTimeout(-time.Second)}},
		{"zero loss margin", servers, []Option{WithLossMargin(0)}},
		{"zero lock delay", servers, []Option{WithLockDelay(0)}},
		{"negative lock delay", servers, []Option{WithLockDelay(-time.Second)}},
		{"margin not below timeout", servers, []Option{WithSessionTimeout(time.Second), WithLossMargin(time.Second)}},
		{"empty root", servers, []Option{WithRoot("")}},
		{"slash root", servers, []Option{WithRoot("/")}},
		{"root with empty segment", servers, []Option{WithRoot("/a//b")}},
		{"root with dot-dot", servers, []Option{WithRoot("/a/../b")}},
		{"root with space", servers, []Option{WithRoot("/a b")}},
		{"reserved root", servers, []Option{WithRoot("/zookeeper/x")}},
		{"empty identity", servers, []Option{WithIdentity("")}},
		{"long identity", servers, []Option{WithIdentity(strings.Repeat("x", 1025))}},
		{"invalid UTF-8 identity", servers, []Option{WithIdentity("\xff")}},
		{"empty ACL", servers, []Option{WithACL(nil)}},
		{"nil logger", servers, []Option{WithLogger(nil)}},
		{"nil dialer", servers, []Option{WithDialer(nil)}},
		{"nil option", servers, []Option{nil}},
		{"empty layout", servers, []Option{WithLayout("")}},
		{"unknown layout", servers, []Option{WithLayout("Curator")}},
		{"lock delay with curator", servers, []Option{WithLayout(LayoutCurator), WithLockDelay(time.Second)}},
		{"lock delay with curator-rw", servers, []Option{WithLockDelay(time.Second), WithLayout(LayoutCuratorReadWrite)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Dial(ctx, tt.servers, tt.opts...)
			if !errors.Is(err, lock.ErrInvalidConfig) {
				if l != nil {
					l.Close()
				}
				t.Fatalf("Dial() = %v, %v; want an error wrapping %v", l, err, lock.ErrInvalidConfig)
			}
			if !strings.HasPrefix(err.Error(), "zklock: ") {
				t.Errorf("Dial() error %q; want the prefix %q", err, "zklock: ")
			}
		})
	}
}

func TestRootForms(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/a", "/a"},
		{"a", "/a"},
		{"a/", "/a"},
		{"/a/b/", "/a/b"},
		{"/tenant:42/locks", "/tenant:42/locks"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			o, err := buildOptions([]Option{WithRoot(tt.in)})
			if err != nil {
				t.Fatalf("WithRoot(%q): %v; want nil", tt.in, err)
			}
			if o.root != tt.want {
				t.Errorf("WithRoot(%q) root = %q; want %q", tt.in, o.root, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o, err := buildOptions(nil)
	if err != nil {
		t.Fatalf("buildOptions(nil) = %v; want nil", err)
	}
	if o.root != DefaultRoot || o.sessionTimeout != DefaultSessionTimeout {
		t.Errorf("defaults root=%q timeout=%v; want %q, %v", o.root, o.sessionTimeout, DefaultRoot, DefaultSessionTimeout)
	}
	if o.Identity == "" || strings.Count(o.Identity, "/") != 2 {
		t.Errorf("default identity %q; want hostname/pid/random", o.Identity)
	}
	for _, tt := range []struct{ timeout, want time.Duration }{
		{10 * time.Second, 5 * time.Second},
		{2 * time.Second, time.Second},
		{500 * time.Millisecond, 250 * time.Millisecond},
	} {
		if got := o.margin(tt.timeout); got != tt.want {
			t.Errorf("default margin(%v) = %v; want %v", tt.timeout, got, tt.want)
		}
	}
}

func TestLockDelayOption(t *testing.T) {
	o, err := buildOptions(nil)
	if err != nil {
		t.Fatalf("buildOptions(nil) = %v; want nil", err)
	}
	if o.LockDelay != 0 {
		t.Errorf("default lock delay = %v; want 0", o.LockDelay)
	}
	o, err = buildOptions([]Option{WithLockDelay(2 * time.Second)})
	if err != nil {
		t.Fatalf("buildOptions(WithLockDelay(2s)) = %v; want nil", err)
	}
	if o.LockDelay != 2*time.Second {
		t.Errorf("lock delay = %v; want 2s", o.LockDelay)
	}
}

func TestOpenInvalidURL(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"zk://",
		"zk://127.0.0.1/root",
		"zk://127.0.0.1:1,/root",
		"zk://127.0.0.1:1/a//b",
		"zk://127.0.0.1:1/root?ttl=10s",
		"zk://127.0.0.1:1/root?session_timeout=abc",
		"zk://127.0.0.1:1/root?session_timeout=-1s",
		"zk://127.0.0.1:1/root?session_timeout=1s&session_timeout=2s",
		"zk://127.0.0.1:1/root?loss_margin=0s",
		"zk://127.0.0.1:1/root?lock_delay=0s",
		"zk://127.0.0.1:1/root?lock_delay=-2s",
		"zk://127.0.0.1:1/root?lock_delay=never",
		"zk://127.0.0.1:1/root?lock_delay=1s&lock_delay=2s",
		"zk://127.0.0.1:1/root?identity=",
		"zk://user:@127.0.0.1:1/root",
	} {
		t.Run(raw, func(t *testing.T) {
			l, err := lock.Open(ctx, raw)
			if !errors.Is(err, lock.ErrInvalidConfig) {
				if l != nil {
					l.Close()
				}
				t.Fatalf("lock.Open(%q) = %v, %v; want an error wrapping %v", raw, l, err, lock.ErrInvalidConfig)
			}
			if l != nil {
				t.Errorf("lock.Open(%q) returned a non-nil Locker with its error", raw)
			}
		})
	}
}

func TestOpenUnreachableHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Port 1 on loopback refuses connections: Dial keeps retrying until ctx ends.
	l, err := lock.Open(ctx, "zk://127.0.0.1:1/root?session_timeout=2s&identity=x")
	if !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Fatalf("lock.Open(unreachable) = %v, %v; want nil and an error wrapping %v", l, err, context.DeadlineExceeded)
	}
}

// namespaceForms are the namespaces both backends must treat alike:
// etcdlock's options test has the same list (there with the etcd prefix).
var namespaceForms = []struct {
	in   string
	root string // "" when it must be refused
}{
	{"app/locks", "/app/locks"},
	{"app/locks/", "/app/locks"},
	{"/app/locks", "/app/locks"},
	{"/app/locks/", "/app/locks"},
	{"/my-lock/", "/my-lock"},
	{"registry", "/registry"},
	{"/tenant:42/locks", "/tenant:42/locks"},
	{"", ""},
	{"/", ""},
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

func TestWithRootForms(t *testing.T) {
	for _, tt := range namespaceForms {
		t.Run(tt.in, func(t *testing.T) {
			o, err := buildOptions([]Option{WithRoot(tt.in)})
			if tt.root == "" {
				if !errors.Is(err, lock.ErrInvalidConfig) || o != nil {
					t.Errorf("WithRoot(%q) = %v; want an error wrapping %v", tt.in, err, lock.ErrInvalidConfig)
				}
				return
			}
			if err != nil || o.root != tt.root {
				t.Errorf("WithRoot(%q): root %v, %v; want %q", tt.in, o, err, tt.root)
			}
		})
	}
}

func TestOpenRejectsUnusedURLParts(t *testing.T) {
	for _, raw := range []string{
		"zk://user@127.0.0.1:1/root",
		"zk://127.0.0.1:1/root#frag",
		"zk://127.0.0.1:1/root#",
		"zk://127.0.0.1:1///root",
		"zk://127.0.0.1:1/zookeeper",
		"zk://127.0.0.1:1/root?identity=a%0Ab",
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
