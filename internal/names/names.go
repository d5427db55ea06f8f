// Package names holds the rules for lock names, namespaces (etcd key
// prefixes, ZooKeeper roots) and Locker identities, so that every backend
// and package lock apply one copy of them. The errors of names and
// namespaces carry no sentinel: callers wrap them with the sentinel of
// their boundary (lock.ErrInvalidName, lock.ErrInvalidConfig); those of
// identities wrap lock.ErrInvalidConfig.
package names

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// MaxLen is the longest lock name, and the longest namespace, in bytes.
const MaxLen = 255

// Check returns nil if name is a valid lock name by the rule
// lock.ValidateName documents, and otherwise an error saying what is wrong.
func Check(name string) error {
	if len(name) == 0 {
		return errors.New("empty")
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%d bytes, longer than %d", len(name), MaxLen)
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '/' {
			if !segmentByte(name[i]) {
				return fmt.Errorf("%q: byte %q at offset %d is not one of A-Z a-z 0-9 . _ - :", name, name[i], i)
			}
			continue
		}
		switch seg := name[start:i]; seg {
		case "":
			return fmt.Errorf("%q: empty segment at offset %d", name, start)
		case ".", "..":
			return fmt.Errorf("%q: segment %q at offset %d", name, seg, start)
		}
		start = i + 1
	}
	return nil
}

func segmentByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == '-', c == ':':
		return true
	}
	return false
}

// Namespace is a checked namespace path.
type Namespace struct {
	Path   string // without its leading and trailing slash
	Rooted bool   // given with a leading slash
}

// ParseNamespace checks a namespace as a user writes it: a lock name (see
// Check), optionally preceded and followed by one '/', whose first segment
// is not "zookeeper" (reserved by ZooKeeper; refused on every backend alike).
func ParseNamespace(ns string) (Namespace, error) {
	p, rooted := strings.CutPrefix(ns, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return Namespace{}, fmt.Errorf("namespace %q: no segment", ns)
	}
	if err := Check(p); err != nil {
		return Namespace{}, fmt.Errorf("namespace %q: %w", ns, err)
	}
	if first, _, _ := strings.Cut(p, "/"); first == "zookeeper" {
		return Namespace{}, fmt.Errorf("namespace %q: /zookeeper is reserved by ZooKeeper", ns)
	}
	return Namespace{Path: p, Rooted: rooted}, nil
}

// Between returns the part of s from byte at up to the last sep in s, and
// "" when s holds no sep at or after at: a lease's lock name from its key
// or path, whose own last part never holds sep.
func Between(s string, at int, sep string) string {
	end := strings.LastIndex(s, sep)
	if at < 0 || end < at {
		return ""
	}
	return s[at:end]
}

// MaxIdentityLen is the longest Locker identity, in bytes.
const MaxIdentityLen = 1024

// CheckIdentity returns nil if id is 1 to MaxIdentityLen bytes of valid
// UTF-8 without control characters, else an error that says what is wrong.
func CheckIdentity(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: identity: empty", sentinel.InvalidConfig)
	case len(id) > MaxIdentityLen:
		return fmt.Errorf("%w: identity: %d bytes, longer than %d", sentinel.InvalidConfig, len(id), MaxIdentityLen)
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

// DefaultIdentity returns a fresh "hostname/pid/random" identity; a host
// name that is unknown or fails CheckIdentity is replaced by "unknown-host".
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" || len(host) > MaxIdentityLen/2 || CheckIdentity(host) != nil {
		host = "unknown-host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
