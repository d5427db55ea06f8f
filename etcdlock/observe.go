package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lock"
)

// Observe implements [lock.Observer] with a watch on name's records; the
// channel is unbuffered. It sees every change across lost connections and
// leader changes, but not the revisions compacted before it read them
// (docs/design/etcd.md, "What Observe reports").
func (l *Locker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	first, err := l.readRecords(ctx, "observe", name, clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, nil, err
	}
	o := &observation{l: l, ctx: ctx, pfx: l.namePrefix(name), ch: make(chan lock.Holder), rev: first.Header.Revision}
	o.cur, o.curKey = firstHolder(first)
	// Close waits for the goroutine: its requests end when Close starts.
	var cancel context.CancelFunc
	o.wctx, cancel = l.withClosing(ctx)
	if !l.spawn(func() {
		defer cancel()
		err := o.run()
		o.mu.Lock()
		o.err = fmt.Errorf("etcdlock: observe %q: %w", name, err)
		o.mu.Unlock()
		close(o.ch)
	}) {
		cancel()
		return nil, nil, fmt.Errorf("etcdlock: observe %q: %w", name, lock.ErrClosed)
	}
	return o.ch, o.error, nil
}

func firstHolder(resp *clientv3.GetResponse) (lock.Holder, string) {
	if len(resp.Kvs) == 0 {
		return lock.Holder{}, ""
	}
	return holderOf(resp.Kvs[0]), string(resp.Kvs[0].Key)
}

// observation is one Observe's state: the holder last sent, the key of
// its record, and the revision up to which it has seen every event.
type observation struct {
	l      *Locker
	ctx    context.Context // the caller's
	wctx   context.Context // ends with ctx and when Close starts
	pfx    string
	ch     chan lock.Holder
	cur    lock.Holder
	curKey string
	rev    int64

	mu  sync.Mutex
	err error // why it ended
}

func (o *observation) error() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// errResync says that the events since o.rev are gone: read the holder.
var errResync = errors.New("events compacted")

// observeBackoffMax caps the pause between two watches that failed.
const observeBackoffMax = 2 * time.Second

func (o *observation) run() error {
	if err := o.send(); err != nil {
		return err
	}
	backoff := time.Duration(0)
	for {
		progressed, err := o.follow()
		if stop := o.stopped(); stop != nil {
			return stop
		}
		if progressed {
			backoff = 0
		}
		if errors.Is(err, errResync) {
			o.l.opts.Logger.Info("etcdlock: observe: events compacted; reading the current holder", "prefix", o.pfx, "revision", o.rev, "err", err)
			// On failure o.rev stays, so the next watch fails and reads again.
			if resp, err := o.readHolder(); err == nil {
				o.rev = resp.Header.Revision
			} else if stop := o.stopped(); stop != nil {
				return stop
			} else {
				o.l.opts.Logger.Warn("etcdlock: observe: cannot read the current holder; retrying", "prefix", o.pfx, "err", err)
			}
		} else {
			o.l.opts.Logger.Debug("etcdlock: observe: watch ended; watching again", "prefix", o.pfx, "from_revision", o.rev+1, "err", err)
		}
		if err := clock.Sleep(o.ctx, backoff, o.l.g.closing.Done(), nil, nil); err != nil {
			return err
		}
		backoff = min(max(2*backoff, retryDelay), observeBackoffMax)
	}
}

// stopped returns why the observation must end, or nil while it goes on.
func (o *observation) stopped() error {
	switch {
	case o.ctx.Err() != nil:
		return o.ctx.Err()
	case o.l.g.closing.Err() != nil:
		return lock.ErrClosed
	}
	return nil
}

// follow watches the records from o.rev+1 and sends the changes of holder
// it sees until the watch ends; progressed says the watch delivered any.
func (o *observation) follow() (progressed bool, err error) {
	// Its own context releases the client's watcher however it ends; a
	// member cut off from the leader cancels it rather than go silent.
	fctx, cancel := context.WithCancel(clientv3.WithRequireLeader(o.wctx))
	defer cancel()
	wch := o.l.client.Watch(fctx, o.pfx, clientv3.WithPrefix(), clientv3.WithRev(o.rev+1))
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-o.wctx.Done():
			return progressed, o.wctx.Err()
		case wr, ok = <-wch:
		}
		switch {
		case !ok:
			return progressed, errors.New("watch channel closed")
		case wr.CompactRevision != 0 || errors.Is(wr.Err(), rpctypes.ErrCompacted):
			return progressed, fmt.Errorf("%w: watch from revision %d, compacted up to %d", errResync, o.rev+1, wr.CompactRevision)
		case wr.Err() != nil:
			return progressed, wr.Err()
		case wr.Canceled:
			return progressed, errors.New("watch cancelled by the server")
		}
		progressed = true
		for _, ev := range wr.Events {
			if err := o.event(ev); err != nil {
				return progressed, err
			}
			o.rev = ev.Kv.ModRevision
		}
	}
}

func (o *observation) send() error {
	select {
	case o.ch <- o.cur:
		return nil
	case <-o.wctx.Done():
		return o.stopped()
	}
}

// move sends next as the holder unless it is the one last sent.
func (o *observation) move(next lock.Holder, nextKey string) error {
	if next == o.cur {
		o.curKey = nextKey
		return nil
	}
	o.cur, o.curKey = next, nextKey
	return o.send()
}

// event takes one change of the lock's records and sends any new holder.
func (o *observation) event(ev *clientv3.Event) error {
	switch {
	case ev.Type == clientv3.EventTypePut && o.curKey == "" && ev.IsCreate():
		return o.move(holderOf(ev.Kv), string(ev.Kv.Key))
	case ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == o.curKey:
		// Read at the deletion's revision, so that no holder is skipped.
		if _, err := o.readHolder(clientv3.WithRev(ev.Kv.ModRevision)); err != nil {
			if stop := o.stopped(); stop != nil {
				return stop
			}
			// Compacted or refused: read the current state instead.
			return fmt.Errorf("%w: read the next holder at revision %d: %w", errResync, ev.Kv.ModRevision, err)
		}
	}
	return nil
}

// readHolder reads the holder (at the revision opts give, else the
// current one) and sends it if it is not the one last sent.
func (o *observation) readHolder(opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := o.l.get(o.wctx, nil, o.pfx, append(clientv3.WithFirstCreate(), opts...)...)
	if err != nil {
		return nil, err
	}
	return resp, o.move(firstHolder(resp))
}
