package locktest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

// MemLocker is a [lock.Locker] on a [Memory], with every optional
// interface of package lock. It is safe for concurrent use. Holder and
// Observe report the earliest holder of a name (the lowest token).
type MemLocker struct {
	m         *Memory
	identity  string
	closing   chan struct{} // closed by Close when it starts
	closeOnce sync.Once     // whose Do returns to every caller once it is done
	wg        sync.WaitGroup

	// Guarded by m.mu.
	sess   *session // nil before the first Acquire and after expiry or Close
	closed bool
}

var (
	_ lock.Locker        = (*MemLocker)(nil)
	_ lock.Observer      = (*MemLocker)(nil)
	_ lock.SharedLocker  = (*MemLocker)(nil)
	_ lock.Semaphore     = (*MemLocker)(nil)
	_ lock.HolderLister  = (*MemLocker)(nil)
	_ lock.Revoker       = (*MemLocker)(nil)
	_ lock.QueueLister   = (*MemLocker)(nil)
	_ lock.HealthChecker = (*MemLocker)(nil)
)

// Identity returns the identity that Holder reports for l's leases.
func (l *MemLocker) Identity() string { return l.identity }

// Acquire implements [lock.Locker]; it is the write lock of AcquireShared.
func (l *MemLocker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire", name, queue.ExclusiveRequest, true)
}

// TryAcquire implements [lock.Locker].
func (l *MemLocker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire", name, queue.ExclusiveRequest, false)
}

// AcquireShared implements [lock.SharedLocker].
func (l *MemLocker) AcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire shared", name, queue.SharedRequest, true)
}

// TryAcquireShared implements [lock.SharedLocker].
func (l *MemLocker) TryAcquireShared(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire shared", name, queue.SharedRequest, false)
}

// AcquireSemaphore implements [lock.Semaphore].
func (l *MemLocker) AcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "acquire semaphore", name, queue.PermitRequest(limit), true)
}

// TryAcquireSemaphore implements [lock.Semaphore].
func (l *MemLocker) TryAcquireSemaphore(ctx context.Context, name string, limit int) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire semaphore", name, queue.PermitRequest(limit), false)
}

func (l *MemLocker) acquire(ctx context.Context, op, name string, req queue.Request, wait bool) (lock.Lease, error) {
	if err := l.enter(ctx, op, name); err != nil {
		return nil, err
	}
	// Close waits for the calls in progress.
	l.wg.Add(1)
	defer l.wg.Done()
	le, err := l.grantLocked(ctx, name, req, wait)
	if err != nil {
		return nil, fmt.Errorf("locktest: %s %q: %w", op, name, err)
	}
	return le, nil
}

func (l *MemLocker) openSessionLocked() {
	if l.sess == nil {
		l.sess = &session{records: map[*record]bool{}, expired: make(chan struct{})}
	}
}

// enter starts call op on name: unless name is invalid, l closed or ctx
// done, it returns nil with m.mu held.
func (l *MemLocker) enter(ctx context.Context, op, name string) error {
	if err := lock.ValidateName(name); err != nil {
		return fmt.Errorf("locktest: %s: %w", op, err)
	}
	l.m.mu.Lock()
	err := ctx.Err()
	if l.closed {
		err = lock.ErrClosed
	}
	if err != nil {
		l.m.mu.Unlock()
		return fmt.Errorf("locktest: %s %q: %w", op, name, err)
	}
	return nil
}

// grantLocked queues a record for req unless refused, then decides whether
// it is granted, failed, or which records it waits for, until granted or
// failed. Called with m.mu held, it returns with it released.
func (l *MemLocker) grantLocked(ctx context.Context, name string, req queue.Request, wait bool) (lock.Lease, error) {
	m := l.m
	defer m.mu.Unlock()
	if err := m.refuseLocked(name, req, wait); err != nil {
		return nil, err
	}
	l.openSessionLocked()
	r := m.createLocked(l, name, req)
	for waited := false; ; waited = true {
		if r.why != nil {
			return nil, r.why
		}
		if err := ctx.Err(); err != nil {
			m.deleteLocked(r)
			return nil, err
		}
		q := m.queues[r.name]
		i := slices.Index(q, r)
		if queue.Admitted(requests(q), i) {
			// Only a request that was seen waiting can be watched by the
			// one behind it (see queue.Touches).
			if waited && !m.noTouch && queue.Touches(requests(q), i) {
				close(r.touch)
			}
			r.lease = &memLease{m: m, rec: r, done: make(chan struct{})}
			return r.lease, nil
		}
		cases := l.waitCases(ctx, r.sess, q, i)
		m.mu.Unlock()
		reflect.Select(cases)
		m.mu.Lock()
	}
}

// waitCases are what the record at position i of q waits for: the end of
// ctx, its session or the Locker, and only the records queue.Watched
// names, so that a deletion wakes a bounded number of waiters.
func (l *MemLocker) waitCases(ctx context.Context, s *session, q []*record, i int) []reflect.SelectCase {
	chans := []<-chan struct{}{ctx.Done(), s.expired, l.closing}
	for _, j := range queue.Watched(requests(q), i) {
		chans = append(chans, q[j].gone)
	}
	if queue.WaitsForTouch(requests(q), i) {
		chans = append(chans, q[i-1].touch)
	}
	cases := make([]reflect.SelectCase, len(chans))
	for k, ch := range chans {
		cases[k] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	return cases
}

// Holder implements [lock.Locker].
func (l *MemLocker) Holder(ctx context.Context, name string) (lock.Holder, error) {
	if err := l.enter(ctx, "holder", name); err != nil {
		return lock.Holder{}, err
	}
	defer l.m.mu.Unlock()
	h := l.m.holderLocked(name)
	if h.Token == 0 {
		return lock.Holder{}, fmt.Errorf("locktest: holder %q: %w", name, lock.ErrNotHeld)
	}
	return h, nil
}

// Holders implements [lock.HolderLister].
func (l *MemLocker) Holders(ctx context.Context, name string) ([]lock.Holder, error) {
	if err := l.enter(ctx, "holders", name); err != nil {
		return nil, err
	}
	defer l.m.mu.Unlock()
	hs := []lock.Holder{}
	for _, e := range l.m.queueLocked(name) {
		if e.Held {
			hs = append(hs, e.Holder)
		}
	}
	return hs, nil
}

// Queue implements [lock.QueueLister]; Since is when a record was created.
func (l *MemLocker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	if err := l.enter(ctx, "queue", name); err != nil {
		return nil, err
	}
	defer l.m.mu.Unlock()
	return l.m.queueLocked(name), nil
}

// Revoke implements [lock.Revoker]. The revoked lease ends at once, with
// Err wrapping [lock.ErrLost] and naming l's identity.
func (l *MemLocker) Revoke(ctx context.Context, name string, token fencing.Token) error {
	if err := l.enter(ctx, "revoke", name); err != nil {
		return err
	}
	m := l.m
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.queueLocked(name), func(e lock.QueueEntry) bool { return e.Held && e.Token == token })
	if i < 0 {
		return fmt.Errorf("locktest: revoke %q token %d: %w", name, token, lock.ErrNotHeld)
	}
	cause := fmt.Errorf("%w: revoked by %q", lock.ErrLost, l.identity)
	m.dropLocked(m.queues[name][i], cause, cause)
	return nil
}

// Healthy implements [lock.HealthChecker]: nil unless l is closed. It
// opens a session if l has none, as the next Acquire would.
func (l *MemLocker) Healthy(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("locktest: healthy: %w: nil context", lock.ErrInvalidConfig)
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.closed {
		return fmt.Errorf("locktest: healthy: %w", lock.ErrClosed)
	}
	if err := ctx.Err(); l.sess == nil && err != nil {
		return fmt.Errorf("locktest: healthy: %w", err)
	}
	l.openSessionLocked()
	return nil
}

// Close implements [lock.Locker]; every call, concurrent ones included,
// returns once l's leases, waiting calls and observations have ended.
func (l *MemLocker) Close() error {
	l.closeOnce.Do(func() {
		m := l.m
		m.mu.Lock()
		l.closed = true
		m.endSessionLocked(l, fmt.Errorf("%w: locker closed", lock.ErrReleased), fmt.Errorf("%w: interrupted", lock.ErrClosed))
		close(l.closing)
		m.mu.Unlock()
		l.wg.Wait()
	})
	return nil
}

type memLease struct {
	m    *Memory
	rec  *record
	done chan struct{}
	err  error // guarded by m.mu; nil while held
}

func (le *memLease) Name() string          { return le.rec.name }
func (le *memLease) Token() fencing.Token  { return le.rec.token }
func (le *memLease) Done() <-chan struct{} { return le.done }
func (le *memLease) String() string        { return fmt.Sprintf("%s@%d", le.rec.name, le.rec.token) }

func (le *memLease) Err() error {
	le.m.mu.Lock()
	defer le.m.mu.Unlock()
	if le.err == nil {
		return nil
	}
	return fmt.Errorf("locktest: lease %q token %d: %w", le.rec.name, le.rec.token, le.err)
}

// Release ends the lease and deletes its record; it never blocks.
func (le *memLease) Release(ctx context.Context) error {
	le.m.mu.Lock()
	defer le.m.mu.Unlock()
	if le.err != nil {
		return fmt.Errorf("locktest: release %q token %d: %w", le.rec.name, le.rec.token, le.err)
	}
	le.endLocked(lock.ErrReleased)
	le.m.deleteLocked(le.rec)
	return nil
}

// endLocked ends the lease with cause unless it has ended already.
func (le *memLease) endLocked(cause error) {
	if le.err == nil {
		le.err = cause
		close(le.done)
	}
}

// observation is one Observe call's unbounded queue of holder changes.
type observation struct {
	pending []lock.Holder // guarded by Memory.mu
	wake    chan struct{} // capacity 1
	err     error         // guarded by Memory.mu; set when out is closed
}

// Observe implements [lock.Observer].
func (l *MemLocker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.enter(ctx, "observe", name); err != nil {
		return nil, nil, err
	}
	m := l.m
	defer m.mu.Unlock()
	o := &observation{pending: []lock.Holder{m.holderLocked(name)}, wake: make(chan struct{}, 1)}
	if m.watches == nil {
		m.watches = map[*observation]string{}
	}
	m.watches[o] = name
	out := make(chan lock.Holder)
	l.wg.Go(func() { l.observe(ctx, name, o, out) })
	errf := func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		return o.err
	}
	return out, errf, nil
}

func (l *MemLocker) observe(ctx context.Context, name string, o *observation, out chan<- lock.Holder) {
	m := l.m
	var err error
	for err == nil {
		// Offer the oldest pending change, if any, on send; nil blocks.
		var send chan<- lock.Holder
		var h lock.Holder
		m.mu.Lock()
		if len(o.pending) > 0 {
			send, h = out, o.pending[0]
		}
		m.mu.Unlock()
		select {
		case send <- h:
			m.mu.Lock()
			o.pending = o.pending[1:]
			m.mu.Unlock()
		case <-o.wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-l.closing:
			err = lock.ErrClosed
		}
	}
	m.mu.Lock()
	delete(m.watches, o)
	o.err = fmt.Errorf("locktest: observe %q: %w", name, err)
	m.mu.Unlock()
	close(out)
}
