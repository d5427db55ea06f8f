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
// Every backend applies this rule, and namespaces follow it (see
// [URLPath]). The error has no package prefix: the caller adds its own.
func ValidateName(name string) error {
	if err := names.Check(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}
