// Package fenced is the stored form of a fenced value, shared by the
// guarded writes of package etcdlock (PutFenced, GetFenced) and package
// zklock (SetFenced, GetFenced): the token in HeaderDigits zero-padded
// decimal digits, a colon, then the value, as in
// "00000000000000000042:hello". Fixed width makes byte order equal token
// order, which lets etcd compare tokens inside a transaction, and keeps the
// stored data readable by people and tools.
package fenced

import (
	"fmt"
	"strconv"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// HeaderDigits is the width of the token header: any uint64 in decimal.
const HeaderDigits = 20

// Encode returns the stored form of value written with token.
func Encode(token uint64, value []byte) []byte {
	b := fmt.Appendf(make([]byte, 0, HeaderDigits+1+len(value)), "%0*d:", HeaderDigits, token)
	return append(b, value...)
}

// Decode splits stored into its token and value. Empty stored data is
// token 0 with no value (a key or znode not yet written with a token).
// Anything else without a well-formed header is an error wrapping
// fencing.ErrInvalidToken (sentinel.InvalidToken). The value shares stored's memory.
func Decode(stored []byte) (uint64, []byte, error) {
	if len(stored) == 0 {
		return 0, nil, nil
	}
	if len(stored) <= HeaderDigits || stored[HeaderDigits] != ':' {
		return 0, nil, fmt.Errorf("stored value has no token header (%d digits and a colon): %w", HeaderDigits, sentinel.InvalidToken)
	}
	v, err := strconv.ParseUint(string(stored[:HeaderDigits]), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("stored value has a malformed token header %q: %w", stored[:HeaderDigits], sentinel.InvalidToken)
	}
	return v, stored[HeaderDigits+1:], nil
}
