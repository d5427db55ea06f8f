package locktest

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

// Memory is an in-memory lock server shared by many [MemLocker]s, as one
// etcd cluster is shared by many clients. It is safe for concurrent use.
//
// Every record created (one per Acquire, whether it is granted at once or
// queued) takes the next value of a revision counter that starts at 1, and
// that value is the record's fencing token. So tokens rise with every grant,
// across names and Lockers, like etcd revisions; gaps are normal.
//
// The zero value is an empty Memory, ready to use.
type Memory struct {
	mu      sync.Mutex
	rev     fencing.Token
	lastSID uint64
	noTouch bool                             // tests only: admitted permits skip their touch
	queues  map[string][]*record             // per name, in creation order; the first holds the lock
	watches map[string]map[*observation]bool // per name
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return new(Memory) }

// record is one acquisition's entry in a lock's queue.
type record struct {
	name  string
	token fencing.Token
	req   queue.Request
	owner *MemLocker
	sess  *session
	gone  chan struct{} // closed when the record is deleted
	touch chan struct{} // closed when its request, admitted after waiting, touches it
	why   error         // why it was deleted by someone else than its waiter
	lease *memLease     // set when granted
	since time.Time     // when it was created
}

// session groups a MemLocker's records, as an etcd lease or a ZooKeeper
// session does.
type session struct {
	id      uint64
	records map[*record]bool
	expired chan struct{} // closed when the server expires the session
}

// NewLocker returns a new Locker on m with its own session. An empty
// identity means the default, "hostname/pid/random".
func (m *Memory) NewLocker(identity string) *MemLocker {
	if identity == "" {
		identity = lock.DefaultIdentity()
	}
	return &MemLocker{m: m, identity: identity, closing: make(chan struct{}), down: make(chan struct{})}
}

// ExpireSession ends l's current session the way a server-side expiry does:
// l's leases end with an error wrapping [lock.ErrLost], its waiting Acquire
// calls return one, and all its records are deleted. l's next Acquire opens
// a new session. If l has no session (it never acquired, or it is closed),
// ExpireSession does nothing. l must be a Locker of m.
func (m *Memory) ExpireSession(l *MemLocker) {
	m = l.m // the state to change is l's Memory's, whatever the caller says
	m.mu.Lock()
	defer m.mu.Unlock()
	s := l.sess
	if s == nil {
		return
	}
	l.sess = nil
	close(s.expired)
	cause := fmt.Errorf("%w: session %d expired", lock.ErrLost, s.id)
	for _, r := range m.sessionRecords(s) {
		m.dropLocked(r, cause, cause)
	}
}

// dropLocked deletes r for someone else than its waiter: its lease, if
// granted, ends with cause, and its waiting Acquire returns why.
func (m *Memory) dropLocked(r *record, cause, why error) {
	if r.lease != nil {
		r.lease.endLocked(cause)
	}
	r.why = why
	m.deleteLocked(r)
}

// Records returns the keys of the records that exist for name, holder first
// and then the waiters in queue order. Each key is name, a slash, and the
// record's token in decimal.
func (m *Memory) Records(name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for _, r := range m.queues[name] {
		keys = append(keys, fmt.Sprintf("%s/%d", name, r.token))
	}
	return keys
}

// sessionRecords returns s's records in creation order, so that deleting
// them one by one reports holder changes in a deterministic order.
func (m *Memory) sessionRecords(s *session) []*record {
	rs := make([]*record, 0, len(s.records))
	for r := range s.records {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *record) int { return cmp.Compare(a.token, b.token) })
	return rs
}

// holderLocked returns the earliest holder of name, or the zero Holder.
// The first record of a queue is always admitted, whatever its kind.
func (m *Memory) holderLocked(name string) lock.Holder {
	q := m.queues[name]
	if len(q) == 0 {
		return lock.Holder{}
	}
	return q[0].holder()
}

func (r *record) holder() lock.Holder {
	return lock.Holder{Identity: r.owner.identity, Token: r.token, Shared: r.req.Shared(), Limit: r.req.Limit}
}

// incompatibleLocked explains why request r cannot join name's queue, or
// returns "" if it can.
func (m *Memory) incompatibleLocked(name string, r queue.Request) string {
	q := m.queues[name]
	if len(q) == 0 {
		return ""
	}
	return queue.Incompatible(q[0].req, r)
}

// requests returns the requests of q, for the rules of package queue.
func requests(q []*record) []queue.Request {
	rs := make([]queue.Request, len(q))
	for i, r := range q {
		rs[i] = r.req
	}
	return rs
}

func (m *Memory) createLocked(l *MemLocker, s *session, name string, req queue.Request) *record {
	before := m.holderLocked(name)
	if m.queues == nil {
		m.queues = map[string][]*record{}
	}
	m.rev++
	r := &record{name: name, token: m.rev, req: req, owner: l, sess: s, gone: make(chan struct{}), touch: make(chan struct{}), since: time.Now()}
	m.queues[name] = append(m.queues[name], r)
	s.records[r] = true
	m.notifyLocked(name, before)
	return r
}

func (m *Memory) deleteLocked(r *record) {
	q := m.queues[r.name]
	i := slices.Index(q, r)
	if i < 0 {
		return
	}
	before := m.holderLocked(r.name)
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(m.queues, r.name)
	} else {
		m.queues[r.name] = q
	}
	delete(r.sess.records, r)
	close(r.gone)
	m.notifyLocked(r.name, before)
}

func (m *Memory) notifyLocked(name string, before lock.Holder) {
	after := m.holderLocked(name)
	if after == before {
		return
	}
	for o := range m.watches[name] {
		o.pending = append(o.pending, after)
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// MemLocker is a [lock.Locker], [lock.Observer], [lock.SharedLocker],
// [lock.Semaphore], [lock.HolderLister], [lock.Revoker],
// [lock.QueueLister] and [lock.HealthChecker] on a [Memory]. It is safe
// for concurrent use. Holder and Observe report the earliest holder of a
// name (for a shared lock or a semaphore, the one with the lowest token);
// Holders reports all of them. Release and Close never block, and Observe
// runs one goroutine per observation, which ends with the observation's
// context or with Close. Close returns once every call in progress has
// returned and every observation has ended.
type MemLocker struct {
	m        *Memory
	identity string
	closing  chan struct{} // closed by Close when it starts
	down     chan struct{} // closed by Close when the teardown is over
	wg       sync.WaitGroup

	// Guarded by m.mu.
	sess   *session // nil before the first Acquire and after expiry or Close
	closed bool
}

var (
	_ lock.Locker       = (*MemLocker)(nil)
	_ lock.Observer     = (*MemLocker)(nil)
	_ lock.SharedLocker = (*MemLocker)(nil)
	_ lock.Semaphore    = (*MemLocker)(nil)
	_ lock.HolderLister = (*MemLocker)(nil)
)

// Identity returns the identity that Holder reports for l's leases.
func (l *MemLocker) Identity() string { return l.identity }

// Acquire implements [lock.Locker]. It is the write lock of
// [MemLocker.AcquireShared].
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
	if err := queue.CheckLimit(req.Limit); req.Kind == queue.Permit && err != nil {
		l.m.mu.Unlock()
		return nil, fmt.Errorf("locktest: %s %q: %w: %w", op, name, lock.ErrInvalidConfig, err)
	}
	// Close waits for the calls in progress.
	l.wg.Add(1)
	defer l.wg.Done()
	le, err := l.acquireLocked(ctx, name, req, wait)
	if err != nil {
		return nil, fmt.Errorf("locktest: %s %q: %w", op, name, err)
	}
	return le, nil
}

// acquireLocked is acquire with m.mu held, which it releases: it refuses
// what cannot be queued, queues a record, and waits for its turn.
func (l *MemLocker) acquireLocked(ctx context.Context, name string, req queue.Request, wait bool) (lock.Lease, error) {
	m := l.m
	if err := m.refuseLocked(name, req, wait); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	l.openSessionLocked()
	return l.awaitLocked(ctx, name, m.createLocked(l, l.sess, name, req))
}

// openSessionLocked gives l a session if it has none.
func (l *MemLocker) openSessionLocked() {
	if l.sess == nil {
		l.m.lastSID++
		l.sess = &session{id: l.m.lastSID, records: map[*record]bool{}, expired: make(chan struct{})}
	}
}

// enter starts call op on name: it validates name and takes m.mu, unless
// l is closed or ctx has ended. It returns with m.mu held if and only if
// it returns nil.
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

// refuseLocked returns why req cannot be queued on name now, if it
// cannot: it is incompatible with the queue, or it is a try that would
// wait.
func (m *Memory) refuseLocked(name string, req queue.Request, wait bool) error {
	if why := m.incompatibleLocked(name, req); why != "" {
		return fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
	}
	if q := m.queues[name]; !wait && !queue.Admitted(append(requests(q), req), len(q)) {
		h := m.holderLocked(name)
		return fmt.Errorf("%w (held by %q with token %d; %d requests queued)", lock.ErrLocked, h.Identity, h.Token, len(q))
	}
	return nil
}

// awaitLocked decides, with m.mu held, whether r is granted, failed, or
// which records it waits for, and waits for them with m.mu released,
// until r is granted or fails. It returns with m.mu released.
func (l *MemLocker) awaitLocked(ctx context.Context, name string, r *record) (lock.Lease, error) {
	m, s := l.m, l.sess
	for waited := false; ; waited = true {
		if r.why != nil {
			m.mu.Unlock()
			return nil, r.why
		}
		if err := ctx.Err(); err != nil {
			m.deleteLocked(r)
			m.mu.Unlock()
			return nil, err
		}
		q := m.queues[name]
		i := slices.Index(q, r)
		if queue.Admitted(requests(q), i) {
			// Only a request that was seen waiting can be watched by the
			// one behind it (see queue.Touches).
			if waited && !m.noTouch && queue.Touches(requests(q), i) {
				close(r.touch)
			}
			le := &memLease{m: m, rec: r, done: make(chan struct{})}
			r.lease = le
			m.mu.Unlock()
			return le, nil
		}
		cases := l.waitCases(ctx, s, q, i)
		m.mu.Unlock()
		reflect.Select(cases)
		m.mu.Lock()
	}
}

// waitCases are what the record at position i of q waits for: the end
// of ctx, of its session or of the Locker, and the records the herd-free
// rule names only, so that a deletion wakes a bounded number of waiters.
// Expiry and Close delete the record and set its why before closing
// these channels, so that awaitLocked reports them.
func (l *MemLocker) waitCases(ctx context.Context, s *session, q []*record, i int) []reflect.SelectCase {
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.expired)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.closing)},
	}
	for _, j := range queue.Watched(requests(q), i) {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q[j].gone)})
	}
	if queue.WaitsForTouch(requests(q), i) {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q[i-1].touch)})
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

// Holders implements [lock.HolderLister]: the admitted records of name, in
// token order.
func (l *MemLocker) Holders(ctx context.Context, name string) ([]lock.Holder, error) {
	if err := l.enter(ctx, "holders", name); err != nil {
		return nil, err
	}
	defer l.m.mu.Unlock()
	q := l.m.queues[name]
	hs := []lock.Holder{}
	// The admitted records are a prefix of the queue.
	rs := requests(q)
	for i, r := range q {
		if !queue.Admitted(rs, i) {
			break
		}
		hs = append(hs, r.holder())
	}
	return hs, nil
}

// Close implements [lock.Locker]: it releases l's leases (their Err wraps
// [lock.ErrReleased]), makes waiting Acquire calls return [lock.ErrClosed]
// and waits for them, and ends l's observations and waits for their
// goroutines. Every call,
// including concurrent ones, returns once that is done; later calls return
// nil.
func (l *MemLocker) Close() error {
	m := l.m
	m.mu.Lock()
	if l.closed {
		m.mu.Unlock()
		<-l.down
		return nil
	}
	l.closed = true
	if s := l.sess; s != nil {
		l.sess = nil
		cause := fmt.Errorf("%w: locker closed", lock.ErrReleased)
		why := fmt.Errorf("%w: interrupted", lock.ErrClosed)
		for _, r := range m.sessionRecords(s) {
			m.dropLocked(r, cause, why)
		}
	}
	close(l.closing)
	m.mu.Unlock()
	l.wg.Wait()
	close(l.down)
	return nil
}

// memLease is a grant of a MemLocker.
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

// Release ends the lease and deletes its record. It does not block, so ctx
// is not consulted.
func (le *memLease) Release(ctx context.Context) error {
	m := le.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if le.err != nil {
		return fmt.Errorf("locktest: release %q token %d: %w", le.rec.name, le.rec.token, le.err)
	}
	le.endLocked(lock.ErrReleased)
	m.deleteLocked(le.rec)
	return nil
}

// endLocked ends the lease with cause unless it has ended already.
func (le *memLease) endLocked(cause error) bool {
	if le.err != nil {
		return false
	}
	le.err = cause
	close(le.done)
	return true
}

// observation is one Observe call's queue of holder changes. The queue is
// unbounded, so a slow reader never makes the Memory drop a change.
type observation struct {
	pending []lock.Holder // guarded by Memory.mu
	wake    chan struct{} // capacity 1
	err     error         // guarded by Memory.mu; set when out is closed
}

// Observe implements [lock.Observer]. The observation ends when ctx is done
// (the error function then returns ctx's error) or when l is closed
// ([lock.ErrClosed]).
func (l *MemLocker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.enter(ctx, "observe", name); err != nil {
		return nil, nil, err
	}
	m := l.m
	defer m.mu.Unlock()
	o := &observation{pending: []lock.Holder{m.holderLocked(name)}, wake: make(chan struct{}, 1)}
	if m.watches == nil {
		m.watches = map[string]map[*observation]bool{}
	}
	if m.watches[name] == nil {
		m.watches[name] = map[*observation]bool{}
	}
	m.watches[name][o] = true
	out := make(chan lock.Holder)
	l.wg.Add(1)
	go l.observe(ctx, name, o, out)
	errf := func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		return o.err
	}
	return out, errf, nil
}

func (l *MemLocker) observe(ctx context.Context, name string, o *observation, out chan<- lock.Holder) {
	m := l.m
	defer l.wg.Done()
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
	delete(m.watches[name], o)
	if len(m.watches[name]) == 0 {
		delete(m.watches, name)
	}
	o.err = fmt.Errorf("locktest: observe %q: %w", name, err)
	m.mu.Unlock()
	close(out)
}

// MemoryHarness returns a [Harness] whose Lockers are [MemLocker]s on m. It
// also implements [SessionExpirer], [SessionStaller], [SessionFreezer] and
// [RecordLister], so
//
//	locktest.TestLocker(t, locktest.MemoryHarness(locktest.NewMemory()))
//
// runs every subtest.
func MemoryHarness(m *Memory) Harness { return memHarness{m} }

type memHarness struct{ m *Memory }

func (h memHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	l := h.m.NewLocker(identity)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (h memHarness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	ml, ok := l.(*MemLocker)
	if !ok {
		t.Fatalf("locktest: ExpireSession of a %T, want a *MemLocker", l)
	}
	h.m.ExpireSession(ml)
}

// StallSession is ExpireSession: a Memory has no network, so a Locker
// hears of its session's expiry the moment the server expires it, before
// the server grants the freed locks.
func (h memHarness) StallSession(t *testing.T, l lock.Locker) {
	t.Helper()
	h.ExpireSession(t, l)
}

// FreezeSession does nothing: a Memory has no network, so a MemLocker
// needs nothing from its caller for its records to be deleted and its
// leases to end.
func (h memHarness) FreezeSession(t *testing.T, l lock.Locker) func() {
	return func() {}
}

func (h memHarness) Records(t *testing.T, name string) []string {
	return h.m.Records(name)
}
