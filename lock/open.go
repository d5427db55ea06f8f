package lock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/internal/nilcheck"
)

// Driver opens Lockers for one URL scheme. Backends register a Driver in
// their init function with [Register].
type Driver interface {
	// Open returns a Locker configured by u. u has already been parsed and
	// its scheme matched; the driver checks the rest and returns errors
	// wrapping [ErrInvalidConfig] for anything it does not accept,
	// including unknown query keys.
	Open(ctx context.Context, u *url.URL) (Locker, error)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a driver available to [Open] under scheme. Like
// database/sql.Register it is meant for init functions, and it panics if
// scheme is empty, driver is nil, or scheme is registered twice: those are
// programming errors in a backend, not input errors.
func Register(scheme string, driver Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if scheme == "" || driver == nil {
		panic("lock: Register with an empty scheme or a nil driver")
	}
	if _, dup := drivers[scheme]; dup {
		panic("lock: Register called twice for scheme " + scheme)
	}
	drivers[scheme] = driver
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	s := make([]string, 0, len(drivers))
	for k := range drivers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open returns a Locker for rawURL, for instance
// "etcd://h1:2379,h2:2379/prefix?ttl=10s" or
// "zk://h1:2181,h2:2181/root?session_timeout=10s". The backend for the
// scheme must have been registered, usually by importing its package:
//
//	import _ "github.com/fencelock/fencelock/etcdlock"
//
// Open itself refuses, for every backend, a nil ctx, a URL that does not
// parse, one without a scheme or without "//" after it, an unknown scheme
// and a fragment ("#..."). The backend then checks the hosts ([URLHosts]),
// the path ([URLPath]), the query ([CheckQuery]: unknown and repeated
// keys are errors) and the user information ("user:password@"), which a
// backend that takes credentials reads as its user and password and any
// other backend refuses. Every such error wraps [ErrInvalidConfig]; none
// repeats the URL's user information, and no error of a Locker opened
// from the URL repeats its password. ctx bounds the connection attempt
// only.
func Open(ctx context.Context, rawURL string) (Locker, error) {
	if ctx == nil {
		return nil, fmt.Errorf("lock: open: %w: nil context", ErrInvalidConfig)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// what was wrong.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("lock: open: %w: malformed URL: %w", ErrInvalidConfig, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("lock: open %q: %w: no scheme (want one of %s)", describe(u), ErrInvalidConfig, strings.Join(Schemes(), ", "))
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("lock: open %q: %w: want %s://host:port[,host:port...]/path", describe(u), ErrInvalidConfig, u.Scheme)
	}
	if u.Fragment != "" || strings.Contains(rawURL, "#") {
		return nil, fmt.Errorf("lock: open %q: %w: a fragment (#...) is not supported", describe(u), ErrInvalidConfig)
	}
	driversMu.RLock()
	d, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("lock: open %q: %w: unknown scheme %q (registered: %s; did you import the backend package?)",
			describe(u), ErrInvalidConfig, u.Scheme, strings.Join(Schemes(), ", "))
	}
	l, err := d.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	if nilcheck.IsNil(l) {
		return nil, fmt.Errorf("lock: open %q: driver for %q returned no Locker and no error", describe(u), u.Scheme)
	}
	return l, nil
}

// describe returns u for an error message, without its user information,
// so that no password (nor user name) ever appears in an error.
func describe(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User = nil
	return c.String()
}

// The URL helpers below are for drivers. Their errors carry no package
// prefix: the driver adds its own ("zklock: open: …"), once.

// URLHosts returns the comma-separated host:port list of a backend URL. An
// empty list, an empty element, or an element without a port (1 to 65535)
// is an error wrapping [ErrInvalidConfig]. It is a helper for drivers.
func URLHosts(u *url.URL) ([]string, error) {
	if u == nil {
		return nil, fmt.Errorf("URL hosts: %w: nil URL", ErrInvalidConfig)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%s URL %q: %w: no host", u.Scheme, describe(u), ErrInvalidConfig)
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		i := strings.LastIndexByte(h, ':')
		if h == "" || i <= 0 || !validPort(h[i+1:]) {
			return nil, fmt.Errorf("%s URL %q: %w: host %q is not host:port", u.Scheme, describe(u), ErrInvalidConfig, h)
		}
	}
	return hosts, nil
}

func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0 && p[0] != '+'
}

// URLPath returns the namespace of a backend URL: its path without the
// slash that ends the host list, and without a trailing slash ("" when the
// URL has no path). So "etcd://h:2379/app/locks" gives "app/locks" and
// "etcd://h:2379//app/locks" gives "/app/locks"; drivers pass it to their
// namespace option (etcdlock.WithPrefix, zklock.WithRoot), where a leading
// slash is kept as written on etcd and makes no difference on ZooKeeper.
//
// The namespace must be a valid lock name (see [ValidateName]) after an
// optional leading and trailing slash, and must not start with the segment
// "zookeeper"; anything else is an error wrapping [ErrInvalidConfig]. Both
// backends check their namespace options with the same rule.
func URLPath(u *url.URL) (string, error) {
	if u == nil {
		return "", fmt.Errorf("URL path: %w: nil URL", ErrInvalidConfig)
	}
	p := strings.TrimPrefix(u.Path, "/")
	if p == "" {
		return "", nil
	}
	ns, err := names.ParseNamespace(p)
	if err != nil {
		return "", fmt.Errorf("%s URL %q: %w: path: %w", u.Scheme, describe(u), ErrInvalidConfig, err)
	}
	if ns.Rooted {
		return "/" + ns.Path, nil
	}
	return ns.Path, nil
}

// CheckQuery returns the URL's query, or an error wrapping
// [ErrInvalidConfig] if the query does not parse, has a key not in
// allowed, or has a key given more than once. It is a helper for drivers.
func CheckQuery(u *url.URL, allowed ...string) (url.Values, error) {
	if u == nil {
		return nil, fmt.Errorf("URL query: %w: nil URL", ErrInvalidConfig)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%s URL %q: %w: query: %w", u.Scheme, describe(u), ErrInvalidConfig, err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same key every time
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%s URL %q: %w: unknown query key %q (known: %s)", u.Scheme, describe(u), ErrInvalidConfig, k, strings.Join(allowed, ", "))
		}
		if n := len(q[k]); n != 1 {
			return nil, fmt.Errorf("%s URL %q: %w: query key %q given %d times", u.Scheme, describe(u), ErrInvalidConfig, k, n)
		}
	}
	return q, nil
}

// URLDuration returns the duration under key in q (as accepted by
// time.ParseDuration), and whether it was present. A value that does not
// parse or is not positive is an error wrapping [ErrInvalidConfig]. It is a
// helper for drivers.
func URLDuration(q url.Values, key string) (time.Duration, bool, error) {
	s, ok := q[key]
	if !ok {
		return 0, false, nil
	}
	if len(s) != 1 {
		return 0, true, fmt.Errorf("URL query %s: %w: given %d times", key, ErrInvalidConfig, len(s))
	}
	d, err := time.ParseDuration(s[0])
	if err != nil {
		return 0, true, fmt.Errorf("URL query %s=%q: %w: %w", key, s[0], ErrInvalidConfig, err)
	}
	if d <= 0 {
		return 0, true, fmt.Errorf("URL query %s=%q: %w: must be positive", key, s[0], ErrInvalidConfig)
	}
	return d, true, nil
}
