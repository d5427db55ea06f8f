package etcdlock

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.QueueLister = (*Locker)(nil)

// Queue returns every request of name in queue order, holders first (see
// [lock.QueueLister]). It is one linearizable read of name's records, the
// read [Locker.Holders] makes. Each entry's Since is the zero Time: etcd
// keeps no creation time for a key, and a record's value is its holder's
// identity alone, so the order and the tokens (create revisions) are all
// there is to tell when a request was made.
func (l *Locker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("etcdlock: queue %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("etcdlock: queue: %w", err)
	}
	kvs, err := l.readQueue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: queue %q: %w", name, err)
	}
	q := requestsOf(kvs)
	es := make([]lock.QueueEntry, len(kvs))
	for i, kv := range kvs {
		es[i] = lock.QueueEntry{Holder: holderOf(kv), Held: queue.Admitted(q, i), Position: i}
	}
	return es, nil
}

// readQueue reads name's records, keys and values, in queue order, for
// Holders and Queue.
func (l *Locker) readQueue(ctx context.Context, name string) ([]*mvccpb.KeyValue, error) {
	if l.isClosed() {
		return nil, lock.ErrClosed
	}
	cctx, cancel := l.withClosing(ctx)
	defer cancel()
	var resp *clientv3.GetResponse
	err := l.call(cctx, nil, func(ctx context.Context) error {
		var err error
		resp, err = l.client.Get(ctx, l.namePrefix(name), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return err
	})
	if err != nil {
		if ctx.Err() == nil && l.g.closing.Err() != nil {
			err = lock.ErrClosed
		}
		return nil, err
	}
	return resp.Kvs, nil
}
