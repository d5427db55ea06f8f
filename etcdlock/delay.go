package etcdlock

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
)

// delayPrefix returns the key prefix of the lock-delay markers of the
// records under pfx, outside every name's record range (docs/design/etcd.md,
// "Key layout").
func (l *Locker) delayPrefix(pfx string) string {
	return l.opts.prefix + "#delay/" + strings.TrimPrefix(pfx, l.opts.prefix)
}

// markerOps are what a create adds with a lock-delay: the put of the
// marker, which only a clean Release deletes, then delayReads.
func (a *acquisition) markerOps() []clientv3.Op {
	if a.marker == "" {
		return nil
	}
	return append([]clientv3.Op{clientv3.OpPut(a.marker, a.l.opts.Identity)}, a.delayReads()...)
}

// delayReads end every read that can confirm a grant, with a lock-delay:
// the keys of the name's markers, then of its records.
func (a *acquisition) delayReads() []clientv3.Op {
	if a.marker == "" {
		return nil
	}
	return []clientv3.Op{
		clientv3.OpGet(a.l.delayPrefix(a.pfx), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(a.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
}

// noteDelayReads keeps for delay what the answers of delayReads, ending
// rs, show: the markers whose record is gone, but its own.
func (a *acquisition) noteDelayReads(rs []*etcdserverpb.ResponseOp) {
	if a.marker == "" || len(rs) < 2 {
		return
	}
	a.seen = time.Now()
	records := make(map[string]bool)
	for _, kv := range rs[len(rs)-1].GetResponseRange().Kvs {
		records[strings.TrimPrefix(string(kv.Key), a.pfx)] = true
	}
	dp := a.l.delayPrefix(a.pfx)
	a.stale = nil
	for _, kv := range rs[len(rs)-2].GetResponseRange().Kvs {
		if k := string(kv.Key); k != a.marker && !records[strings.TrimPrefix(k, dp)] {
			a.stale = append(a.stale, clientv3.OpDelete(k))
		}
	}
}

// delay waits, before a confirmed grant starts, the lock-delay for the
// markers whose record is gone, then deletes them (docs/design/etcd.md,
// "Lock-delay").
func (a *acquisition) delay(ctx context.Context) error {
	d := a.l.opts.LockDelay
	if d <= 0 {
		return nil
	}
	if a.seen.IsZero() {
		// No read of the markers confirmed this grant: read them now.
		if _, err := a.confirm(ctx); err != nil {
			return err
		}
	}
	if len(a.stale) == 0 {
		return nil
	}
	a.l.opts.Logger.Info("etcdlock: lock-delay: an earlier acquisition did not end with a clean release; waiting", "name", a.name, "delay", d)
	if err := clock.Sleep(ctx, time.Until(a.seen.Add(d)), a.l.g.closing.Done(), a.s.done, a.s.lostErr); err != nil {
		return err
	}
	_, err := a.confirm(ctx, a.stale...)
	return err
}
