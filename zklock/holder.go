package zklock

import (
	"context"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

// Holder implements [lock.Locker] after a sync: the answer shows every
// grant and release made before the call.
func (l *Locker) Holder(ctx context.Context, name string) (lock.Holder, error) {
	zs, err := l.read(ctx, "holder", name, func(_ []queue.Request, i int) bool { return i == 0 })
	if err != nil {
		return lock.Holder{}, err
	}
	if len(zs) == 0 {
		return lock.Holder{}, fmt.Errorf("zklock: holder %q: %w", name, lock.ErrNotHeld)
	}
	return zs[0].holder(), nil
}

// holderOf returns the holder a lock znode stands for, from its child
// name, data and stat.
func holderOf(child string, data []byte, st *zk.Stat) lock.Holder {
	r, _ := parseChild(child)
	return lock.Holder{Identity: string(data), Token: fencing.Token(st.Czxid), Shared: r.Shared(), Limit: r.Limit}
}
