package lock

import (
	"context"
	"fmt"
	"time"
)

// QueueLister is implemented by Lockers that can list a name's whole queue:
// holders and waiters, in the order the rules on [SharedLocker] serve them.
type QueueLister interface {
	// Queue returns every request of name that has a record, in queue
	// (token) order, holders first; an empty list for a name nobody holds
	// or waits for. It is one read of the backend, which may have changed a
	// moment later; a record being refused (see ErrIncompatible) may
	// appear for a moment.
	Queue(ctx context.Context, name string) ([]QueueEntry, error)
}

// QueueEntry is one request in a name's queue, as [QueueLister.Queue]
// lists it.
type QueueEntry struct {
	// Holder is the request's identity, token (fixed when its record was
	// created, so waiters have tokens too) and kind.
	Holder
	// Held reports whether the request is granted.
	Held bool
	// Position is the request's place in the queue, from 0: the number of
	// requests of the name ahead of it.
	Position int
	// Since is when the request's record was created, by the backend's
	// clock (ZooKeeper's znode ctime, in milliseconds); the zero Time
	// where the backend does not record it (etcd).
	Since time.Time
}

// Candidates returns the election's candidates in the order they are
// served, the leader first: [QueueLister.Queue] on the election's lock,
// or an error wrapping [ErrInvalidConfig] if the Locker is not a
// QueueLister. Like [Election.Leader], it may already have changed.
func (e *Election) Candidates(ctx context.Context) ([]QueueEntry, error) {
	if err := e.check(ctx, "candidates"); err != nil {
		return nil, err
	}
	ql, ok := e.l.(QueueLister)
	if !ok {
		return nil, fmt.Errorf("lock: election %q: candidates: %w: %T does not implement lock.QueueLister", e.name, ErrInvalidConfig, e.l)
	}
	return ql.Queue(ctx, e.name)
}
