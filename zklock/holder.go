package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Observer = (*Locker)(nil)

// Holder reports the identity and token of the lowest znode of name, or an
// error wrapping [lock.ErrNotHeld] when there is none. The server the
// connection is on first catches up with the leader (a sync), so the
// answer shows every grant and release made before the call.
func (l *Locker) Holder(ctx context.Context, name string) (lock.Holder, error) {
	if err := l.usable(ctx); err != nil {
		return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return lock.Holder{}, fmt.Errorf("zklock: holder: %w", err)
	}
	if err := l.enter(); err != nil {
		return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, err)
	}
	defer l.leave()
	for {
		h, _, err := l.holder(ctx, l.parent(name), false)
		if err == nil {
			if h.Token == 0 {
				return h, fmt.Errorf("zklock: holder %q: %w", name, lock.ErrNotHeld)
			}
			return h, nil
		}
		if isConnErr(err) {
			if err := l.ss.awaitConnected(ctx, nil); err != nil {
				return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, permission(err))
			}
			continue
		}
		return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, permission(err))
	}
}

// holderOf returns the holder a lock znode stands for, from its child
// name, data and stat.
func holderOf(child string, data []byte, st *zk.Stat) lock.Holder {
	r := requestOf(child)
	return lock.Holder{Identity: string(data), Token: fencing.Token(st.Czxid), Shared: r.Shared(), Limit: r.Limit}
}

// holder reads the lowest znode under parent; a zero Holder means none.
// With watch it also returns a channel that fires when parent's children
// change (or, if parent does not exist, when it is created).
func (l *Locker) holder(ctx context.Context, parent string, watch bool) (lock.Holder, <-chan zk.Event, error) {
	for {
		var (
			names []string
			w     <-chan zk.Event
			err   error
		)
		if watch {
			type cw struct {
				names []string
				w     <-chan zk.Event
			}
			var r cw
			r, err = call(ctx, l.g, nil, func() (cw, error) {
				n, _, w, err := l.conn.ChildrenW(parent)
				return cw{n, w}, err
			})
			names, w = r.names, r.w
			if errors.Is(err, zk.ErrNoNode) {
				var e exists
				e, err = call(ctx, l.g, nil, existsW(l.conn, parent))
				if err == nil && e.ok {
					continue // created meanwhile
				}
				return lock.Holder{}, e.watch, err
			}
		} else {
			if err := l.syncWith(ctx, parent); err != nil {
				return lock.Holder{}, nil, err
			}
			var r children
			r, err = call(ctx, l.g, nil, childrenOf(l.conn, parent))
			names = r.names
			if errors.Is(err, zk.ErrNoNode) {
				return lock.Holder{}, nil, nil
			}
		}
		if err != nil {
			return lock.Holder{}, nil, err
		}
		q := queueOf(names)
		if len(q) == 0 {
			return lock.Holder{}, w, nil
		}
		type gd struct {
			data []byte
			stat *zk.Stat
		}
		r, err := call(ctx, l.g, nil, func() (gd, error) {
			d, st, err := l.conn.Get(parent + "/" + q[0])
			return gd{d, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return lock.Holder{}, nil, err
		}
		return holderOf(q[0], r.data, r.stat), w, nil
	}
}
