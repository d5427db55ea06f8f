package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Acquire blocks until it holds the lock called name, ctx is done, or the
// Locker is closed, and returns a *Lease; uncontended, in one round trip.
// A failed or cancelled Acquire deletes its record. Errors wrap
// [lock.ErrInvalidName], [lock.ErrClosed], [lock.ErrLost] (the session
// ended while waiting; the next call starts a new one),
// [lock.ErrPermission] or ctx's error.
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire", name, queue.ExclusiveRequest, false)
}

// TryAcquire is Acquire without waiting: when another lease holds name it
// returns an error wrapping [lock.ErrLocked], and writes nothing (unless
// an attempt went unanswered: see "Late creates" in docs/design/etcd.md).
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire", name, queue.ExclusiveRequest, true)
}

// AcquireAll implements [lock.MultiLocker] for [lock.AcquireAll]: the
// records of names, distinct and sorted, are created in one transaction,
// and their create revision is every lease's token (docs/design/etcd.md,
// "Multi-name locks"). Errors are those of Acquire, or wrap
// [lock.ErrInvalidConfig] for no names or names not sorted and distinct.
func (l *Locker) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return l.acquireAll(ctx, "acquire all", names, false)
}

// TryAcquireAll is AcquireAll without waiting: if any name has a record,
// it writes nothing and returns an error wrapping [lock.ErrLocked].
func (l *Locker) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return l.acquireAll(ctx, "try acquire all", names, true)
}

func (l *Locker) acquireAll(ctx context.Context, op string, names []string, try bool) ([]lock.Lease, error) {
	err := l.usable(ctx)
	if err == nil && len(names) == 0 {
		err = fmt.Errorf("%w: no names", lock.ErrInvalidConfig)
	}
	for i, name := range names {
		switch {
		case err != nil:
		case lock.ValidateName(name) != nil:
			err = lock.ValidateName(name)
		case i > 0 && names[i-1] >= name:
			err = fmt.Errorf("%w: names not sorted, or %q given twice", lock.ErrInvalidConfig, name)
		case l.opts.layout == LayoutConcurrency && slices.ContainsFunc(names[:i], func(p string) bool { return strings.HasPrefix(name, p+"/") }):
			err = fmt.Errorf("%w: layout %s puts the records of %q in the queue of a name above it", lock.ErrIncompatible, LayoutConcurrency, name)
		}
	}
	var leases []lock.Lease
	if err == nil {
		leases, err = l.acquireNames(ctx, names, queue.ExclusiveRequest, try)
	}
	if err != nil {
		return nil, fmt.Errorf("etcdlock: %s %q: %w", op, names, err)
	}
	return leases, nil
}

// acquire implements every Acquire and TryAcquire method: op names the
// call in errors, req says which kind of grant, try whether to wait.
func (l *Locker) acquire(ctx context.Context, op, name string, req queue.Request, try bool) (lock.Lease, error) {
	if err := l.begin(ctx, op, name); err != nil {
		return nil, err
	}
	if req.Kind != queue.Exclusive && l.opts.layout == LayoutConcurrency {
		return nil, fmt.Errorf("etcdlock: %s %q: %w: layout %s has no shared locks or semaphores", op, name, lock.ErrIncompatible, LayoutConcurrency)
	}
	if req.Kind == queue.Permit {
		if err := queue.CheckLimit(req.Limit); err != nil {
			return nil, fmt.Errorf("etcdlock: %s %q: %w: %w", op, name, lock.ErrInvalidConfig, err)
		}
	}
	les, err := l.acquireNames(ctx, []string{name}, req, try)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: %s %q: %w", op, name, err)
	}
	return les[0], nil
}

// acquireNames acquires names together, bounded by Close, in an acquire
// span each, and counts the holds of the leases granted.
func (l *Locker) acquireNames(ctx context.Context, names []string, req queue.Request, try bool) ([]lock.Lease, error) {
	spans := make([]telemetry.Acquire, len(names))
	sctx := ctx
	for i, name := range names {
		sctx, spans[i] = l.tel.StartAcquire(ctx, name, req.Kind.String(), !try)
	}
	var les []*Lease
	err := l.bounded(sctx, func(ctx context.Context) (err error) {
		les, err = l.acquireRetry(ctx, names, req, try)
		return err
	})
	leases := make([]lock.Lease, len(names))
	for i, span := range spans {
		var le *Lease
		if err == nil {
			le, leases[i] = les[i], les[i]
		}
		if hold := span.End(config.Outcome(ctx, err), uint64(le.Token()), err); le != nil && hold.Counts() {
			le.st.OnEnd(func(err error) { l.countEnd(le, hold, err) })
		}
	}
	return leases, err
}

// countEnd records the end of le, which ended with err. A deletion may be
// the session lease's expiry seen first by the watch: look the lease up.
func (l *Locker) countEnd(le *Lease, hold telemetry.Hold, err error) {
	reason := config.EndReason(err)
	if reason != telemetry.Deleted || !l.tel.Metrics() {
		hold.End(reason)
		return
	}
	hold.End("")
	if !l.spawn(func() {
		ctx, cancel := context.WithTimeout(l.g.life, l.closeWait())
		defer cancel()
		resp, terr := l.client.TimeToLive(ctx, le.s.id)
		if terr == nil && resp.TTL == -1 || isLeaseNotFound(terr) {
			reason = telemetry.Expired
		}
		hold.Lost(reason)
	}) {
		hold.Lost(reason)
	}
}

func (l *Locker) acquireRetry(ctx context.Context, names []string, req queue.Request, try bool) ([]*Lease, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		as := make([]*acquisition, len(names))
		for i, name := range names {
			// In sorted order: no two calls wait for each other's slots.
			as[i] = l.newAcquisition(s, name, req, try)
			if err := as[i].reserve(ctx); err != nil {
				for _, a := range as[:i] {
					a.free()
				}
				return nil, err
			}
		}
		les, err := run(ctx, as)
		// A session the server already expired, which the keepalive loop
		// has not noticed yet, fails the create before anything was
		// written: start a new session once.
		if errors.Is(err, errStaleSession) && attempt == 0 {
			continue
		}
		return les, err
	}
}

var errStaleSession = fmt.Errorf("%w: the session lease was not found on the server", lock.ErrLost)

// record is what a Lease and an acquisition know of their record.
type record struct {
	s         *session
	pfx       string // the prefix of the name's records
	seq       uint64 // the key's number (recordKeys)
	key       string
	rev       int64         // the create revision; 0 until known
	ambiguous bool          // a create attempt went unanswered: see cleanupOp
	marker    string        // the lock-delay marker written with it, if any
	slot      chan struct{} // its reservation of key (reserve), if any
}

// acquisition is one acquisition of any kind within one session: decide,
// wait, grant (see run).
type acquisition struct {
	record
	l    *Locker
	name string
	req  queue.Request
	try  bool

	// From the latest delayReads, answered at seen, for delay: the
	// deletes of the markers whose record is gone.
	stale []clientv3.Op
	seen  time.Time
}

func (l *Locker) newAcquisition(s *session, name string, req queue.Request, try bool) *acquisition {
	r := record{s: s, pfx: l.namePrefix(name)}
	r.seq = s.keys.number(r.pfx)
	r.key = recordKey(r.pfx, s.id, r.seq, req)
	if l.opts.layout == LayoutConcurrency {
		r.key = fmt.Sprintf("%s%x", r.pfx, int64(s.id)) // concurrency.Mutex's
	}
	a := &acquisition{record: r, l: l, name: name, req: req, try: try}
	if l.opts.LockDelay > 0 {
		a.marker = l.delayPrefix(r.pfx) + strings.TrimPrefix(a.key, r.pfx)
	}
	return a
}

// run creates the records of as, of one session, then awaits each in
// turn; a failure discards the records and releases the leases granted.
func run(ctx context.Context, as []*acquisition) ([]*Lease, error) {
	vs, err := enqueue(ctx, as)
	if err != nil {
		return nil, err
	}
	les := make([]*Lease, 0, len(as))
	for i, a := range as {
		le, err := a.await(ctx, vs[i])
		if err != nil {
			failAll(as[i+1:], err)
			for _, le := range les {
				rctx, cancel := context.WithTimeout(le.l.g.life, min(le.l.closeWait(), 2*time.Second))
				_ = le.Release(rctx)
				cancel()
			}
			return nil, err
		}
		les = append(les, le)
	}
	return les, nil
}

// await decides and waits, from v, until a is granted or fails.
func (a *acquisition) await(ctx context.Context, v view) (*Lease, error) {
	for {
		d, err := a.decide(v)
		if err != nil {
			return nil, a.fail(err)
		}
		if d.granted {
			return a.grant(ctx, d, v.rev)
		}
		if v, err = a.wait(ctx, d, v.rev); err != nil {
			return nil, a.fail(err)
		}
	}
}

// view is one read of the queue, as the acquisition sees it.
type view struct {
	ahead    []*mvccpb.KeyValue // in queue order; exclusive: the last one only
	next     []*mvccpb.KeyValue // the record right behind it, when read
	rev      int64              // the revision of the read
	created  bool               // the create's own read: no one saw it wait
	admitted bool               // no read: a deletion admitted it (queue.AdmittedByDeletion)
}

// decision is what decide makes of a view: granted (and whether to touch
// the record first, see queue.Touches), or which records to watch, and
// whether their write wakes it too (queue.WaitsForTouch) and their
// deletion admits it (queue.AdmittedByDeletion).
type decision struct {
	granted          bool
	touch            bool
	watch            []string
	puts, byDeletion bool
}

// decide applies the rules of package queue to v: granted, refused (a
// TryAcquire that would wait), or watch the records queue.Watched names.
func (a *acquisition) decide(v view) (decision, error) {
	if v.admitted {
		return decision{granted: true, touch: true}, nil
	}
	q := append(requestsOf(v.ahead), a.req)
	i := len(v.ahead)
	if queue.Admitted(q, i) {
		return decision{granted: true, touch: !v.created && queue.Touches(append(q, requestsOf(v.next)...), i)}, nil
	}
	if a.try {
		return decision{}, lock.ErrLocked
	}
	d := decision{puts: queue.WaitsForTouch(q, i), byDeletion: queue.AdmittedByDeletion(q, i)}
	for _, j := range queue.Watched(q, i) {
		d.watch = append(d.watch, string(v.ahead[j].Key))
	}
	return d, nil
}

// grant turns the acquisition, admitted by the read at rev, into a held
// lease: touch if d says so, wait out a lock-delay, watch the record.
func (a *acquisition) grant(ctx context.Context, d decision, rev int64) (*Lease, error) {
	if d.touch {
		// Rewritten unchanged (queue.Touches), the record is confirmed at
		// the write's revision.
		resp, err := a.confirm(ctx, clientv3.OpPut(a.key, a.l.opts.Identity, clientv3.WithLease(a.s.id)))
		if err != nil {
			return nil, a.fail(err)
		}
		rev = resp.Header.Revision
	}
	if err := a.delay(ctx); err != nil {
		return nil, a.fail(err)
	}
	le := &Lease{l: a.l, record: a.record}
	le.watch = a.s.watch.add(le, rev)
	if err := a.s.add(le); err != nil {
		a.s.watch.stop(le.watch)
		return nil, a.fail(err)
	}
	return le, nil
}

// fail discards what a failed acquisition may have created, and returns
// err.
func (a *acquisition) fail(err error) error {
	if a.rev == 0 && !a.ambiguous && (errors.Is(err, lock.ErrLocked) || errors.Is(err, lock.ErrIncompatible)) {
		a.free()
		return err
	}
	return a.l.discard(a.record, err)
}

func failAll(as []*acquisition, err error) error {
	for _, a := range as {
		a.fail(err)
	}
	return err
}

// enqueue creates the records of as and returns the queues it read.
func enqueue(ctx context.Context, as []*acquisition) ([]view, error) {
	resp, err := create(ctx, as)
	if a := as[0]; isLeaseNotFound(err) {
		a.l.dropSession(a.s, telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: lease %x expired or was revoked", lock.ErrLost, int64(a.s.id))))
		return nil, errStaleSession
	}
	vs := make([]view, len(as))
	for i, a := range as {
		if resp == nil {
			break // the create failed; it may have been applied, or be later
		}
		part := &clientv3.TxnResponse{Header: resp.Header, Succeeded: resp.Succeeded, Responses: resp.Responses[i : i+1]}
		if resp.Succeeded {
			part.Responses = resp.Responses[i].GetResponseTxn().GetResponses()
			a.noteDelayReads(part.Responses)
		}
		// Place them all: fail discards a record by its create revision.
		var perr error
		if vs[i], perr = a.place(ctx, part); err == nil {
			err = perr
		}
	}
	if err != nil {
		return nil, failAll(as, err)
	}
	return vs, nil
}

// create creates the records of as (createTxn). It is safe to repeat;
// ambiguous records that an attempt failed without an answer and may
// still be applied (docs/design/etcd.md, "Late creates").
func create(ctx context.Context, as []*acquisition) (*clientv3.TxnResponse, error) {
	l, s := as[0].l, as[0].s
	return call(ctx, l, s, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		for {
			was := s.guard.rev.Load()
			resp, err := createTxn(ctx, as, was).Commit()
			if err != nil {
				for _, a := range as {
					a.ambiguous = true
				}
				l.opts.Logger.Debug("etcdlock: create attempt failed", "key", as[0].key, "err", err)
				return nil, err
			}
			if resp.Succeeded || slices.ContainsFunc(resp.Responses[:len(as)], func(r *etcdserverpb.ResponseOp) bool { return len(r.GetResponseRange().GetKvs()) > 0 }) {
				return resp, nil
			}
			// No record blocks the create, so the guard did: it was
			// written since we last read it. Compare with the value the
			// server reported (only values read from it are stored).
			now := int64(0)
			if kvs := resp.Responses[len(as)].GetResponseRange().Kvs; len(kvs) > 0 {
				now = kvs[0].ModRevision
			}
			if now == was {
				return nil, fmt.Errorf("create of %q refused with the guard unchanged at revision %d", as[0].key, was)
			}
			s.guard.rev.CompareAndSwap(was, now)
		}
	})
}

// createTxn is one create attempt of as, guarded by the session's guard
// at revision was, with a nested transaction of createOps each.
func createTxn(ctx context.Context, as []*acquisition, was int64) clientv3.Txn {
	g := as[0].s.guard.key
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(g), "=", was)}
	var then, orElse []clientv3.Op
	for _, a := range as {
		cmp, ops, read := a.createOps()
		cmps, then, orElse = append(cmps, cmp), append(then, clientv3.OpTxn(nil, ops, nil)), append(orElse, read)
	}
	return as[0].l.client.Txn(ctx).If(cmps...).Then(then...).Else(append(orElse, clientv3.OpGet(g))...)
}

// createOps are a's part of a create: If its key is free, put it and read
// what decide needs (for an exclusive request the newest two records and
// the oldest, else the queue), Else read it. An exclusive TryAcquire
// creates only if name has no record, else reads the oldest.
func (a *acquisition) createOps() (clientv3.Cmp, []clientv3.Op, clientv3.Op) {
	put := clientv3.OpPut(a.key, a.l.opts.Identity, clientv3.WithLease(a.s.id))
	first := clientv3.OpGet(a.pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if a.try && a.req.Kind == queue.Exclusive {
		return clientv3.Compare(clientv3.CreateRevision(a.pfx).WithPrefix(), "=", 0), append([]clientv3.Op{put}, a.markerOps()...), first
	}
	then := []clientv3.Op{put, clientv3.OpGet(a.pfx, queueRead()...)}
	if a.req.Kind == queue.Exclusive {
		then = []clientv3.Op{put, lastBefore(a.pfx, 2), first}
	}
	return clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0), append(then, a.markerOps()...), clientv3.OpGet(a.key)
}

// queueRead reads the keys of a name's records in queue order: the key
// says each record's kind (see requestOf).
func queueRead(opts ...clientv3.OpOption) []clientv3.OpOption {
	return append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}, opts...)
}

// lastBefore reads the keys of the newest n records under pfx, newest
// first, that opts allow.
func lastBefore(pfx string, n int64, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(pfx, append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(n)}, opts...)...)
}

// place reads the answer of the create: the record's create revision and
// the records ahead of it (for an exclusive request, its predecessor),
// the oldest of which says what the name is (checkHead). A retried create
// that found its record in place reads them.
func (a *acquisition) place(ctx context.Context, resp *clientv3.TxnResponse) (view, error) {
	exclusive, rs := a.req.Kind == queue.Exclusive, resp.Responses
	if resp.Succeeded {
		a.rev = resp.Header.Revision
		v := view{rev: a.rev}
		switch {
		case exclusive && a.try:
			return v, nil
		case exclusive:
			if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 1 {
				v.ahead = kvs[1:2]
			}
			return v, a.checkHead(rs[2].GetResponseRange().Kvs)
		}
		v.created = true
		for _, kv := range rs[1].GetResponseRange().Kvs {
			if kv.CreateRevision < a.rev {
				v.ahead = append(v.ahead, kv)
			}
		}
		return v, a.checkHead(v.ahead)
	}
	kvs := rs[0].GetResponseRange().Kvs
	switch {
	case exclusive && a.try && (len(kvs) == 0 || string(kvs[0].Key) != a.key):
		if err := a.checkHead(kvs); err != nil {
			return view{}, err
		}
		return view{}, lock.ErrLocked
	case len(kvs) == 0:
		return view{}, fmt.Errorf("%w: record %q vanished while it was created", lock.ErrLost, a.key)
	}
	a.rev = kvs[0].CreateRevision
	if exclusive && a.try {
		return view{rev: resp.Header.Revision}, nil
	}
	v, err := a.read(ctx)
	if err != nil {
		return view{}, err
	}
	if exclusive && len(v.ahead) > 0 {
		head, err := a.l.get(ctx, a.s, a.pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
		if err != nil {
			return view{}, err
		}
		return v, a.checkHead(head.Kvs)
	}
	return v, a.checkHead(v.ahead)
}

// checkHead refuses the acquisition, with an error wrapping
// lock.ErrIncompatible, when kvs, the oldest record of the name if any,
// says the name is of another kind.
func (a *acquisition) checkHead(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 || string(kvs[0].Key) == a.key {
		return nil
	}
	if why := queue.Incompatible(requestOf(kvs[0].Key), a.req); why != "" {
		return fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
	}
	return nil
}

// read reads the queue again, confirming the record: for an exclusive
// acquisition the record just before its own, for the others the records
// ahead of it and the one right behind it.
func (a *acquisition) read(ctx context.Context) (view, error) {
	before := clientv3.WithMaxCreateRev(a.rev - 1)
	ops := []clientv3.Op{lastBefore(a.pfx, 1, before)}
	if a.req.Kind != queue.Exclusive {
		ops = []clientv3.Op{clientv3.OpGet(a.pfx, queueRead(before)...),
			clientv3.OpGet(a.pfx, queueRead(clientv3.WithMinCreateRev(a.rev+1), clientv3.WithLimit(1))...)}
	}
	resp, err := a.confirm(ctx, ops...)
	if err != nil {
		return view{}, err
	}
	v := view{ahead: resp.Responses[0].GetResponseRange().Kvs, rev: resp.Header.Revision}
	if len(ops) > 1 {
		v.next = resp.Responses[1].GetResponseRange().Kvs
	}
	return v, nil
}

// confirm applies ops, then delayReads, only while the record exists with
// its create revision (so while the session lease lives): a write so
// guarded never brings back a record that went.
func (a *acquisition) confirm(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, err := call(ctx, a.l, a.s, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(slices.Concat(ops, a.delayReads())...).
			Commit()
	})
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		if a.s.ended() {
			return nil, a.s.lostErr()
		}
		return nil, fmt.Errorf("%w: record %q was deleted while waiting", lock.ErrLost, a.key)
	}
	a.noteDelayReads(resp.Responses)
	return resp, nil
}
