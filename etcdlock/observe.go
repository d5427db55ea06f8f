package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/lock"
)

// Observe sends the current holder of name, then every change of holder,
// in order, until ctx is done, the Locker closes, or the watch fails. A zero
// Holder (Token 0) means the lock is free. The channel is unbuffered and
// closed at the end; the returned function then tells why (ctx's error, an
// error wrapping [lock.ErrClosed], or the watch's failure).
//
// It reads the holder once and then follows a watch on name's records, so
// it costs no polling. When the holder's record is deleted, the next holder
// is read at the revision of that deletion, so no holder between two events
// is skipped. A watch that the server cancels (for instance because the
// revisions it needs were compacted) ends the observation with an error.
// The read of the next holder is retried like [Locker.Holder]'s, each
// attempt bounded; every request of the observation ends when ctx is done
// or Close starts, so Close never waits on an unreachable cluster.
func (l *Locker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.usable(ctx); err != nil {
		return nil, nil, fmt.Errorf("etcdlock: observe %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return nil, nil, fmt.Errorf("etcdlock: observe: %w", err)
	}
	if l.isClosed() {
		return nil, nil, fmt.Errorf("etcdlock: observe %q: %w", name, lock.ErrClosed)
	}
	pfx := l.namePrefix(name)
	cctx, ccancel := l.withClosing(ctx)
	defer ccancel()
	var first *clientv3.GetResponse
	err := l.call(cctx, nil, func(ctx context.Context) error {
		var err error
		first, err = l.client.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcdlock: observe %q: %w", name, err)
	}
	ch := make(chan lock.Holder)
	var (
		mu     sync.Mutex
		endErr error
	)
	// Everything the goroutine sends to the cluster uses wctx, which ends
	// with ctx and when Close starts, never with ctx alone: Close waits for
	// the goroutine, so a request that only the caller could end would hold
	// Close for as long as the cluster does not answer.
	wctx, cancel := context.WithCancel(l.life)
	stop := context.AfterFunc(ctx, cancel)
	stopClosing := context.AfterFunc(l.closing, cancel)
	ok := l.spawn(func() {
		defer stop()
		defer stopClosing()
		defer cancel()
		err := l.observe(ctx, wctx, pfx, first, ch)
		mu.Lock()
		endErr = fmt.Errorf("etcdlock: observe %q: %w", name, err)
		mu.Unlock()
		close(ch)
	})
	if !ok {
		stop()
		stopClosing()
		cancel()
		return nil, nil, fmt.Errorf("etcdlock: observe %q: %w", name, lock.ErrClosed)
	}
	return ch, func() error {
		mu.Lock()
		defer mu.Unlock()
		return endErr
	}, nil
}

func firstHolder(resp *clientv3.GetResponse) (lock.Holder, string) {
	if len(resp.Kvs) == 0 {
		return lock.Holder{}, ""
	}
	return holderOf(resp.Kvs[0]), string(resp.Kvs[0].Key)
}

// observation is one Observe's state: the holder last sent and the key
// of its record.
type observation struct {
	l        *Locker
	ctx      context.Context // the caller's
	wctx     context.Context // ends with ctx and with Close
	pfx      string
	ch       chan<- lock.Holder
	cur      lock.Holder
	curKey   string
	firstRev int64
}

func (l *Locker) observe(ctx, wctx context.Context, pfx string, first *clientv3.GetResponse, ch chan<- lock.Holder) error {
	o := &observation{l: l, ctx: ctx, wctx: wctx, pfx: pfx, ch: ch, firstRev: first.Header.Revision}
	o.cur, o.curKey = firstHolder(first)
	if err := o.send(); err != nil {
		return err
	}
	wch := l.client.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(o.firstRev+1))
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.closing.Done():
			return lock.ErrClosed
		case wr, ok = <-wch:
		}
		switch {
		case !ok:
			return l.observeEnd(ctx, lock.ErrClosed)
		case wr.Err() != nil:
			return l.observeEnd(ctx, wr.Err())
		case wr.Canceled:
			return errors.New("watch cancelled by the server")
		}
		for _, ev := range wr.Events {
			if err := o.event(ev); err != nil {
				return err
			}
		}
	}
}

// send sends the current holder.
func (o *observation) send() error {
	select {
	case o.ch <- o.cur:
		return nil
	case <-o.ctx.Done():
		return o.ctx.Err()
	case <-o.l.closing.Done():
		return lock.ErrClosed
	}
}

// event takes one change of the lock's records and sends the holder it
// leads to, if that is a new one.
func (o *observation) event(ev *clientv3.Event) error {
	var next lock.Holder
	var nextKey string
	switch {
	case ev.Type == clientv3.EventTypePut && o.curKey == "" && ev.IsCreate():
		next, nextKey = holderOf(ev.Kv), string(ev.Kv.Key)
	case ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == o.curKey:
		// Each attempt is bounded too (see call), so a member that
		// stopped answering is left for another.
		var resp *clientv3.GetResponse
		err := o.l.call(o.wctx, nil, func(actx context.Context) error {
			var err error
			resp, err = o.l.client.Get(actx, o.pfx, append(clientv3.WithFirstCreate(), clientv3.WithRev(ev.Kv.ModRevision))...)
			return err
		})
		if err != nil {
			return o.l.observeEnd(o.ctx, fmt.Errorf("read the next holder: %w", err))
		}
		next, nextKey = firstHolder(resp)
	default:
		return nil
	}
	if next == o.cur {
		return nil
	}
	o.cur, o.curKey = next, nextKey
	return o.send()
}

// observeEnd returns why an observation ended when a request or the watch
// failed: ctx's error if ctx is done, lock.ErrClosed if the Locker is
// closing (wctx ends with both), and err otherwise.
func (l *Locker) observeEnd(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case l.closing.Err() != nil:
		return lock.ErrClosed
	}
	return err
}
