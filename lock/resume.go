package lock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/nilcheck"
)

// Ticket is a held grant written down for [Resume]: single-line text that
// starts with its backend's name and format version (etcdlock's Lease.
// Ticket says what it holds). It holds no credential, yet it takes the
// lock from its holder: keep it where only the holder's next process reads it.
type Ticket string

// Resumable is a lease a new process may take over. Ticket fails once it
// has ended, and on a backend that cannot resume (zklock) with an error
// wrapping [ErrUnsupported].
type Resumable interface{ Ticket() (Ticket, error) }

// Resumer is a Locker that may take a grant over, found by a type
// assertion like [Observer]: see [Resume].
type Resumer interface {
	Resume(ctx context.Context, name string, t Ticket) (Lease, error)
}

// Resume takes over through l the grant t names, from a holder that
// stopped without releasing it: same record and token, so resources take
// its writes as the old holder's, and no one else held the lock between.
// If the grant ended on the server, or another Resume of t won, the error
// wraps [ErrLost] and nothing is granted; a Locker that is no [Resumer],
// or cannot resume (zklock), gives [ErrUnsupported]; a nil ctx or l, or a ticket that is not one of
// name's, [ErrInvalidConfig]; an invalid name, [ErrInvalidName]. See the
// backend's Resume for an old holder still running.
func Resume(ctx context.Context, l Locker, name string, t Ticket) (Lease, error) {
	r, ok := l.(Resumer)
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("lock: resume %q: %w: nil context", name, ErrInvalidConfig)
	case nilcheck.IsNil(l):
		return nil, fmt.Errorf("lock: resume %q: %w: nil Locker", name, ErrInvalidConfig)
	case !ok:
		return nil, fmt.Errorf("lock: resume %q: %w: %T cannot resume a grant", name, ErrUnsupported, l)
	}
	return r.Resume(ctx, name, t)
}
