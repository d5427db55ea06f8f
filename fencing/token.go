// Package fencing makes a lock's grant enforceable by the resource it
// protects.
//
// A holder that was paused or partitioned may still write after its lease
// has ended, and the lock service cannot stop a write already on its way.
// A fencing token closes that gap: every grant carries a [Token] larger
// than that of every earlier grant of the lock, the holder sends it with
// each write, and the resource refuses a write whose token is lower than
// the highest it has accepted. Equal tokens are accepted (one grant, many
// writes); a lower one is rejected with a [*StaleTokenError], which
// matches [ErrStaleToken]. Every helper here makes the check and the write
// one atomic step (docs/design/fencing.md).
//
// A resource compares the tokens of one source: one lock deployment (an
// etcd cluster, a ZooKeeper ensemble), which draws the tokens of all lock
// names from one counter (see "Bounded memory" on [Guard]).
//
// # Shared grants and semaphore permits
//
// A token check assumes one holder at a time: it protects a read-write
// lock's writer, whose token exceeds every reader's admitted before it,
// but not holders that hold at once (readers, permits), whom the higher
// token would lock out. Protect those writes with the backends' guarded
// writes (etcdlock.GuardedTxn, zklock.GuardedMulti), which apply a write
// only while the lease's own record exists.
package fencing

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// Token is a fencing token: a number that rises with every grant of a lock.
// The zero Token means "no token" and is never handed out by a lock.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// ParseToken parses a decimal token as written by [Token.String]. Zero, a
// sign, or anything but decimal digits is an error wrapping
// [ErrInvalidToken].
func ParseToken(s string) (Token, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("fencing: parse token %q: %w: not a decimal number below 2^64", s, ErrInvalidToken)
	case v == 0:
		return 0, fmt.Errorf("fencing: parse token %q: %w: zero is not a token", s, ErrInvalidToken)
	}
	return Token(v), nil
}

// ErrStaleToken is matched by every error that rejects a write because its
// token is lower than one the resource has already accepted.
var ErrStaleToken = errors.New("stale token")

// ErrInvalidToken is returned for a token that is missing, zero or not a
// number.
var ErrInvalidToken = sentinel.InvalidToken

// StaleTokenError reports a write refused because its token is lower than the
// highest token the resource has accepted.
type StaleTokenError struct {
	Resource string // what was written to
	Token    Token  // the refused write's token
	Highest  Token  // the highest token the resource had accepted
}

// Error describes the refused write.
func (e *StaleTokenError) Error() string {
	if e == nil {
		return ErrStaleToken.Error()
	}
	return fmt.Sprintf("fencing: stale token %d for %q: highest accepted is %d", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is [ErrStaleToken], so that
// errors.Is(err, ErrStaleToken) holds for every *StaleTokenError.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
