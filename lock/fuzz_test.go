package lock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// validNameOracle is the name rule written a second way, to check
// ValidateName against.
func validNameOracle(name string) bool {
	if len(name) < 1 || len(name) > lock.MaxNameLen {
		return false
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		if strings.TrimLeft(seg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:") != "" {
			return false
		}
	}
	return true
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "jobs/nightly", "tenant:42/rows", "...", "", "/a", "a/", "a//b", "a/../b", "a b", "a\x00", "é", strings.Repeat("a", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := lock.ValidateName(name)
		if want := validNameOracle(name); (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v; want valid = %v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, lock.ErrInvalidName) || !strings.HasPrefix(err.Error(), "invalid name: ") {
				t.Fatalf("ValidateName(%q) = %q; want an error wrapping %v", name, err, lock.ErrInvalidName)
			}
			return
		}
		// A valid name is a valid namespace too, with or without slashes,
		// and names a URL path that comes back unchanged.
		for _, ns := range []string{name, "/" + name, name + "/", "/" + name + "/"} {
			u := &url.URL{Scheme: "x", Host: "h:1", Path: "/" + ns}
			got, err := lock.URLPath(u)
			want := strings.TrimSuffix(ns, "/")
			if err != nil && !strings.HasPrefix(name, "zookeeper") {
				t.Fatalf("URLPath(%q) = %v; want %q", u, err, want)
			}
			if err == nil && got != want {
				t.Fatalf("URLPath(%q) = %q; want %q", u, got, want)
			}
		}
	})
}

// errAccepted is what the fuzz driver returns for a URL it accepts, so
// that no Locker is ever built.
var errAccepted = errors.New("fuzz driver: accepted")

// fuzzDriver checks a URL the way the real drivers do, with the helpers of
// package lock.
type fuzzDriver struct{}

func (fuzzDriver) Open(ctx context.Context, u *url.URL, _ lock.OpenConfig) (lock.Locker, error) {
	if _, err := lock.URLHosts(u); err != nil {
		return nil, err
	}
	if _, err := lock.URLPath(u); err != nil {
		return nil, err
	}
	q, err := lock.CheckQuery(u, "ttl", "identity", secure.KeyPasswordEnv)
	if err != nil {
		return nil, err
	}
	if _, _, err := secure.CredentialsFromURL(u, q, func(string) string { return "" }); err != nil {
		return nil, err
	}
	if _, _, err := lock.URLDuration(q, "ttl"); err != nil {
		return nil, err
	}
	if id, ok := q["identity"]; ok {
		if err := lock.ValidateIdentity(id[0]); err != nil {
			return nil, err
		}
	}
	return nil, errAccepted
}

const fuzzScheme = "fuzzurl"

var registerFuzz = func() bool { lock.Register(fuzzScheme, fuzzDriver{}); return true }()

// secret is put into URLs as a password; no error may repeat it.
const secret = "Pw9zQxK"

func FuzzOpen(f *testing.F) {
	_ = registerFuzz
	for _, s := range []string{
		"fuzzurl://h1:2379,h2:2379/app?ttl=10s",
		"fuzzurl://h:1//app/locks/?identity=w-1",
		"fuzzurl://u:" + secret + "@h:1/app",
		"fuzzurl://h:1/app#frag",
		"fuzzurl://h:1/app?ttl=1s&ttl=2s",
		"fuzzurl://h:1/a//b",
		"fuzzurl://h:0/a",
		"fuzzurl://[::1]:2379/a",
		"fuzzurl:opaque",
		"nosuch://h:1/",
		"",
		"fuzzurl://h:1/%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		check := func(raw string, hidden bool) {
			l, err := lock.Open(context.Background(), raw)
			if l != nil || err == nil {
				t.Fatalf("Open(%q) = %v, %v; want no Locker and an error", raw, l, err)
			}
			if hidden && strings.Contains(err.Error(), secret) {
				t.Fatalf("Open(%q) = %q; want the password left out", raw, err)
			}
			if !errors.Is(err, errAccepted) {
				if !errors.Is(err, lock.ErrInvalidConfig) {
					t.Fatalf("Open(%q) = %v; want an error wrapping %v", raw, err, lock.ErrInvalidConfig)
				}
				return
			}
			// Accepted: nothing the driver does not use may be in it.
			u, perr := url.Parse(raw)
			if perr != nil || strings.Contains(raw, "#") || u.Scheme != fuzzScheme || u.Opaque != "" {
				t.Fatalf("Open(%q) accepted a URL with a fragment or a bad form (%v)", raw, perr)
			}
			if u.User != nil {
				if pw, ok := u.User.Password(); u.User.Username() == "" || !ok || pw == "" {
					t.Fatalf("Open(%q) accepted user information without a user and a password", raw)
				}
			}
			for _, h := range strings.Split(u.Host, ",") {
				if i := strings.LastIndexByte(h, ':'); i <= 0 || i == len(h)-1 {
					t.Fatalf("Open(%q) accepted host %q without host:port", raw, h)
				}
			}
			if p := strings.Trim(u.Path, "/"); p != "" && lock.ValidateName(p) != nil {
				t.Fatalf("Open(%q) accepted path %q", raw, u.Path)
			}
		}
		check(raw, false)
		// The same URL with credentials: whether accepted or refused,
		// the password is never repeated.
		if rest, ok := strings.CutPrefix(raw, fuzzScheme+"://"); ok {
			check(fuzzScheme+"://u:"+secret+"@"+rest, !strings.Contains(rest, secret))
		}
	})
}

func FuzzValidateIdentity(f *testing.F) {
	for _, s := range []string{"worker-1", "host/12/abcdef", "", "a\x00b", "a\nb", "\xff", "é", "\u0085", strings.Repeat("x", 1025)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := lock.ValidateIdentity(id)
		if err != nil {
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Fatalf("ValidateIdentity(%q) = %v; want an error wrapping %v", id, err, lock.ErrInvalidConfig)
			}
			return
		}
		if len(id) == 0 || len(id) > lock.MaxIdentityLen || !utf8.ValidString(id) {
			t.Fatalf("ValidateIdentity(%q) = nil; want an error (length or UTF-8)", id)
		}
		for _, r := range id {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("ValidateIdentity(%q) = nil; it has the control character %U", id, r)
			}
		}
	})
}
