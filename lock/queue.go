package lock

import (
	"context"
	"fmt"
	"time"
)

// QueueLister is implemented by Lockers that can show a name's whole
// queue: the holders and the waiters, in the order the rules on
// [SharedLocker] serve them. Like [Observer] it is found by a type
// assertion on a Locker.
type QueueLister interface {
	// Queue returns every request of name that has a record, in queue
	// order (which is token order): the holders first (the one exclusive
	// grant, or the shared grants or semaphore permits, as [HolderLister]
	// lists them), then the waiters in the order they will be served. A
	// name nobody holds or waits for gives an empty list and a nil error.
	//
	// The list is one read of the backend: a request may have joined,
	// been granted or left a moment later. A request whose Acquire has
	// not returned yet (its record just created, or just admitted) is
	// listed as the backend sees it. A record that is being refused (see
	// ErrIncompatible on [SharedLocker]) may appear for a moment.
	Queue(ctx context.Context, name string) ([]QueueEntry, error)
}

// QueueEntry is one request in a name's queue, as [QueueLister.Queue]
// lists it.
type QueueEntry struct {
	// Holder is the request's Locker identity, its token (fixed when its
	// record was created, so waiters have tokens too), and its kind:
	// Shared for a shared request or a semaphore permit, Limit for a
	// permit.
	Holder
	// Held reports whether the request is granted (a holder); false for
	// a waiter.
	Held bool
	// Position is the request's place in the queue, from 0: the number of
	// requests of the name ahead of it.
	Position int
	// Since is when the request's record was created, by the backend's
	// clock: ZooKeeper's ctime of the znode (milliseconds), the time of
	// the call in locktest.Memory. It is the zero Time where the backend
	// does not record it (etcd keeps no creation time; see etcdlock).
	Since time.Time
}

// Candidates returns the election's candidates in the order they are
// served: the leader first (Held), then the candidates waiting for their
// term. It is [QueueLister.Queue] on the election's lock, and returns an
// error wrapping [ErrInvalidConfig] if the Locker does not implement
// QueueLister. Like [Election.Leader], it reports what the backend said,
// which may already have changed.
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
