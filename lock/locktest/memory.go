package locktest

import (
	"cmp"
	"fmt"
	"maps"
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
// Every record created (one per Acquire, granted at once or queued) takes
// the next value of one counter as its fencing token; gaps are normal.
// Waiters are served by the queue rules of [lock.SharedLocker]. A lease is
// lost only when a test calls [Memory.ExpireSession].
//
// The zero value is an empty Memory, ready to use.
type Memory struct {
	mu      sync.Mutex
	rev     fencing.Token
	noTouch bool                    // tests only: admitted permits skip their touch
	queues  map[string][]*record    // per name, in creation order; the first holds the lock
	watches map[*observation]string // the name each observes
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
	since time.Time
}

// session groups a MemLocker's records, as a backend's session does.
type session struct {
	records map[*record]bool
	expired chan struct{} // closed when the session ends
}

// NewLocker returns a new Locker on m; an empty identity means the default.
func (m *Memory) NewLocker(identity string) *MemLocker {
	if identity == "" {
		identity = lock.DefaultIdentity()
	}
	return &MemLocker{m: m, identity: identity, closing: make(chan struct{})}
}

// ExpireSession ends l's current session, if any, as a server-side expiry
// does: l's leases and waiting calls end with [lock.ErrLost], its records
// are deleted, and its next Acquire opens a new session.
func (m *Memory) ExpireSession(l *MemLocker) {
	m = l.m // the state to change is l's Memory's, whatever the caller says
	m.mu.Lock()
	defer m.mu.Unlock()
	cause := fmt.Errorf("%w: session expired", lock.ErrLost)
	m.endSessionLocked(l, cause, cause)
}

// endSessionLocked deletes the records of l's session, if any, in creation
// order: granted leases end with cause, waiting Acquire calls return why.
func (m *Memory) endSessionLocked(l *MemLocker, cause, why error) {
	s := l.sess
	if s == nil {
		return
	}
	l.sess = nil
	close(s.expired)
	byToken := func(a, b *record) int { return cmp.Compare(a.token, b.token) }
	for _, r := range slices.SortedFunc(maps.Keys(s.records), byToken) {
		m.dropLocked(r, cause, why)
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

// holderLocked returns the earliest holder of name (the first record is
// always admitted), or the zero Holder.
func (m *Memory) holderLocked(name string) lock.Holder {
	if q := m.queues[name]; len(q) > 0 {
		return q[0].holder()
	}
	return lock.Holder{}
}

func (r *record) holder() lock.Holder {
	return lock.Holder{Identity: r.owner.identity, Token: r.token, Shared: r.req.Shared(), Limit: r.req.Limit}
}

// queueLocked lists name's records, the admitted ones (a prefix) Held.
func (m *Memory) queueLocked(name string) []lock.QueueEntry {
	q := m.queues[name]
	rs := requests(q)
	es := make([]lock.QueueEntry, len(q))
	for i, r := range q {
		es[i] = lock.QueueEntry{Holder: r.holder(), Held: queue.Admitted(rs, i), Position: i, Since: r.since}
	}
	return es
}

func requests(q []*record) []queue.Request {
	rs := make([]queue.Request, len(q))
	for i, r := range q {
		rs[i] = r.req
	}
	return rs
}

// refuseLocked says why req cannot be queued on name now, if it cannot.
func (m *Memory) refuseLocked(name string, req queue.Request, wait bool) error {
	if err := queue.CheckLimit(req.Limit); req.Kind == queue.Permit && err != nil {
		return fmt.Errorf("%w: %w", lock.ErrInvalidConfig, err)
	}
	q := m.queues[name]
	if len(q) == 0 {
		return nil
	}
	if why := queue.Incompatible(q[0].req, req); why != "" {
		return fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
	}
	if !wait && !queue.Admitted(append(requests(q), req), len(q)) {
		h := q[0].holder()
		return fmt.Errorf("%w (held by %q with token %d; %d requests queued)", lock.ErrLocked, h.Identity, h.Token, len(q))
	}
	return nil
}

func (m *Memory) createLocked(l *MemLocker, name string, req queue.Request) *record {
	before := m.holderLocked(name)
	if m.queues == nil {
		m.queues = map[string][]*record{}
	}
	m.rev++
	r := &record{name: name, token: m.rev, req: req, owner: l, sess: l.sess, gone: make(chan struct{}), touch: make(chan struct{}), since: time.Now()}
	m.queues[name] = append(m.queues[name], r)
	l.sess.records[r] = true
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
	for o, n := range m.watches {
		if n != name {
			continue
		}
		o.pending = append(o.pending, after)
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// MemoryHarness returns a [Harness] whose Lockers are [MemLocker]s on m,
// with every optional interface of the Harness, so that
// locktest.TestLocker(t, locktest.MemoryHarness(locktest.NewMemory()))
// runs every subtest.
func MemoryHarness(m *Memory) Harness { return memHarness{m} }

type memHarness struct{ m *Memory }

func (h memHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	l := h.m.NewLocker(identity)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (h memHarness) ExpireSession(t *testing.T, l lock.Locker) {
	h.m.ExpireSession(l.(*MemLocker))
}

// StallSession is ExpireSession: a MemLocker hears of its session's end
// the moment it happens, before the freed locks are granted.
func (h memHarness) StallSession(t *testing.T, l lock.Locker) {
	h.ExpireSession(t, l)
}

// FreezeSession does nothing: a MemLocker needs nothing from its caller
// for its records to be deleted and its leases to end.
func (h memHarness) FreezeSession(t *testing.T, l lock.Locker) func() {
	return func() {}
}

func (h memHarness) Records(t *testing.T, name string) []string {
	return h.m.Records(name)
}
