package etcdlock

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
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

// markerOps are the operations a create transaction adds with a
// lock-delay: the put of the acquisition's marker, then delayReads. The
// marker is written with the record, so a clean Release, which deletes
// both in one transaction, leaves no marker, and any other end of the
// record leaves one.
func (a *acquisition) markerOps() []clientv3.Op {
	if a.marker == "" {
		return nil
	}
	return append([]clientv3.Op{clientv3.OpPut(a.marker, a.l.opts.Identity)}, a.delayReads()...)
}

// delayReads are the reads that every read that can confirm a grant ends
// with when the Locker has a lock-delay: the keys of the name's markers,
// then of its records, at the same revision as the rest of the read.
func (a *acquisition) delayReads() []clientv3.Op {
	if a.marker == "" {
		return nil
	}
	return []clientv3.Op{
		clientv3.OpGet(a.l.delayPrefix(a.name), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(a.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
}

// noteDelayReads keeps the answers of delayReads, the last two of rs, for
// delay.
func (a *acquisition) noteDelayReads(rs []*etcdserverpb.ResponseOp) {
	if a.marker == "" || len(rs) < 2 {
		return
	}
	a.seen = time.Now()
	a.markers = a.markers[:0]
	for _, kv := range rs[len(rs)-2].GetResponseRange().Kvs {
		a.markers = append(a.markers, string(kv.Key))
	}
	a.records = make(map[string]bool)
	for _, kv := range rs[len(rs)-1].GetResponseRange().Kvs {
		a.records[strings.TrimPrefix(string(kv.Key), a.pfx)] = true
	}
}

// delay runs, when the Locker has a lock-delay, between the confirmation
// of a grant and the lease's start: for markers whose record is gone in
// the confirming read (delayReads), it waits the lock-delay from that
// read's answer, then deletes them guarded by its record. With no such
// marker it sends nothing. See docs/design/etcd.md, "Lock-delay".
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
	dp := a.l.delayPrefix(a.name)
	var stale []clientv3.Op
	for _, k := range a.markers {
		if k != a.marker && !a.records[strings.TrimPrefix(k, dp)] {
			stale = append(stale, clientv3.OpDelete(k))
		}
	}
	if len(stale) == 0 {
		return nil
	}
	a.l.opts.Logger.Info("etcdlock: lock-delay: an earlier acquisition did not end with a clean release; waiting", "name", a.name, "delay", d)
	if err := clock.Sleep(ctx, time.Until(a.seen.Add(d)), a.l.g.closing.Done(), a.s.done, a.s.lostErr); err != nil {
		return err
	}
	_, err := a.confirm(ctx, stale...)
	return err
}
