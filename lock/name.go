package lock

import "fmt"

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 255

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
func ValidateName(name string) error {
	if len(name) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidName, len(name), MaxNameLen)
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '/' {
			if !nameByte(name[i]) {
				return fmt.Errorf("%w: %q: byte %q at offset %d is not one of A-Z a-z 0-9 . _ - :", ErrInvalidName, name, name[i], i)
			}
			continue
		}
		switch seg := name[start:i]; seg {
		case "":
			return fmt.Errorf("%w: %q: empty segment at offset %d", ErrInvalidName, name, start)
		case ".", "..":
			return fmt.Errorf("%w: %q: segment %q at offset %d", ErrInvalidName, name, seg, start)
		}
		start = i + 1
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == '-', c == ':':
		return true
	}
	return false
}
