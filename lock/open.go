package lock

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
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
// A malformed URL, an unknown scheme, and anything the backend does not
// accept are errors wrapping [ErrInvalidConfig]. ctx bounds the connection
// attempt only.
func Open(ctx context.Context, rawURL string) (Locker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("lock: open: %w: %w", ErrInvalidConfig, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("lock: open %q: %w: no scheme (want one of %s)", redact(u), ErrInvalidConfig, strings.Join(Schemes(), ", "))
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("lock: open %q: %w: want %s://host:port[,host:port...]/path", redact(u), ErrInvalidConfig, u.Scheme)
	}
	driversMu.RLock()
	d, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("lock: open %q: %w: unknown scheme %q (registered: %s; did you import the backend package?)",
			redact(u), ErrInvalidConfig, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return d.Open(ctx, u)
}

func redact(u *url.URL) string { return u.Redacted() }

// URLHosts returns the comma-separated host:port list of a backend URL. An
// empty list, an empty element, or an element without a port is an error
// wrapping [ErrInvalidConfig]. It is a helper for drivers.
func URLHosts(u *url.URL) ([]string, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("lock: %s URL %q: %w: no host", u.Scheme, redact(u), ErrInvalidConfig)
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		i := strings.LastIndexByte(h, ':')
		if h == "" || i <= 0 || i == len(h)-1 {
			return nil, fmt.Errorf("lock: %s URL %q: %w: host %q is not host:port", u.Scheme, redact(u), ErrInvalidConfig, h)
		}
	}
	return hosts, nil
}

// URLPath returns the namespace path of a backend URL without its leading
// slash ("" when the URL has none). A path that is not a valid lock name
// (see [ValidateName]) is an error wrapping [ErrInvalidConfig]. A trailing
// slash is accepted and dropped.
func URLPath(u *url.URL) (string, error) {
	p := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if p == "" {
		return "", nil
	}
	if err := ValidateName(p); err != nil {
		return "", fmt.Errorf("lock: %s URL %q: %w: path: %w", u.Scheme, redact(u), ErrInvalidConfig, err)
	}
	return p, nil
}

// CheckQuery returns an error wrapping [ErrInvalidConfig] if the URL's query
// has a key not in allowed, or a key given more than once. It is a helper
// for drivers.
func CheckQuery(u *url.URL, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("lock: %s URL %q: %w: query: %w", u.Scheme, redact(u), ErrInvalidConfig, err)
	}
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("lock: %s URL %q: %w: unknown query key %q (known: %s)", u.Scheme, redact(u), ErrInvalidConfig, k, strings.Join(allowed, ", "))
		}
		if len(v) != 1 {
			return nil, fmt.Errorf("lock: %s URL %q: %w: query key %q given %d times", u.Scheme, redact(u), ErrInvalidConfig, k, len(v))
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
	d, err := time.ParseDuration(s[0])
	if err != nil {
		return 0, true, fmt.Errorf("lock: URL query %s=%q: %w: %w", key, s[0], ErrInvalidConfig, err)
	}
	if d <= 0 {
		return 0, true, fmt.Errorf("lock: URL query %s=%q: %w: must be positive", key, s[0], ErrInvalidConfig)
	}
	return d, true, nil
}
