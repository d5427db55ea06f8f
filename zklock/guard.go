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

// go-zookeeper has no contexts: ctx is checked before every request, but
// a request already sent is waited for.

// GuardedMulti runs ops (what zk.Conn.Multi accepts) as one multi, after
// the lease's [Lease.CheckOp], so that they apply only while lease holds
// its lock, whatever the writer's clock or state says. conn may be any
// connection to the ensemble. It returns the responses of ops, without the
// check's.
//
// A lease ended locally is refused without I/O, with an error wrapping
// its Err. A failed check writes nothing and wraps lock.ErrReleased if the
// lease was released meanwhile, else lock.ErrLost; a failed op writes
// nothing and is returned as go-zookeeper reports it. A nil ctx, conn,
// operation or lease, or a lease of another backend, is an error wrapping
// lock.ErrInvalidConfig. A connection that fails mid-request leaves open
// whether the multi was applied.
func GuardedMulti(ctx context.Context, conn *zk.Conn, lease lock.Lease, ops ...any) ([]zk.MultiResponse, error) {
	return guardedMulti(ctx, conn, "guarded multi", "zklock.GuardedMulti", []lock.Lease{lease}, ops)
}

// GuardedMultiAll is [GuardedMulti] for several leases, such as those of
// a lock.MultiLease: ops apply only while every one of leases holds its
// lock (one check per lease, first in the same multi). It fails as
// GuardedMulti does for the first lease that is not held; no leases is an
// error wrapping lock.ErrInvalidConfig.
func GuardedMultiAll(ctx context.Context, conn *zk.Conn, leases []lock.Lease, ops ...any) ([]zk.MultiResponse, error) {
	return guardedMulti(ctx, conn, "guarded multi all", "zklock.GuardedMultiAll", leases, ops)
}

// guardedMulti implements GuardedMulti and GuardedMultiAll: op names the
// call in errors, helper in telemetry, which has the first lease's name
// and token.
func guardedMulti(ctx context.Context, conn *zk.Conn, op, helper string, leases []lock.Lease, ops []any) ([]zk.MultiResponse, error) {
	if err := guardArgs(ctx, conn, leases, ops); err != nil {
		return nil, fmt.Errorf("zklock: %s: %w", op, err)
	}
	les, names, checks := make([]*Lease, len(leases)), make([]string, len(leases)), make([]any, len(leases), len(leases)+len(ops))
	for i, lease := range leases {
		le, err := zkLease(lease)
		if err != nil {
			return nil, fmt.Errorf("zklock: %s: lease %d of %d: %w", op, i+1, len(leases), err)
		}
		les[i], names[i], checks[i] = le, le.Name(), le.CheckOp()
	}
	var tel *telemetry.Telemetry // none for a zero *Lease, refused below
	if les[0].valid() {
		tel = les[0].l.tel
	}
	ctx, w := tel.StartWrite(ctx, helper, names[0], uint64(les[0].czxid))
	fail := func(outcome string, err error) error {
		err = fmt.Errorf("zklock: %s on %s: %w", op, quoted(names), secure.Refusal(err, isRefusal))
		w.End(outcome, err)
		return err
	}
	for _, le := range les {
		if err := le.endErr(); err != nil {
			return nil, fail(telemetry.Rejected, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fail("", err)
	}
	res, err := conn.Multi(append(checks, ops...)...)
	if len(res) >= len(les) {
		for i, le := range les {
			if cerr := res[i].Error; errors.Is(cerr, zk.ErrNoNode) || errors.Is(cerr, zk.ErrBadVersion) {
				if lerr := le.endErr(); errors.Is(lerr, lock.ErrReleased) {
					return nil, fail(telemetry.Rejected, fmt.Errorf("nothing written: %w", lerr))
				}
				return nil, fail(telemetry.Rejected, fmt.Errorf("nothing written: %w: znode %s (version %d): %w",
					lock.ErrLost, le.Path(), le.Version(), cerr))
			}
		}
		res = res[len(les):]
	}
	if err != nil {
		return res, fail("", err)
	}
	w.End(telemetry.Accepted, nil)
	return res, nil
}

// guardArgs checks the arguments of a guarded multi but its leases.
func guardArgs(ctx context.Context, conn *zk.Conn, leases []lock.Lease, ops []any) error {
	switch {
	case conn == nil:
		return fmt.Errorf("nil conn: %w", lock.ErrInvalidConfig)
	case ctx == nil:
		return fmt.Errorf("nil context: %w", lock.ErrInvalidConfig)
	case len(leases) == 0:
		return fmt.Errorf("no leases: %w", lock.ErrInvalidConfig)
	}
	for i, op := range ops {
		if nilcheck.IsNil(op) {
			return fmt.Errorf("operation %d is nil: %w", i, lock.ErrInvalidConfig)
		}
	}
	return nil
}

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

// SetFenced sets the data of the znode at path, atomically, if token is
// not lower than the highest token the znode has accepted, records token
// as the new highest, and returns the znode's stat after the write. A
// lower token is rejected with a *fencing.StaleTokenError (Resource is
// path) and nothing is written; equal tokens are accepted. A zero token
// is an error wrapping fencing.ErrInvalidToken; a nil ctx or conn, or a
// path ZooKeeper would refuse, one wrapping lock.ErrInvalidConfig.
//
// A missing znode is created (persistent, zk.WorldACL(zk.PermAll)) with
// its first data; to choose the ACL, create it with empty data (token 0).
// The stored data is the token in 20 digits, a colon, then data; write it
// only through SetFenced, read it with GetFenced, and take every writer's
// tokens from one source.
func SetFenced(ctx context.Context, conn *zk.Conn, path string, data []byte, token fencing.Token) (*zk.Stat, error) {
	if err := checkFencedArgs(ctx, conn, path); err != nil {
		return nil, fmt.Errorf("zklock: set fenced: %w", err)
	}
	if token == 0 {
		return nil, fmt.Errorf("zklock: set fenced %q: zero token: %w", path, fencing.ErrInvalidToken)
	}
	stored := fenced.Encode(uint64(token), data)
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
		if uint64(token) < highest {
			return nil, &fencing.StaleTokenError{Resource: path, Token: token, Highest: fencing.Token(highest)}
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

// GetFenced returns the data SetFenced last stored at path and its token;
// a missing znode returns nil, 0 and no error. The server conn is on may
// lag the leader (call conn.Sync first for the latest write). Data that
// SetFenced did not write returns an error wrapping
// fencing.ErrInvalidToken. Never use it as the check before a write.
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
	return data, fencing.Token(token), nil
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

// checkZnodePath accepts the paths ZooKeeper's PathUtils.validatePath
// accepts, except the root.
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
