package lock

import "github.com/fencelock/fencelock/internal/names"

// MaxIdentityLen is the longest Locker identity, in bytes.
const MaxIdentityLen = names.MaxIdentityLen

// ValidateIdentity reports whether id is a valid Locker identity (the
// string a backend stores in its lock records and [Locker.Holder] reports),
// and if not, returns an error wrapping [ErrInvalidConfig] that says what is
// wrong.
//
// An identity is 1 to [MaxIdentityLen] bytes of valid UTF-8 without control
// characters (U+0000–U+001F, U+007F–U+009F). Every backend's WithIdentity
// option, and the identity query key of an [Open] URL, apply this rule.
func ValidateIdentity(id string) error { return names.CheckIdentity(id) }

// DefaultIdentity returns a fresh default identity, "hostname/pid/random"
// with 12 random hexadecimal digits, which backends use when none is
// configured. An unknown or invalid host name becomes "unknown-host".
func DefaultIdentity() string { return names.DefaultIdentity() }
