package locktest

import (
	"context"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.QueueLister = (*MemLocker)(nil)

// Queue implements [lock.QueueLister]: every record of name in creation
// order, the admitted ones marked Held, each with the time it was created.
func (l *MemLocker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	if err := l.enter(ctx, "queue", name); err != nil {
		return nil, err
	}
	defer l.m.mu.Unlock()
	q := l.m.queues[name]
	rs := requests(q)
	es := make([]lock.QueueEntry, len(q))
	for i, r := range q {
		es[i] = lock.QueueEntry{Holder: r.holder(), Held: queue.Admitted(rs, i), Position: i, Since: r.since}
	}
	return es, nil
}
