package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Revoker = (*Locker)(nil)

// Revoke ends the lease of name's current holder whose token is token (see
// [lock.Revoker]) by a delete of its znode guarded by the version it read:
// that grant or nothing. A token that is not a current holder's returns
// an error wrapping [lock.ErrNotHeld]; so may a grant made a moment ago
// (the listing's server may lag), and a delete sent again that finds its
// first attempt applied. The holder's lease ends with [lock.ErrLost] when
// its watch reports the deletion (for a grant under 50ms old, when the
// watch is set).
func (l *Locker) Revoke(ctx context.Context, name string, token fencing.Token) error {
	if err := l.enterName(ctx, "revoke", name); err != nil {
		return err
	}
	defer l.leave()
	if err := l.reread(ctx, func() error { return l.revoke(ctx, l.parent(name), token) }); err != nil {
		return fmt.Errorf("zklock: revoke %q token %d: %w", name, token, secure.Refusal(err, isRefusal))
	}
	return nil
}

// revoke is one attempt of Revoke.
func (l *Locker) revoke(ctx context.Context, parent string, token fencing.Token) error {
	if token == 0 {
		return fmt.Errorf("%w: no znode has czxid 0", lock.ErrNotHeld)
	}
	path, version, err := l.findHolder(ctx, parent, token)
	if err != nil {
		return err
	}
	_, err = call(ctx, l.g, nil, func() (struct{}, error) {
		return struct{}{}, l.conn.Delete(path, version)
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: the grant ended meanwhile", lock.ErrNotHeld)
	case errors.Is(err, zk.ErrBadVersion):
		// The same grant, changed since it was read: the caller may try again.
		return fmt.Errorf("%w: znode %s changed while it was revoked; try again", lock.ErrNotHeld, path)
	case err != nil:
		return err
	}
	return nil
}

// findHolder returns the path and data version of the admitted znode of
// parent whose czxid is token, or an error wrapping lock.ErrNotHeld.
func (l *Locker) findHolder(ctx context.Context, parent string, token fencing.Token) (string, int32, error) {
	kids, err := call(ctx, l.g, nil, childrenOf(l.conn, parent))
	if errors.Is(err, zk.ErrNoNode) {
		return "", 0, fmt.Errorf("%w: the name has no requests", lock.ErrNotHeld)
	}
	if err != nil {
		return "", 0, err
	}
	q, reqs := lockQueue(kids.names)
	var futures []*future[*zk.Stat]
	for i, k := range q {
		if !queue.Admitted(reqs, i) {
			break
		}
		futures = append(futures, start(l.g, func() (*zk.Stat, error) {
			_, st, err := l.conn.Exists(parent + "/" + k)
			return st, err
		}, nil))
	}
	var errs []error
	path, version := "", int32(0)
	for i, f := range futures {
		st, err := f.wait(ctx, l.g, nil)
		switch {
		case err != nil:
			errs = append(errs, err)
		case st != nil && st.Czxid == int64(token):
			path, version = parent+"/"+q[i], st.Version
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", 0, err
	}
	if path == "" {
		return "", 0, fmt.Errorf("%w: no holder of the name has that token", lock.ErrNotHeld)
	}
	return path, version, nil
}

// znodeDeleted is the cause of the loss of a held lease whose znode
// another client deleted, by [Locker.Revoke] or by hand.
func znodeDeleted(path string) error {
	return telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: its znode %s was deleted by another client (revoked, or removed by hand)", lock.ErrLost, path))
}
