package lock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/nilcheck"
)

// MultiLocker is implemented by Lockers that acquire several names at once
// natively; [AcquireAll] and [TryAcquireAll] use it when present. Both
// methods get valid, distinct names in sorted order and return one lease
// per name in that order, or an error and no record.
type MultiLocker interface {
	AcquireAll(ctx context.Context, names []string) ([]Lease, error)
	TryAcquireAll(ctx context.Context, names []string) ([]Lease, error)
}

// AcquireAll blocks until it holds every lock of names through l, and
// returns them as one [MultiLease], or returns an error and holds none.
// Callers asking for overlapping sets, in any order, never deadlock: a
// [MultiLocker] creates the records of all names in one atomic step and
// waits in the order that step fixes (see the backend); any other Locker
// is asked for the names one by one in sorted order. Each name keeps its
// own queue and token, so a plain Acquire of one of them waits as usual.
// Sets that overlap must all be taken through AcquireAll on the same
// backend: a caller holding one name while it acquires another (nested
// Acquire calls, or a Locker wrapped so that it hides its MultiLocker)
// can deadlock with them.
//
// Errors are those of [Locker.Acquire], and an error wrapping
// [ErrInvalidConfig] for a nil ctx or Locker, no names, or a name given
// twice, or [ErrInvalidName] for an invalid name; in every case nothing is
// acquired.
func AcquireAll(ctx context.Context, l Locker, names ...string) (*MultiLease, error) {
	return acquireAll(ctx, l, "acquire all", names, MultiLocker.AcquireAll, Locker.Acquire)
}

// TryAcquireAll is [AcquireAll] without waiting: if any of names is held it
// returns an error wrapping [ErrLocked] and holds none.
func TryAcquireAll(ctx context.Context, l Locker, names ...string) (*MultiLease, error) {
	return acquireAll(ctx, l, "try acquire all", names, MultiLocker.TryAcquireAll, Locker.TryAcquire)
}

func acquireAll(ctx context.Context, l Locker, op string, names []string,
	all func(MultiLocker, context.Context, []string) ([]Lease, error),
	one func(Locker, context.Context, string) (Lease, error)) (*MultiLease, error) {
	sorted := slices.Sorted(slices.Values(names))
	var err error
	switch {
	case ctx == nil:
		err = fmt.Errorf("%w: nil context", ErrInvalidConfig)
	case nilcheck.IsNil(l):
		err = fmt.Errorf("%w: nil Locker", ErrInvalidConfig)
	case len(names) == 0:
		err = fmt.Errorf("%w: no names", ErrInvalidConfig)
	}
	for i := 0; i < len(sorted) && err == nil; i++ {
		if err = ValidateName(sorted[i]); err == nil && i > 0 && sorted[i] == sorted[i-1] {
			err = fmt.Errorf("%w: name %q given twice", ErrInvalidConfig, sorted[i])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %s %q: %w", op, names, err)
	}
	var leases []Lease
	if m, ok := l.(MultiLocker); ok {
		leases, err = all(m, ctx, sorted)
		if err == nil && (len(leases) != len(sorted) || slices.ContainsFunc(leases, func(le Lease) bool { return nilcheck.IsNil(le) })) {
			err = fmt.Errorf("lock: %s %q: %w: a MultiLocker returned %d leases for %d names, or a nil one",
				op, sorted, ErrInvalidConfig, len(leases), len(sorted))
		}
	} else {
		for i := 0; i < len(sorted) && err == nil; i++ {
			var le Lease
			if le, err = one(l, ctx, sorted[i]); err == nil {
				leases = append(leases, le)
			}
		}
	}
	if err != nil {
		for _, le := range leases {
			if !nilcheck.IsNil(le) {
				_ = release(ctx, le, DefaultDoReleaseTimeout)
			}
		}
		return nil, err
	}
	return newMultiLease(leases), nil
}

// MultiLease holds several locks, acquired together by [AcquireAll]. Its
// methods are safe for concurrent use.
//
// It ends exactly once: by Release, or when any of its leases ends
// otherwise (lost, or its Locker closed). Done is then closed and Err
// tells which; on a loss the other leases are released at once, so a
// lost name does not keep the others held.
type MultiLease struct {
	leases  []Lease
	stop    chan struct{} // closed by the first Release
	done    chan struct{}
	watched chan struct{} // closed when watch returns
	once    sync.Once
	mu      sync.Mutex // serializes the end
	err     error      // set before done is closed
}

func newMultiLease(leases []Lease) *MultiLease {
	m := &MultiLease{leases: leases, stop: make(chan struct{}), done: make(chan struct{}), watched: make(chan struct{})}
	go m.watch()
	return m
}

// watch ends m when one of its leases ends before Release is called.
func (m *MultiLease) watch() {
	defer close(m.watched)
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.stop)}}
	for _, le := range m.leases {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(le.Done())})
	}
	i, _, _ := reflect.Select(cases)
	if i == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.end(context.Background(), m.leases[i-1].Err())
}

// end closes done with err, or with an error wrapping ErrReleased if err
// is nil, and then releases every lease, returning the releases' errors:
// as a lease's Done closes before its record goes, since a waiter may be
// granted a name as soon as its release is applied. m.mu is held.
func (m *MultiLease) end(ctx context.Context, err error) error {
	if err == nil {
		err = fmt.Errorf("lock: leases of %q: %w", m.Names(), ErrReleased)
	}
	m.err = err
	close(m.done)
	var errs []error
	for _, le := range m.leases {
		if rerr := release(ctx, le, DefaultDoReleaseTimeout); rerr != nil && !errors.Is(rerr, ErrReleased) {
			errs = append(errs, rerr)
		}
	}
	return errors.Join(errs...)
}

// Names returns the names of the locks held, sorted.
func (m *MultiLease) Names() []string {
	names := make([]string, len(m.leases))
	for i, le := range m.leases {
		names[i] = le.Name()
	}
	return names
}

// Leases returns the lease of each name, in the order of Names. Each
// carries its name's token: hand it to the resource that name protects.
func (m *MultiLease) Leases() []Lease { return slices.Clone(m.leases) }

// Token returns the fencing token of the lease of name, or zero if name
// is not one of m's.
func (m *MultiLease) Token(name string) fencing.Token {
	for _, le := range m.leases {
		if le.Name() == name {
			return le.Token()
		}
	}
	return 0
}

// Done returns a channel closed when m ends: right after the first of its
// leases' Done channels, on a loss.
func (m *MultiLease) Done() <-chan struct{} { return m.done }

// Err returns nil while every lease is held; afterwards the error of the
// lease that ended first (wrapping [ErrLost] for a loss), or an error
// wrapping [ErrReleased] after Release.
func (m *MultiLease) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

// Release releases every lease, even if ctx is done (each on a context
// bounded by [DefaultDoReleaseTimeout]), and returns their errors joined.
// Releasing an ended MultiLease returns Err: wrapping [ErrReleased] or
// [ErrLost]. A nil m or ctx is an error wrapping [ErrInvalidConfig].
func (m *MultiLease) Release(ctx context.Context) error {
	if m == nil || ctx == nil {
		return fmt.Errorf("lock: release all: %w: nil MultiLease or context", ErrInvalidConfig)
	}
	m.once.Do(func() { close(m.stop) })
	<-m.watched
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		return m.err
	default:
		return m.end(ctx, nil)
	}
}
