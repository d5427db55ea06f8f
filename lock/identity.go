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
// characters (U+0000–U+001F, U+007F–U+009F), so that every backend stores
// it alike and holders print one per line. Every backend's WithIdentity
// option, and the identity query key of an [Open] URL, apply this rule.
func ValidateIdentity(id string) error { return names.CheckIdentity(id) }

// DefaultIdentity returns a fresh default identity, "hostname/pid/random":
// the host name, the process ID and 12 random hexadecimal digits, so that
// two Lockers of one process differ. A host name that is unknown or breaks
// the rule of [ValidateIdentity] is replaced by "unknown-host". Backends
// use it when no identity is configured.
func DefaultIdentity() string { return names.DefaultIdentity() }
