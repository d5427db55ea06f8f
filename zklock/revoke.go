package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Revoker = (*Locker)(nil)

// Revoke implements [lock.Revoker] by deleting the holder's znode, after a
// sync, guarded by the version it read; the holder's Locker ends the lease
// with [lock.ErrLost] when its watch reports the deletion (for a grant
// under 50ms old, once the watch is set).
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
	zs, err := l.queue(ctx, parent, queue.Admitted)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(zs, func(z readZnode) bool { return z.stat.Czxid == int64(token) })
	if i < 0 {
		return fmt.Errorf("%w: no holder of the name has that token", lock.ErrNotHeld)
	}
	path, version := parent+"/"+zs[i].child, zs[i].stat.Version
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

// znodeDeleted is the cause of the loss of a held lease whose znode
// another client deleted, by [Locker.Revoke] or by hand.
func znodeDeleted(path string) error {
	return telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: its znode %s was deleted by another client (revoked, or removed by hand)", lock.ErrLost, path))
}
