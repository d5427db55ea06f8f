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

// Revoke implements [lock.Revoker] by deleting the holder's record,
// guarded by its create revision; the holder's Locker ends the lease with
// [lock.ErrLost] when its watch sees the deletion.
func (l *Locker) Revoke(ctx context.Context, name string, token fencing.Token) error {
	if err := l.begin(ctx, "revoke", name); err != nil {
		return err
	}
	if err := l.bounded(ctx, func(ctx context.Context) error { return l.revoke(ctx, name, token) }); err != nil {
		return fmt.Errorf("etcdlock: revoke %q token %d: %w", name, token, err)
	}
	return nil
}

func (l *Locker) revoke(ctx context.Context, name string, token fencing.Token) error {
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("%w: no record has that create revision", lock.ErrNotHeld)
	}
	rev := int64(token)
	resp, err := l.get(ctx, nil, l.namePrefix(name), queueRead(clientv3.WithMaxCreateRev(rev))...)
	if err != nil {
		return err
	}
	kvs := resp.Kvs
	i := len(kvs) - 1
	if i < 0 || kvs[i].CreateRevision != rev {
		return fmt.Errorf("%w: no request of the name has that token", lock.ErrNotHeld)
	}
	// Admission depends only on the records ahead, and lasts: the delete
	// checks only that the record is the same.
	if !queue.Admitted(requestsOf(kvs), i) {
		return fmt.Errorf("%w: the request is waiting, not holding", lock.ErrNotHeld)
	}
	key := string(kvs[i].Key)
	tresp, err := call(ctx, l, nil, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).
			Commit()
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
// deleted at revision rev, by a Revoke or by the lease's end on the server.
func recordDeletedCause(key string, rev int64) error {
	return telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: record %q was deleted at revision %d (revoked by another client, or its session lease ended on the server)", lock.ErrLost, key, rev))
}
