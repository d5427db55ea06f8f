package etcdlock

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/lock"
)

// delayPrefix returns the key prefix of name's lock-delay markers. Like
// the session guards ("#guard/…") they live under a first segment that
// starts with '#', which no lock name can, and outside every name's record
// range, so no listing, watch or Observe of records ever sees them. A
// marker has no lease: it outlives the session of the grant that wrote it.
func (l *Locker) delayPrefix(name string) string {
	return l.opts.prefix + "#delay/" + name + "/#"
}

// markerKey returns the marker of the record at key, a record of name: the
// record's key with the name's record prefix replaced by its marker
// prefix, so that a marker says which record it stands for.
func (l *Locker) markerKey(name, key string) string {
	return l.delayPrefix(name) + strings.TrimPrefix(key, l.namePrefix(name))
}

// delay runs, when the Locker has a lock-delay, between the confirmation
// of a grant and the lease's start. It reads, in one transaction, name's
// markers and records. A marker whose record is gone was left by a grant
// that ended without a clean Release (a clean Release deletes both in one
// transaction): delay then waits the Locker's lock-delay from the moment
// that read was answered, which is after the record disappeared, so the
// wait errs toward waiting longer. Then it deletes the stale markers and
// writes the acquisition's own, in one transaction guarded by its record.
//
// A grant that is granted at once after a crash long ago waits too: the
// marker cannot tell when its record went, and a needless wait is the safe
// side.
func (a *acquisition) delay(ctx context.Context) error {
	d := a.l.opts.LockDelay
	if d <= 0 {
		return nil
	}
	dp := a.l.delayPrefix(a.name)
	own := a.l.markerKey(a.name, a.key)
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(clientv3.OpGet(dp, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
				clientv3.OpGet(a.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())).
			Commit()
		return err
	})
	if err != nil {
		return err
	}
	seen := time.Now()
	if !resp.Succeeded {
		return a.deleted()
	}
	records := make(map[string]bool)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		records[strings.TrimPrefix(string(kv.Key), a.pfx)] = true
	}
	var stale []string
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		k := string(kv.Key)
		if k != own && !records[strings.TrimPrefix(k, dp)] {
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		a.l.opts.Logger.Info("etcdlock: lock-delay: the previous holder did not release cleanly; waiting", "name", a.name, "delay", d)
		if err := a.l.sleep(ctx, a.s, time.Until(seen.Add(d))); err != nil {
			return err
		}
	}
	// From now on our marker may exist: if the acquisition fails,
	// discard deletes it with the record.
	a.marker = own
	ops := []clientv3.Op{clientv3.OpPut(own, a.l.opts.Identity)}
	for _, k := range stale {
		ops = append(ops, clientv3.OpDelete(k))
	}
	err = a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(ops...).
			Commit()
		return err
	})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return a.deleted()
	}
	return nil
}

// sleep waits d, or until ctx is done, the Locker closes or session s
// ends.
func (l *Locker) sleep(ctx context.Context, s *session, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closing.Done():
		return lock.ErrClosed
	case <-s.done:
		return s.lostErr()
	}
}
