package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/secure"
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
		h, err := l.holder(ctx, l.parent(name))
		if err == nil {
			if h.Token == 0 {
				return h, fmt.Errorf("zklock: holder %q: %w", name, lock.ErrNotHeld)
			}
			return h, nil
		}
		if isConnErr(err) {
			if err := l.ss.awaitConnected(ctx, nil); err != nil {
				return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, secure.Refusal(err, isRefusal))
			}
			continue
		}
		return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, secure.Refusal(err, isRefusal))
	}
}

// holderOf returns the holder a lock znode stands for, from its child
// name, data and stat.
func holderOf(child string, data []byte, st *zk.Stat) lock.Holder {
	r := requestOf(child)
	return lock.Holder{Identity: string(data), Token: fencing.Token(st.Czxid), Shared: r.Shared(), Limit: r.Limit}
}

// holder reads the lowest znode under parent; a zero Holder means none.
func (l *Locker) holder(ctx context.Context, parent string) (lock.Holder, error) {
	for {
		if err := l.syncWith(ctx, parent); err != nil {
			return lock.Holder{}, err
		}
		kids, err := call(ctx, l.g, nil, childrenOf(l.conn, parent))
		if errors.Is(err, zk.ErrNoNode) {
			return lock.Holder{}, nil
		}
		if err != nil {
			return lock.Holder{}, err
		}
		q := queueOf(kids.names)
		if len(q) == 0 {
			return lock.Holder{}, nil
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
			return lock.Holder{}, err
		}
		return holderOf(q[0], r.data, r.stat), nil
	}
}
