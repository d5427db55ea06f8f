package etcdlock

import (
	"bytes"
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.QueueLister = (*Locker)(nil)

// Queue implements [lock.QueueLister] with one linearizable read. Each
// entry's Since is the zero Time: etcd keeps no creation time for a key.
func (l *Locker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	return l.queue(ctx, "queue", name)
}

// queue reads name's records in queue order, for Queue and Holders, and
// prefixes its error for op.
func (l *Locker) queue(ctx context.Context, op, name string) ([]lock.QueueEntry, error) {
	resp, err := l.readRecords(ctx, op, name, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	q := requestsOf(resp.Kvs)
	es := make([]lock.QueueEntry, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		es[i] = lock.QueueEntry{Holder: holderOf(kv), Held: queue.Admitted(q, i), Position: i}
	}
	return es, nil
}

// readRecords is the one read of name's records, with opts, of a call
// that only reads them; its error is prefixed for op.
func (l *Locker) readRecords(ctx context.Context, op, name string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if err := l.begin(ctx, op, name); err != nil {
		return nil, err
	}
	var resp *clientv3.GetResponse
	err := l.bounded(ctx, func(ctx context.Context) (err error) {
		resp, err = l.get(ctx, nil, l.namePrefix(name), opts...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcdlock: %s %q: %w", op, name, err)
	}
	return resp, nil
}

// namePrefix returns the key prefix of name's records, which holds no other
// name's but with LayoutConcurrency (docs/design/etcd.md, "Layouts").
func (l *Locker) namePrefix(name string) string {
	if l.opts.layout == LayoutConcurrency {
		return l.opts.prefix + name + "/"
	}
	return l.opts.prefix + name + "/#"
}

// recordKey names one acquisition's record under pfx, name's prefix
// (docs/design/etcd.md, "Key layout").
func recordKey(pfx string, id clientv3.LeaseID, seq uint64, req queue.Request) string {
	key := fmt.Sprintf("%s%016x-%x", pfx, int64(id), seq)
	if tag := req.Tag(); tag != "" {
		key += "~" + tag
	}
	return key
}

// requestOf returns the kind of request a record's key names; a tag that
// does not parse counts as exclusive, which admits no one.
func requestOf(key []byte) queue.Request {
	_, tag, tagged := bytes.Cut(key[bytes.LastIndexByte(key, '#')+1:], []byte("~"))
	if r, ok := queue.ParseTag(string(tag)); tagged && ok {
		return r
	}
	return queue.ExclusiveRequest
}

func requestsOf(kvs []*mvccpb.KeyValue) []queue.Request {
	q := make([]queue.Request, len(kvs))
	for i, kv := range kvs {
		q[i] = requestOf(kv.Key)
	}
	return q
}
