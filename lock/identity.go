package lock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxIdentityLen is the longest Locker identity, in bytes.
const MaxIdentityLen = 1024

// ValidateIdentity reports whether id is a valid Locker identity (the
// string a backend stores in its lock records and [Locker.Holder] reports),
// and if not, returns an error wrapping [ErrInvalidConfig] that says what is
// wrong.
//
// An identity is 1 to [MaxIdentityLen] bytes of valid UTF-8 without control
// characters (U+0000–U+001F, U+007F–U+009F): a NUL, a newline or a stray
// byte in an identity would be stored as is by one backend and refused by
// another, and would break every tool that prints holders one per line.
// Every backend's WithIdentity option, and the identity query key of an
// [Open] URL, apply this rule.
func ValidateIdentity(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: identity: empty", ErrInvalidConfig)
	case len(id) > MaxIdentityLen:
		return fmt.Errorf("%w: identity: %d bytes, longer than %d", ErrInvalidConfig, len(id), MaxIdentityLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: identity %s: not valid UTF-8", ErrInvalidConfig, quoteShort(id))
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: identity %s: control character %U at offset %d", ErrInvalidConfig, quoteShort(id), r, i)
		}
	}
	return nil
}

// quoteShort quotes s for an error message, cut to its first 64 bytes.
func quoteShort(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:64]) + "…"
}

// DefaultIdentity returns a fresh default identity, "hostname/pid/random":
// the host name, the process ID and 12 random hexadecimal digits, so that
// two Lockers of one process differ. A host name that is unknown or breaks
// the rule of [ValidateIdentity] is replaced by "unknown-host". Backends
// use it when no identity is configured.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" || len(host) > MaxIdentityLen/2 || ValidateIdentity(host) != nil {
		host = "unknown-host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
