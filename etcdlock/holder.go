package etcdlock

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// Holder implements [lock.Locker] with one linearizable read.
func (l *Locker) Holder(ctx context.Context, name string) (lock.Holder, error) {
	resp, err := l.readRecords(ctx, "holder", name, clientv3.WithFirstCreate()...)
	if err != nil {
		return lock.Holder{}, err
	}
	if len(resp.Kvs) == 0 {
		return lock.Holder{}, fmt.Errorf("etcdlock: holder %q: %w", name, lock.ErrNotHeld)
	}
	return holderOf(resp.Kvs[0]), nil
}

func holderOf(kv *mvccpb.KeyValue) lock.Holder {
	r := requestOf(kv.Key)
	return lock.Holder{Identity: string(kv.Value), Token: fencing.Token(kv.CreateRevision), Shared: r.Shared(), Limit: r.Limit}
}
