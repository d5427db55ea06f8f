package lock

import (
	"fmt"

	"github.com/fencelock/fencelock/internal/names"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = names.MaxLen

// ValidateName reports whether name is a valid lock name, and if not, returns
// an error wrapping [ErrInvalidName] that says what is wrong.
//
// A name is 1 to [MaxNameLen] bytes: one or more segments separated by '/',
// each segment non-empty, made only of ASCII letters, digits and the
// characters '.', '_', '-' and ':', and neither "." nor "..". So "jobs/nightly"
// and "tenant:42/rows" are valid; "", "/a", "a/", "a//b", "a/../b" and "a b"
// are not.
//
// Every backend checks names with this function, so a name valid on one
// backend is valid on all of them, and maps onto an etcd key or a ZooKeeper
// path without escaping.
//
// Namespaces (etcdlock.WithPrefix, zklock.WithRoot, the path of an [Open]
// URL) follow the same rule, with an optional leading and trailing slash;
// see [URLPath].
//
// The error wraps [ErrInvalidName] and, like [ValidateIdentity]'s, has no
// package prefix: the backend or program that calls it adds its own.
func ValidateName(name string) error {
	if err := names.Check(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}
