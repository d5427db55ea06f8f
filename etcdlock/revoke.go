package etcdlock

import (
	"context"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Revoker = (*Locker)(nil)

// Revoke ends the lease of name's current holder whose token is token (see
// [lock.Revoker]). It reads name's records in queue order, finds the one
// whose create revision is token, refuses unless it is admitted, and
// deletes it with a transaction that compares the key's create revision
// with token, so a later record under the same key is never deleted: two
// round trips, needing no session of this Locker. The holder's Locker
// learns of the deletion from the watch on its record and ends the lease
// with [lock.ErrLost] and a cause naming the deletion's revision; etcd
// does not tell it who deleted the record. A lease starts watching its
// record only recordWatchDelay (50ms) after its grant, so a revocation
// within that time reaches a running holder when the watch starts, up to
// that long after the grant plus a round trip: a holder that releases
// before then finds its record gone: its Release returns an error wrapping
// ErrLost, and so does Err from then on.
//
// A token that is not a current holder's returns an error wrapping
// [lock.ErrNotHeld]. If the connection fails while the delete is on its
// way, Revoke sends it again, and the second attempt finds the record gone
// and reports ErrNotHeld although the first one revoked it.
func (l *Locker) Revoke(ctx context.Context, name string, token fencing.Token) error {
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("etcdlock: revoke %q token %d: %w", name, token, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return fmt.Errorf("etcdlock: revoke: %w", err)
	}
	if l.isClosed() {
		return fmt.Errorf("etcdlock: revoke %q token %d: %w", name, token, lock.ErrClosed)
	}
	cctx, cancel := l.withClosing(ctx)
	defer cancel()
	if err := l.revoke(cctx, name, token); err != nil {
		if ctx.Err() == nil && l.closing.Err() != nil {
			err = lock.ErrClosed
		}
		return fmt.Errorf("etcdlock: revoke %q token %d: %w", name, token, err)
	}
	return nil
}

func (l *Locker) revoke(ctx context.Context, name string, token fencing.Token) error {
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("%w: no record has that create revision", lock.ErrNotHeld)
	}
	rev := int64(token)
	var resp *clientv3.GetResponse
	err := l.call(ctx, nil, func(ctx context.Context) error {
		var err error
		resp, err = l.client.Get(ctx, l.namePrefix(name), queueRead(clientv3.WithMaxCreateRev(rev))...)
		return err
	})
	if err != nil {
		return err
	}
	kvs := resp.Kvs
	i := len(kvs) - 1
	if i < 0 || kvs[i].CreateRevision != rev {
		return fmt.Errorf("%w: no request of the name has that token", lock.ErrNotHeld)
	}
	// Whether a record is admitted depends on the records ahead of it
	// only, and once admitted it stays so until it goes: the read above
	// is enough, and the delete below needs to check only that the
	// record is the same.
	if !queue.Admitted(requestsOf(kvs), i) {
		return fmt.Errorf("%w: the request is waiting, not holding", lock.ErrNotHeld)
	}
	key := string(kvs[i].Key)
	var tresp *clientv3.TxnResponse
	err = l.call(ctx, nil, func(ctx context.Context) error {
		var err error
		tresp, err = l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).
			Commit()
		return err
	})
	if err != nil {
		return err
	}
	if !tresp.Succeeded {
		return fmt.Errorf("%w: the grant ended meanwhile", lock.ErrNotHeld)
	}
	l.opts.Logger.Info("etcdlock: revoked a grant", "key", key, "token", rev, "revision", tresp.Header.Revision)
	return nil
}

// recordDeletedCause is the cause of the loss of a lease whose record was
// deleted at revision rev by anyone but its own Release: a [Locker.Revoke]
// or a delete by hand, or the server ending the session lease before the
// keepalive loop noticed. The delete event does not tell them apart.
func recordDeletedCause(key string, rev int64) error {
	return telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: record %q was deleted at revision %d (revoked by another client, or its session lease ended on the server)", lock.ErrLost, key, rev))
}
