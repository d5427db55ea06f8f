// Package config holds the options every backend shares and their one
// validation: the identity rule, the logger default, a positive loss
// margin, the namespace rule, and the way errors are gathered (all of them,
// each wrapping lock.ErrInvalidConfig, with no package prefix: the backend
// adds its own once, at its public boundary).
package config

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/lock"
)

// Common holds the options every backend has. Backends embed it in their
// options struct.
type Common struct {
	// Identity is the identity given with WithIdentity; after Apply, that
	// or lock.DefaultIdentity().
	Identity string
	// Logger is the logger given with WithLogger; after Apply, that or
	// slog.Default().
	Logger *slog.Logger
	// LossMargin is the margin given with WithLossMargin, or 0 when none
	// was given (the backend then applies its own default).
	LossMargin time.Duration
	// LockDelay is the delay given with WithLockDelay, or 0 when none was
	// given (no lock-delay: no marker is written or read).
	LockDelay time.Duration

	errs []error
}

// Fail records an error wrapping lock.ErrInvalidConfig.
func (c *Common) Fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{lock.ErrInvalidConfig}, args...)...))
}

// SetIdentity sets the identity if it follows lock.ValidateIdentity's rule.
func (c *Common) SetIdentity(id string) {
	if err := lock.ValidateIdentity(id); err != nil {
		c.errs = append(c.errs, err)
		return
	}
	c.Identity = id
}

// SetLogger sets the logger; nil, or a zero slog.Logger (which has no
// handler), is an error.
func (c *Common) SetLogger(l *slog.Logger) {
	if l == nil || l.Handler() == nil {
		c.Fail("logger: nil, or a zero slog.Logger without a handler")
		return
	}
	c.Logger = l
}

// SetLossMargin sets the loss margin, which must be positive. How large it
// may be depends on the backend's TTL or session timeout, which the
// backend checks after Apply.
func (c *Common) SetLossMargin(d time.Duration) {
	if d <= 0 {
		c.Fail("loss margin %v: must be positive", d)
		return
	}
	c.LossMargin = d
}

// SetLockDelay sets the lock-delay, which must be positive: leaving the
// option out is how to have none.
func (c *Common) SetLockDelay(d time.Duration) {
	if d <= 0 {
		c.Fail("lock delay %v: must be positive", d)
		return
	}
	c.LockDelay = d
}

// SetNamespace checks a namespace (an etcd key prefix or a ZooKeeper root;
// what names it in the error) by names.ParseNamespace, the rule every
// backend shares.
func (c *Common) SetNamespace(what, path string) (names.Namespace, bool) {
	ns, err := names.ParseNamespace(path)
	if err != nil {
		c.Fail("%s: %w", what, err)
		return names.Namespace{}, false
	}
	return ns, true
}

// Apply applies opts to target, whose Common is c, then fills c's
// defaults. A nil option is an error. It returns every error the options
// recorded, as one error that wraps each (so errors.Is finds
// lock.ErrInvalidConfig) and whose text joins theirs with "; ", or nil.
func Apply[O ~func(*T), T any](target *T, c *Common, opts []O) error {
	for i, opt := range opts {
		if opt == nil {
			c.Fail("option %d: nil", i)
			continue
		}
		opt(target)
	}
	if err := c.Err(); err != nil {
		return err
	}
	if c.Identity == "" {
		c.Identity = lock.DefaultIdentity()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Err returns the errors recorded so far, as Apply does, or nil.
func (c *Common) Err() error {
	switch len(c.errs) {
	case 0:
		return nil
	case 1:
		return c.errs[0]
	}
	return &multiError{errs: append([]error(nil), c.errs...)}
}

// multiError is several configuration errors, read on one line.
type multiError struct{ errs []error }

func (m *multiError) Error() string {
	parts := make([]string, len(m.errs))
	for i, err := range m.errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (m *multiError) Unwrap() []error { return m.errs }
