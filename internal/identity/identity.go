// Package identity holds the rule for Locker identities and their default,
// so that package lock (which exports them as lock.ValidateIdentity,
// lock.DefaultIdentity and lock.MaxIdentityLen) and the option code below
// it apply one copy.
package identity

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// MaxLen is the longest identity, in bytes.
const MaxLen = 1024

// Validate returns nil if id is 1 to MaxLen bytes of valid UTF-8 without
// control characters, and otherwise an error wrapping
// sentinel.InvalidConfig that says what is wrong.
func Validate(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: identity: empty", sentinel.InvalidConfig)
	case len(id) > MaxLen:
		return fmt.Errorf("%w: identity: %d bytes, longer than %d", sentinel.InvalidConfig, len(id), MaxLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: identity %s: not valid UTF-8", sentinel.InvalidConfig, quoteShort(id))
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: identity %s: control character %U at offset %d", sentinel.InvalidConfig, quoteShort(id), r, i)
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

// Default returns a fresh "hostname/pid/random" identity; a host name
// that is unknown or fails Validate is replaced by "unknown-host".
func Default() string {
	host, err := os.Hostname()
	if err != nil || host == "" || len(host) > MaxLen/2 || Validate(host) != nil {
		host = "unknown-host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
