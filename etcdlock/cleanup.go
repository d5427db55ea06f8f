package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// discard deletes the record of an acquisition that will not be granted
// (unless its session's lease takes it) and returns err.
func (l *Locker) discard(r record, err error) error {
	if !r.s.ended() && !errors.Is(err, lock.ErrClosed) {
		l.cleanup(r)
	}
	return err
}

// cleanup runs cleanupOp with a fresh bounded context, else cleanupLater.
func (l *Locker) cleanup(r record) {
	ctx, cancel := context.WithTimeout(l.g.life, min(l.closeWait(), 2*time.Second))
	_, err := call(ctx, l, nil, l.cleanupOp(r))
	cancel()
	if err == nil {
		r.free()
		return
	}
	l.opts.Logger.Debug("etcdlock: cleanup failed; retrying in the background", "key", r.key, "err", err)
	l.cleanupLater(r)
}

// cleanupLater keeps trying cleanupOp in the background for a TTL plus the
// loss margin, then ends the session and revokes its lease.
func (l *Locker) cleanupLater(r record) {
	l.spawn(func() {
		ctx, cancel := context.WithTimeout(l.g.life, l.opts.ttl+l.opts.LossMargin)
		defer cancel()
		_, err := call(ctx, l, nil, l.cleanupOp(r))
		if err == nil {
			r.free()
		}
		if err == nil || l.g.life.Err() != nil || r.s.ended() {
			return
		}
		l.opts.Logger.Warn("etcdlock: gave up deleting a record; ending the session so that its lease takes the record", "key", r.key, "err", err)
		l.dropSession(r.s, telemetry.WithReason(telemetry.Revoked, fmt.Errorf("%w: record %q could not be deleted within %v: %w", lock.ErrLost, r.key, l.opts.ttl+l.opts.LossMargin, err)))
		r.s.revokeLost()
	})
}

// cleanupOp deletes a record, guarded by its create revision when known,
// and its lock-delay marker if r names one; after an ambiguous create, it
// deletes whatever record is at the key and writes the session's guard
// (docs/design/etcd.md, "Late creates"); a gone lease counts as done.
func (l *Locker) cleanupOp(r record) func(context.Context) (*clientv3.TxnResponse, error) {
	var ifRev []clientv3.Cmp
	var marker []clientv3.Op
	if r.marker != "" {
		marker = append(marker, clientv3.OpDelete(r.marker))
	}
	then := append([]clientv3.Op{clientv3.OpDelete(r.key)}, marker...)
	switch {
	case r.ambiguous:
		then = append(then, clientv3.OpPut(r.s.guard.key, "", clientv3.WithLease(r.s.id)))
	case r.rev > 0:
		ifRev = append(ifRev, clientv3.Compare(clientv3.CreateRevision(r.key), "=", r.rev))
	}
	return func(ctx context.Context) (*clientv3.TxnResponse, error) {
		resp, err := l.client.Txn(ctx).If(ifRev...).Then(then...).Else(marker...).Commit()
		if isLeaseNotFound(err) {
			return nil, nil
		}
		if err == nil && r.ambiguous {
			r.s.guard.raise(resp.Header.Revision)
		}
		return resp, err
	}
}
