package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.QueueLister = (*Locker)(nil)

// Queue returns every request of name in queue order, holders first (see
// [lock.QueueLister]). It lists name's znodes and reads them all, in one
// pipelined round trip after the listing, as [Locker.Holders] reads the
// admitted ones; if one of them goes meanwhile, it reads again. Each
// entry's Since is its znode's ctime, the clock of the server that was
// leader when the request was made, to the millisecond. The server the
// connection is on first catches up with the leader (a sync), so the
// answer shows every change made before the call, as on etcd.
func (l *Locker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("zklock: queue %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("zklock: queue: %w", err)
	}
	if err := l.enter(); err != nil {
		return nil, fmt.Errorf("zklock: queue %q: %w", name, err)
	}
	defer l.leave()
	for {
		es, err := l.queue(ctx, l.parent(name), false)
		if err == nil && es != nil {
			return es, nil
		}
		if err != nil && !isConnErr(err) {
			return nil, fmt.Errorf("zklock: queue %q: %w", name, permission(err))
		}
		if err != nil {
			if err := l.ss.awaitConnected(ctx, nil); err != nil {
				return nil, fmt.Errorf("zklock: queue %q: %w", name, permission(err))
			}
		}
	}
}

// syncWith makes the server the connection is on catch up with the
// leader for parent, so that the reads that follow see every change
// committed before it: a Holder, Holders or Queue call right after
// another client's Release or grant shows it. It costs one round trip.
func (l *Locker) syncWith(ctx context.Context, parent string) error {
	_, err := call(ctx, l.g, nil, func() (string, error) { return l.conn.Sync(parent) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// queue reads every lock znode under parent, or with heldOnly the
// admitted ones only (what Holders reads). A nil list and a nil error
// mean that one of them went meanwhile: read again.
func (l *Locker) queue(ctx context.Context, parent string, heldOnly bool) ([]lock.QueueEntry, error) {
	if err := l.syncWith(ctx, parent); err != nil {
		return nil, err
	}
	kids, err := call(ctx, l.g, nil, childrenOf(l.conn, parent))
	if errors.Is(err, zk.ErrNoNode) {
		return []lock.QueueEntry{}, nil
	}
	if err != nil {
		return nil, err
	}
	q, reqs := lockQueue(kids.names)
	type gd struct {
		data []byte
		stat *zk.Stat
	}
	futures := make([]*future[gd], 0, len(q))
	for i, k := range q {
		if heldOnly && !queue.Admitted(reqs, i) {
			break // the admitted requests are a prefix of the queue
		}
		futures = append(futures, start(l.g, func() (gd, error) {
			d, st, err := l.conn.Get(parent + "/" + k)
			return gd{d, st}, err
		}, nil))
	}
	es := make([]lock.QueueEntry, 0, len(futures))
	var errs []error
	gone := false
	for i, f := range futures {
		r, err := f.wait(ctx, l.g, nil)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			gone = true
		case err != nil:
			errs = append(errs, err)
		default:
			es = append(es, lock.QueueEntry{
				Holder:   holderOf(q[i], r.data, r.stat),
				Held:     queue.Admitted(reqs, i),
				Position: i,
				Since:    time.UnixMilli(r.stat.Ctime),
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if gone {
		return nil, nil
	}
	return es, nil
}
