package guardtest

import (
	"context"
	"fmt"
	"slices"

	"github.com/fencelock/fencelock/lock"
)

// grantKind is one kind of grant the paused-holder scenario runs with: A
// holds one, is paused with a write in flight, loses it, and B is granted
// the kind that takes A's place.
type grantKind struct {
	name string
	// a and b acquire A's and B's grants.
	a, b acquireFunc
	// other, when set, is a third Locker's grant, taken before A's and
	// held throughout: a concurrent holder whose guarded writes must keep
	// working after B's.
	other acquireFunc
	// writers are the names of the writers that protect this kind.
	writers []string
}

type acquireFunc func(ctx context.Context, l lock.Locker, name string) (lock.Lease, error)

func exclusiveGrant(ctx context.Context, l lock.Locker, name string) (lock.Lease, error) {
	return l.Acquire(ctx, name)
}

func sharedGrant(ctx context.Context, l lock.Locker, name string) (lock.Lease, error) {
	s, ok := l.(lock.SharedLocker)
	if !ok {
		return nil, fmt.Errorf("%T is not a lock.SharedLocker", l)
	}
	return s.AcquireShared(ctx, name)
}

// permitGrant takes one of two permits.
func permitGrant(ctx context.Context, l lock.Locker, name string) (lock.Lease, error) {
	s, ok := l.(lock.Semaphore)
	if !ok {
		return nil, fmt.Errorf("%T is not a lock.Semaphore", l)
	}
	return s.AcquireSemaphore(ctx, name, 2)
}

// grantKinds says which writer protects what (the fencing package doc
// explains why):
//
//   - an exclusive grant: the token (fenced) and the lease's record
//     (guarded);
//   - a reader paused while a writer takes over: both as well, since a
//     writer's token exceeds that of every reader admitted before it;
//   - a semaphore permit: only the record. Permits are held at once, so
//     a token check would refuse the writes of the holder with the lower
//     token while it still holds its permit.
var grantKinds = []grantKind{
	{name: "exclusive", a: exclusiveGrant, b: exclusiveGrant, writers: []string{"fenced", "guarded", "unguarded control"}},
	{name: "reader then writer", a: sharedGrant, b: exclusiveGrant, writers: []string{"fenced", "guarded", "unguarded control"}},
	{name: "permit", a: permitGrant, b: permitGrant, other: permitGrant, writers: []string{"guarded", "unguarded control"}},
}

func (k grantKind) protects(writer string) bool { return slices.Contains(k.writers, writer) }
