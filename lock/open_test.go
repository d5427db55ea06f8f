package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// memDriver opens Lockers on one Memory, and records the URL it was given.
type memDriver struct {
	m    *locktest.Memory
	got  chan *url.URL
	fail error
}

func (d *memDriver) Open(ctx context.Context, u *url.URL, _ lock.OpenConfig) (lock.Locker, error) {
	d.got <- u
	if d.fail != nil {
		return nil, d.fail
	}
	return d.m.NewLocker(""), nil
}

// The registry is process-wide and refuses a second registration, so every
// scheme registered here is unique to its test and run (-count).
var schemeSeq atomic.Int64

func uniqueScheme(base string) string { return fmt.Sprintf("%s%d", base, schemeSeq.Add(1)) }

func TestOpenRegisteredDriver(t *testing.T) {
	d := &memDriver{m: locktest.NewMemory(), got: make(chan *url.URL, 1)}
	scheme := uniqueScheme("openmem")
	lock.Register(scheme, d)
	if !slices.Contains(lock.Schemes(), scheme) {
		t.Errorf("Schemes() = %q; want it to contain %q", lock.Schemes(), scheme)
	}
	if s := lock.Schemes(); !slices.IsSorted(s) {
		t.Errorf("Schemes() = %q; want it sorted", s)
	}

	ctx := context.Background()
	l, err := lock.Open(ctx, scheme+"://h1:1,h2:2/app?ttl=5s")
	if err != nil {
		t.Fatalf("Open() = %v; want nil", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	u := <-d.got
	if u.Scheme != scheme || u.Host != "h1:1,h2:2" || u.Path != "/app" || u.RawQuery != "ttl=5s" {
		t.Errorf("driver got %#v; want the parsed URL", u)
	}
	le, err := l.Acquire(ctx, "opened")
	if err != nil {
		t.Fatalf("Acquire() on the opened Locker = %v; want nil", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release() = %v; want nil", err)
	}
}

func TestOpenDriverError(t *testing.T) {
	bad := fmt.Errorf("openfail: %w: unknown query key %q", lock.ErrInvalidConfig, "bogus")
	d := &memDriver{m: locktest.NewMemory(), got: make(chan *url.URL, 1), fail: bad}
	scheme := uniqueScheme("openfail")
	lock.Register(scheme, d)
	l, err := lock.Open(context.Background(), scheme+"://h:1/x?bogus=1")
	if err != bad || l != nil {
		t.Errorf("Open() = %v, %v; want nil, the driver's error %v", l, err, bad)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name, url string
		want      string // in the error
	}{
		{"malformed", "etcd://h1:2379/%zz", "invalid URL escape"},
		{"bad port", "etcd://h1:port/x", "invalid port"},
		{"no scheme", "//h1:2379/x", "no scheme"},
		{"path only", "/just/a/path", "no scheme"},
		{"empty", "", "no scheme"},
		{"unknown scheme", "nosuch://h1:1/x", `unknown scheme "nosuch"`},
		{"opaque", "nosuch:h1:2379/x", "want nosuch://host:port"},
		{"host without scheme", "h1:2379", "want h1://host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := lock.Open(context.Background(), tt.url)
			if !errors.Is(err, lock.ErrInvalidConfig) || l != nil {
				t.Fatalf("Open(%q) = %v, %v; want nil, an error wrapping %v", tt.url, l, err, lock.ErrInvalidConfig)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%q) = %q; want it to say %q", tt.url, err, tt.want)
			}
		})
	}
}

func TestOpenRedactsPassword(t *testing.T) {
	_, err := lock.Open(context.Background(), "nosuch://user:s3cret@h1:1/x")
	if !errors.Is(err, lock.ErrInvalidConfig) {
		t.Fatalf("Open() = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open() = %q; want the password redacted", err)
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic; want a panic", what)
		}
	}()
	f()
}

func TestRegisterPanics(t *testing.T) {
	d := &memDriver{m: locktest.NewMemory(), got: make(chan *url.URL, 1)}
	dup, nilDriver := uniqueScheme("regdup"), uniqueScheme("regnil")
	lock.Register(dup, d)
	mustPanic(t, "second Register("+dup+")", func() { lock.Register(dup, d) })
	mustPanic(t, "Register with a nil driver", func() { lock.Register(nilDriver, nil) })
	mustPanic(t, "Register with an empty scheme", func() { lock.Register("", d) })
	if slices.Contains(lock.Schemes(), nilDriver) {
		t.Errorf("Schemes() = %q; want no %q after a refused Register", lock.Schemes(), nilDriver)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("url.Parse(%q) = %v", raw, err)
	}
	return u
}

func TestURLHosts(t *testing.T) {
	tests := []struct {
		url   string
		want  []string
		error string // "" for success
	}{
		{"etcd://h1:2379/x", []string{"h1:2379"}, ""},
		{"etcd://h1:2379,h2:2379,h3:2379/x", []string{"h1:2379", "h2:2379", "h3:2379"}, ""},
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}, ""},
		{"zk://[::1]:2181/x", []string{"[::1]:2181"}, ""},
		{"etcd:///x", nil, "no host"},
		{"etcd://h1/x", nil, `host "h1" is not host:port`},
		{"etcd://h1:/x", nil, `host "h1:" is not host:port`},
		{"etcd://:2379/x", nil, `host ":2379" is not host:port`},
		{"etcd://,h1:2379/x", nil, `host "" is not host:port`},
		{"etcd://h2,h1:2379/x", nil, `host "h2" is not host:port`},
		{"etcd://h2:,h1:2379/x", nil, `host "h2:" is not host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := lock.URLHosts(mustParse(t, tt.url))
			if tt.error == "" {
				if err != nil || !slices.Equal(got, tt.want) {
					t.Errorf("URLHosts(%q) = %q, %v; want %q, nil", tt.url, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.error) {
				t.Errorf("URLHosts(%q) = %q, %v; want an error wrapping %v that says %q", tt.url, got, err, lock.ErrInvalidConfig, tt.error)
			}
		})
	}
}

func TestURLPath(t *testing.T) {
	tests := []struct {
		url, want string
		error     string
	}{
		{"etcd://h:1", "", ""},
		{"etcd://h:1/", "", ""},
		{"etcd://h:1/app", "app", ""},
		{"etcd://h:1/app/", "app", ""},
		{"etcd://h:1/team/app", "team/app", ""},
		{"etcd://h:1/a//b", "", "empty segment"},
		{"etcd://h:1/a/../b", "", `segment ".."`},
		{"etcd://h:1/a%20b", "", "byte ' '"},
		{"etcd://h:1//app", "/app", ""}, // a rooted namespace: the second slash is kept
		{"etcd://h:1//app/locks/", "/app/locks", ""},
		{"etcd://h:1//", "", "no segment"},
		{"etcd://h:1///", "", "no segment"},
		{"etcd://h:1///app", "", "empty segment"},
		{"etcd://h:1/zookeeper/x", "", "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := lock.URLPath(mustParse(t, tt.url))
			if tt.error == "" {
				if err != nil || got != tt.want {
					t.Errorf("URLPath(%q) = %q, %v; want %q, nil", tt.url, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.error) {
				t.Errorf("URLPath(%q) = %q, %v; want an error wrapping %v that says %q", tt.url, got, err, lock.ErrInvalidConfig, tt.error)
			}
		})
	}
}

func TestCheckQuery(t *testing.T) {
	allowed := []string{"ttl", "identity"}
	tests := []struct {
		query string
		want  url.Values
		error string
	}{
		{"", url.Values{}, ""},
		{"ttl=10s", url.Values{"ttl": {"10s"}}, ""},
		{"ttl=10s&identity=me", url.Values{"ttl": {"10s"}, "identity": {"me"}}, ""},
		{"bogus=1", nil, `unknown query key "bogus" (known: ttl, identity)`},
		{"ttl=1s&TTL=2s", nil, `unknown query key "TTL"`},
		{"ttl=1s&ttl=2s", nil, `query key "ttl" given 2 times`},
		{"ttl=%zz", nil, "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			u := &url.URL{Scheme: "etcd", Host: "h:1", RawQuery: tt.query}
			got, err := lock.CheckQuery(u, allowed...)
			if tt.error == "" {
				if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("CheckQuery(%q) = %v, %v; want %v, nil", tt.query, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.error) {
				t.Errorf("CheckQuery(%q) = %v, %v; want an error wrapping %v that says %q", tt.query, got, err, lock.ErrInvalidConfig, tt.error)
			}
		})
	}
}

func TestURLDuration(t *testing.T) {
	tests := []struct {
		query   string
		want    time.Duration
		present bool
		error   string
	}{
		{"", 0, false, ""},
		{"other=1", 0, false, ""},
		{"ttl=10s", 10 * time.Second, true, ""},
		{"ttl=1m30s", 90 * time.Second, true, ""},
		{"ttl=250ms", 250 * time.Millisecond, true, ""},
		{"ttl=0s", 0, true, "must be positive"},
		{"ttl=0", 0, true, "must be positive"},
		{"ttl=-1s", 0, true, "must be positive"},
		{"ttl=10", 0, true, "missing unit"},
		{"ttl=ten", 0, true, "invalid duration"},
		{"ttl=", 0, true, "invalid duration"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatalf("ParseQuery(%q) = %v", tt.query, err)
			}
			got, present, err := lock.URLDuration(q, "ttl")
			if present != tt.present {
				t.Errorf("URLDuration(%q) present = %v; want %v", tt.query, present, tt.present)
			}
			if tt.error == "" {
				if err != nil || got != tt.want {
					t.Errorf("URLDuration(%q) = %v, %v; want %v, nil", tt.query, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.error) || !strings.Contains(err.Error(), "ttl") {
				t.Errorf("URLDuration(%q) = %v, %v; want an error wrapping %v that names ttl and says %q", tt.query, got, err, lock.ErrInvalidConfig, tt.error)
			}
		})
	}
}
