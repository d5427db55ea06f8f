package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/fenced"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Fencing data kept in ZooKeeper itself: GuardedMulti (while a lease
// holds) and SetFenced (by token). go-zookeeper has no contexts: ctx is
// checked before every request, but a request already sent is waited for.

// GuardedMulti runs ops as one ZooKeeper multi that applies them only
// while lease holds its lock: the lease's [Lease.CheckOp] goes first, and
// ZooKeeper applies all operations of a multi or none. The lease's znode is
// deleted when the lease is released or its session ends and is never
// created again, so once anyone else could hold the lock, the multi writes
// nothing, whatever the writer's clock or state says.
//
// lease must be a *Lease from this package, reached through a lock.Lease
// (the value Acquire returned). ops are what zk.Conn.Multi accepts
// (*zk.CreateRequest, *zk.SetDataRequest, *zk.DeleteRequest,
// *zk.CheckVersionRequest). conn may be any connection to the ensemble: the
// check is evaluated by the leader in order with every other write, so it
// need not be the lease's own session (a Locker from Dial does not share
// its connection). The responses returned are those of ops, in order,
// without the check's.
//
// A lease that has already ended locally is refused without I/O, with an
// error wrapping its Err (lock.ErrLost or lock.ErrReleased). When the check
// fails on the server, nothing was written and the error wraps
// lock.ErrReleased if the lease was released meanwhile and lock.ErrLost
// otherwise (the znode is gone, or someone else changed its version); the
// local lease may not have noticed yet. A failure of one of ops is returned
// as go-zookeeper reports it (errors.Is(err, zk.ErrBadVersion), ...), and
// nothing was written either. A nil ctx, a nil conn, a nil operation, a
// nil lease or a lease of another backend is an error wrapping
// lock.ErrInvalidConfig. When the
// connection fails mid-request the multi may or may not have been applied.
func GuardedMulti(ctx context.Context, conn *zk.Conn, lease lock.Lease, ops ...any) ([]zk.MultiResponse, error) {
	if conn == nil {
		return nil, fmt.Errorf("zklock: guarded multi: nil conn: %w", lock.ErrInvalidConfig)
	}
	if ctx == nil {
		return nil, fmt.Errorf("zklock: guarded multi: nil context: %w", lock.ErrInvalidConfig)
	}
	for i, op := range ops {
		if nilcheck.IsNil(op) {
			return nil, fmt.Errorf("zklock: guarded multi: operation %d is nil: %w", i, lock.ErrInvalidConfig)
		}
	}
	le, err := zkLease(lease)
	if err != nil {
		return nil, fmt.Errorf("zklock: guarded multi: %w", err)
	}
	var tel *telemetry.Telemetry // none for a zero *Lease, refused below
	if le.valid() {
		tel = le.l.tel
	}
	ctx, w := tel.StartWrite(ctx, guardedMultiHelper, le.Name(), uint64(le.czxid))
	if err := le.endErr(); err != nil {
		err = fmt.Errorf("zklock: guarded multi on %q: %w", le.Name(), secure.Refusal(err, isRefusal))
		w.End(telemetry.Rejected, err)
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("zklock: guarded multi on %q: %w", le.Name(), secure.Refusal(err, isRefusal))
		w.End("", err)
		return nil, err
	}
	res, err := conn.Multi(append([]any{le.CheckOp()}, ops...)...)
	if len(res) > 0 {
		if cerr := res[0].Error; errors.Is(cerr, zk.ErrNoNode) || errors.Is(cerr, zk.ErrBadVersion) {
			if lerr := le.endErr(); errors.Is(lerr, lock.ErrReleased) {
				err = fmt.Errorf("zklock: guarded multi on %q: nothing written: %w", le.Name(), lerr)
			} else {
				err = fmt.Errorf("zklock: guarded multi on %q: nothing written: %w: znode %s (version %d): %w",
					le.Name(), lock.ErrLost, le.Path(), le.Version(), cerr)
			}
			w.End(telemetry.Rejected, err)
			return nil, err
		}
		res = res[1:]
	}
	if err != nil {
		err = fmt.Errorf("zklock: guarded multi on %q: %w", le.Name(), secure.Refusal(err, isRefusal))
		w.End("", err)
		return res, err
	}
	w.End(telemetry.Accepted, nil)
	return res, nil
}

// guardedMultiHelper is the helper attribute of GuardedMulti's fencing
// decisions.
const guardedMultiHelper = "zklock.GuardedMulti"

// zkLease returns lease as a *Lease, or an error wrapping
// lock.ErrInvalidConfig.
func zkLease(lease lock.Lease) (*Lease, error) {
	le, ok := lease.(*Lease)
	switch {
	case lease == nil:
		return nil, fmt.Errorf("nil lease: %w", lock.ErrInvalidConfig)
	case !ok:
		return nil, fmt.Errorf("lease of type %T is not a ZooKeeper lease (*zklock.Lease): %w", lease, lock.ErrInvalidConfig)
	case le == nil:
		return nil, fmt.Errorf("nil *zklock.Lease: %w", lock.ErrInvalidConfig)
	}
	return le, nil
}

// SetFenced sets the data of the znode at path if token is not lower than
// the highest token the znode has accepted, records token as the new
// highest, and returns the znode's stat after the write (its Mzxid orders
// the write among all writes of the ensemble). A lower token is rejected
// with a *fencing.StaleTokenError (Resource is path) and nothing is
// written. Equal tokens are accepted, so
// one grant may write many times. A zero token is an error wrapping
// fencing.ErrInvalidToken; a nil ctx, a nil conn or a malformed path (it must be
// absolute, not the root, without a trailing slash or empty, "." or ".."
// segments, in UTF-8 without the characters ZooKeeper refuses) one
// wrapping lock.ErrInvalidConfig.
//
// The check and the write are atomic, and hold for writers whose lease
// has long ended (docs/design/zookeeper.md, "Guarded and fenced writes").
//
// A missing znode is created (persistent, with zk.WorldACL(zk.PermAll)),
// atomically with its first data; its parent must exist. To choose the ACL, create the znode yourself with
// empty data: empty data counts as token 0.
//
// The stored data is the token in 20 zero-padded decimal digits, a colon,
// then data ("00000000000000000042:hello"); read it with GetFenced. The
// znode must be written only through SetFenced: data without the header is
// reported with an error wrapping fencing.ErrInvalidToken.
//
// Every writer of the znode must use tokens of one source.
func SetFenced(ctx context.Context, conn *zk.Conn, path string, data []byte, token fencing.Token) (*zk.Stat, error) {
	if err := checkFencedArgs(ctx, conn, path); err != nil {
		return nil, fmt.Errorf("zklock: set fenced: %w", err)
	}
	if token == 0 {
		return nil, fmt.Errorf("zklock: set fenced %q: zero token: %w", path, fencing.ErrInvalidToken)
	}
	stored := fenced.Encode(token, data)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("zklock: set fenced %q: %w", path, secure.Refusal(err, isRefusal))
		}
		old, stat, err := conn.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			// Create and set in one multi: a plain create reports no stat.
			res, err := conn.Multi(
				&zk.CreateRequest{Path: path, Data: stored, Acl: zk.WorldACL(zk.PermAll)},
				&zk.SetDataRequest{Path: path, Data: stored, Version: 0},
			)
			if errors.Is(err, zk.ErrNodeExists) {
				continue // created by a concurrent writer: compare with its token
			}
			if err != nil {
				return nil, fmt.Errorf("zklock: set fenced %q: create: %w", path, secure.Refusal(err, isRefusal))
			}
			return res[1].Stat, nil
		}
		if err != nil {
			return nil, fmt.Errorf("zklock: set fenced %q: %w", path, secure.Refusal(err, isRefusal))
		}
		highest, _, err := fenced.Decode(old)
		if err != nil {
			return nil, fmt.Errorf("zklock: set fenced %q: %w", path, secure.Refusal(err, isRefusal))
		}
		if token < highest {
			return nil, &fencing.StaleTokenError{Resource: path, Token: token, Highest: highest}
		}
		stat, err = conn.Set(path, stored, stat.Version)
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			continue // another write came in between: compare again
		}
		if err != nil {
			return nil, fmt.Errorf("zklock: set fenced %q: %w", path, secure.Refusal(err, isRefusal))
		}
		return stat, nil
	}
}

// GetFenced returns the data SetFenced last stored at path and the token it
// was written with. A missing znode returns nil, 0 and no error. Like every
// ZooKeeper read it is answered by the server conn is on, which may lag the
// leader (call conn.Sync first for the latest write). Data that SetFenced
// did not write returns an error wrapping fencing.ErrInvalidToken.
//
// Use it to read the data, never as the check before a write: SetFenced
// makes that check itself, atomically.
func GetFenced(ctx context.Context, conn *zk.Conn, path string) ([]byte, fencing.Token, error) {
	if err := checkFencedArgs(ctx, conn, path); err != nil {
		return nil, 0, fmt.Errorf("zklock: get fenced: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("zklock: get fenced %q: %w", path, secure.Refusal(err, isRefusal))
	}
	stored, _, err := conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("zklock: get fenced %q: %w", path, secure.Refusal(err, isRefusal))
	}
	token, data, err := fenced.Decode(stored)
	if err != nil {
		return nil, 0, fmt.Errorf("zklock: get fenced %q: %w", path, secure.Refusal(err, isRefusal))
	}
	return data, token, nil
}

func checkFencedArgs(ctx context.Context, conn *zk.Conn, path string) error {
	if ctx == nil {
		return fmt.Errorf("nil context: %w", lock.ErrInvalidConfig)
	}
	if conn == nil {
		return fmt.Errorf("nil conn: %w", lock.ErrInvalidConfig)
	}
	if err := checkZnodePath(path); err != nil {
		return fmt.Errorf("path %q: %w: %w", path, err, lock.ErrInvalidConfig)
	}
	return nil
}

// checkZnodePath accepts the paths ZooKeeper's own PathUtils.validatePath
// accepts, except the root: absolute, no empty, "." or ".." segment, no
// trailing slash, valid UTF-8 without the characters the server refuses
// (U+0000–U+001F, U+007F–U+009F, U+D800–U+F8FF, U+FFF0–U+FFFF). Checking
// here turns what would be a server error, or a request go-zookeeper
// cannot encode, into an error wrapping lock.ErrInvalidConfig.
func checkZnodePath(path string) error {
	if !strings.HasPrefix(path, "/") {
		return errors.New("not absolute")
	}
	if path == "/" {
		return errors.New("the root znode")
	}
	if !utf8.ValidString(path) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range path {
		if r <= 0x1f || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || 0xfff0 <= r {
			return fmt.Errorf("character %U at offset %d", r, i)
		}
	}
	for _, seg := range strings.Split(path[1:], "/") {
		switch seg {
		case "":
			return errors.New("empty segment or trailing slash")
		case ".", "..":
			return fmt.Errorf("segment %q", seg)
		}
	}
	return nil
}
