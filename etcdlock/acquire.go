package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// acquire implements every Acquire and TryAcquire method: req says which
// kind of grant, try whether to wait.
func (l *Locker) acquire(ctx context.Context, name string, req queue.Request, try bool) (*Lease, error) {
	if err := lock.ValidateName(name); err != nil {
		return nil, err
	}
	if req.Kind == queue.Permit {
		if err := queue.CheckLimit(req.Limit); err != nil {
			return nil, fmt.Errorf("%w: %w", lock.ErrInvalidConfig, err)
		}
	}
	ctx, op := l.tel.StartAcquire(ctx, name, req.Kind.String(), !try)
	parent := ctx
	ctx, cancel := l.withClosing(ctx)
	defer cancel()
	le, err := l.acquireRetry(ctx, name, req, try)
	if err != nil && parent.Err() == nil && l.g.closing.Err() != nil {
		err = lock.ErrClosed
	}
	var token uint64
	if le != nil {
		token = uint64(le.rev)
	}
	if hold := op.End(config.Outcome(parent, err), token, err); le != nil && hold.Counts() {
		le.st.OnEnd(func(err error) { l.countEnd(le, hold, err) })
	}
	return le, err
}

// countEnd records the end of le, which ended with err. A deletion may be
// the session lease's expiry seen first by the watch: its reason is
// counted in the background once the session lease has been looked up.
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

// withClosing returns a context that is also cancelled when Close starts,
// so that no request of a call outlives Close.
func (l *Locker) withClosing(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.g.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

func (l *Locker) acquireRetry(ctx context.Context, name string, req queue.Request, try bool) (*Lease, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		le, err := l.newAcquisition(s, name, req, try).run(ctx)
		// A session the server already expired (a revoke the keepalive
		// loop has not noticed yet) fails the create with "lease not
		// found" before anything was written: start a new session once.
		if errors.Is(err, errStaleSession) && attempt == 0 {
			continue
		}
		return le, err
	}
}

var errStaleSession = fmt.Errorf("%w: the session lease was not found on the server", lock.ErrLost)

// record is what a Lease and an acquisition know of their record: the
// session it belongs to, its key, its create revision once known (0
// before), and whether a create attempt failed without an answer, so that
// the record may exist or appear later (see endOp).
type record struct {
	s         *session
	key       string
	rev       int64
	ambiguous bool
}

// pending is an acquisition's record with the lock-delay marker it writes
// with the record (see markerOps), if any: discarding the acquisition
// deletes both. A Lease derives its marker's key from the record's.
type pending struct {
	record
	marker string
}

// acquisition is one acquisition of any kind within one session: decide
// from a read of the queue whether the record is granted, refused, or
// which records to watch; wait for one of those to change; grant.
type acquisition struct {
	pending
	l    *Locker
	name string
	pfx  string // the prefix of name's records
	req  queue.Request
	try  bool

	// With a lock-delay, every read that can confirm the grant also
	// reads the name's markers and records (see delayReads); the latest
	// such read, answered at seen, is what delay decides on.
	markers []string
	records map[string]bool
	seen    time.Time
}

// newAcquisition prepares an acquisition of name within session s.
func (l *Locker) newAcquisition(s *session, name string, req queue.Request, try bool) *acquisition {
	pfx := l.namePrefix(name)
	a := &acquisition{pending: pending{record: record{s: s, key: l.recordKey(pfx, s, req)}}, l: l, name: name, pfx: pfx, req: req, try: try}
	if l.opts.LockDelay > 0 {
		a.marker = l.markerKey(name, a.key)
	}
	return a
}

// run creates the acquisition's record, then decides and waits until the
// record is granted or the acquisition fails.
func (a *acquisition) run(ctx context.Context) (*Lease, error) {
	v, err := a.enqueue(ctx)
	if err != nil {
		return nil, err
	}
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
	// ahead are the records ahead of the acquisition's, in queue order;
	// an exclusive acquisition reads only the last of them.
	ahead []*mvccpb.KeyValue
	next  []*mvccpb.KeyValue // the record right behind it, when read
	rev   int64              // the revision of the read
	// created says that the read was the create's own: nobody can have
	// seen the record waiting, so its admission touches nothing.
	created bool
	// admitted says that there was no read: a deletion that admits the
	// record (queue.AdmittedByDeletion) was seen.
	admitted bool
}

// decision is what decide makes of a view: granted (and whether to touch
// the record first, see queue.Touches), or which records to watch.
type decision struct {
	granted bool
	touch   bool
	watch   []string // the keys of the records to watch
	// puts says that a write of the one watched record wakes the waiter
	// too (queue.WaitsForTouch); byDeletion, that the deletion of any
	// watched record admits it (queue.AdmittedByDeletion).
	puts, byDeletion bool
}

// decide applies the rules of package queue to v: the acquisition is
// granted, refused (a TryAcquire that would wait), or watches the records
// queue.Watched names.
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

// wait blocks until a record that d watches changes (see waitChange), and
// reads the queue again. A deletion that admits the acquisition needs no
// read: the touch that grant then makes confirms the record as the read
// would, in the same round trip, and wakes the waiter behind it sooner.
func (a *acquisition) wait(ctx context.Context, d decision, rev int64) (view, error) {
	changed, err := a.waitAnyChange(ctx, d.watch, rev, d.puts)
	if err != nil {
		return view{}, err
	}
	if changed && d.byDeletion {
		return view{admitted: true}, nil
	}
	return a.read(ctx)
}

// grant turns the acquisition, admitted by the read at rev, into a held
// lease: it touches the record first if d says so, waits out a
// lock-delay, and registers the watch on the record with the session's
// watcher.
func (a *acquisition) grant(ctx context.Context, d decision, rev int64) (*Lease, error) {
	if d.touch {
		var err error
		if rev, err = a.touch(ctx); err != nil {
			return nil, a.fail(err)
		}
	}
	if err := a.delay(ctx); err != nil {
		return nil, a.fail(err)
	}
	// The lease keeps no name of its own: Name reads it from the key.
	le := &Lease{l: a.l, record: a.record}
	le.watch = a.s.watch.add(le, rev)
	if err := a.s.add(le); err != nil {
		a.s.watch.stop(le.watch)
		return nil, a.fail(err)
	}
	return le, nil
}

// fail returns err for a failed acquisition, after discarding whatever
// it may have created. A refusal before anything was created returns as
// it is.
func (a *acquisition) fail(err error) error {
	if a.rev == 0 && !a.ambiguous && (errors.Is(err, lock.ErrLocked) || errors.Is(err, lock.ErrIncompatible)) {
		return err
	}
	return a.l.discard(a.pending, err)
}

// enqueue creates the acquisition's record and returns the queue as the
// create's answer shows it.
func (a *acquisition) enqueue(ctx context.Context) (view, error) {
	resp, err := a.create(ctx)
	if err != nil {
		if isLeaseNotFound(err) {
			a.l.dropSession(a.s, telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: lease %x expired or was revoked", lock.ErrLost, int64(a.s.id))))
			return view{}, errStaleSession
		}
		// The create may have been applied with its reply lost, or be
		// applied later.
		return view{}, a.l.discard(a.pending, err)
	}
	if resp.Succeeded {
		a.noteDelayReads(resp.Responses)
	}
	var v view
	if a.req.Kind == queue.Exclusive {
		v, err = a.placeExclusive(ctx, resp)
	} else {
		v, err = a.placeQueued(ctx, resp)
	}
	if err != nil {
		return view{}, a.fail(err)
	}
	return v, nil
}

// create creates the acquisition's record, attached to the session lease.
// It is safe to repeat; a.ambiguous records that an attempt failed without
// an answer and may still be applied (docs/design/etcd.md, "Late creates").
func (a *acquisition) create(ctx context.Context) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		for {
			was := a.s.guard.rev.Load()
			var err error
			resp, err = a.createTxn(ctx, was).Commit()
			if err != nil {
				a.ambiguous = true
				a.l.opts.Logger.Debug("etcdlock: create attempt failed", "key", a.key, "err", err)
				return err
			}
			if resp.Succeeded || len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
				return nil
			}
			// No record blocks the create, so the guard did: it was
			// written since we last read it. Compare with its new value.
			now := int64(0)
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
				now = kvs[0].ModRevision
			}
			if now == was {
				return fmt.Errorf("create of %q refused with the guard unchanged at revision %d", a.key, was)
			}
			a.s.guard.note(was, now)
		}
	})
	return resp, err
}

// createTxn is one create attempt, guarded by the session's guard at
// revision was. An exclusive attempt also reads the newest two records
// (ours and our predecessor) and the oldest one, so one round trip creates
// the record and decides; a shared or semaphore attempt reads the keys of
// the whole queue. An exclusive TryAcquire creates only if name has no
// record at all.
func (a *acquisition) createTxn(ctx context.Context, was int64) clientv3.Txn {
	guard := clientv3.Compare(clientv3.ModRevision(a.s.guard.key), "=", was)
	put := clientv3.OpPut(a.key, a.l.opts.Identity, clientv3.WithLease(a.s.id))
	if a.try && a.req.Kind == queue.Exclusive {
		return a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.pfx).WithPrefix(), "=", 0), guard).
			Then(append([]clientv3.Op{put}, a.markerOps()...)...).
			Else(clientv3.OpGet(a.pfx, clientv3.WithFirstCreate()...), clientv3.OpGet(a.s.guard.key))
	}
	var then []clientv3.Op
	if a.req.Kind == queue.Exclusive {
		lastTwo := clientv3.OpGet(a.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))
		first := clientv3.OpGet(a.pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
		then = []clientv3.Op{put, lastTwo, first}
	} else {
		then = []clientv3.Op{put, clientv3.OpGet(a.pfx, queueRead()...)}
	}
	return a.l.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0), guard).
		Then(append(then, a.markerOps()...)...).
		Else(clientv3.OpGet(a.key), clientv3.OpGet(a.s.guard.key))
}

// queueRead reads the keys of a name's records in queue order: the key
// says each record's kind (see requestOf).
func queueRead(opts ...clientv3.OpOption) []clientv3.OpOption {
	return append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}, opts...)
}

// placeExclusive reads the answer of an exclusive acquisition's create:
// the record's create revision, and the record just before it, if any. A
// retried create found its record in place and looks the predecessor and
// the oldest record up explicitly.
func (a *acquisition) placeExclusive(ctx context.Context, resp *clientv3.TxnResponse) (view, error) {
	v := view{rev: resp.Header.Revision}
	switch {
	case resp.Succeeded && a.try:
		a.rev = resp.Header.Revision
		return v, nil
	case resp.Succeeded:
		a.rev = resp.Header.Revision
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 1 {
			v.ahead = kvs[1:2]
		}
		return v, a.checkHead(resp.Responses[2].GetResponseRange().Kvs)
	case a.try:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != a.key {
			if err := a.checkHead(kvs); err != nil {
				return view{}, err
			}
			return view{}, lock.ErrLocked
		}
		a.rev = kvs[0].CreateRevision
		return v, nil
	}
	if err := a.createdRev(resp); err != nil {
		return view{}, err
	}
	v, ok, err := a.recheck(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("%w: record %q was deleted", lock.ErrLost, a.key)
	}
	if err == nil && len(v.ahead) > 0 {
		err = a.readHead(ctx)
	}
	return v, err
}

// placeQueued reads the answer of a shared or semaphore acquisition's
// create: the record's create revision and the records ahead of it.
func (a *acquisition) placeQueued(ctx context.Context, resp *clientv3.TxnResponse) (view, error) {
	var v view
	if resp.Succeeded {
		a.rev = resp.Header.Revision
		v = view{rev: resp.Header.Revision, created: true}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if kv.CreateRevision < a.rev {
				v.ahead = append(v.ahead, kv)
			}
		}
	} else {
		if err := a.createdRev(resp); err != nil {
			return view{}, err
		}
		var err error
		if v, err = a.readAhead(ctx); err != nil {
			return view{}, err
		}
	}
	return v, a.checkHead(v.ahead)
}

// createdRev takes the record's create revision from the answer of a
// create that found the record in place.
func (a *acquisition) createdRev(resp *clientv3.TxnResponse) error {
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("%w: record %q vanished while it was created", lock.ErrLost, a.key)
	}
	a.rev = kvs[0].CreateRevision
	return nil
}

// checkHead refuses the acquisition, with an error wrapping
// lock.ErrIncompatible, when kvs (the oldest record of the name, or none)
// is another request of a kind that cannot share the name's queue with
// it: the oldest request decides what the name is.
func (a *acquisition) checkHead(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 || string(kvs[0].Key) == a.key {
		return nil
	}
	if why := queue.Incompatible(requestOf(kvs[0].Key), a.req); why != "" {
		return fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
	}
	return nil
}

// readHead reads the oldest record of the name and checks it (checkHead),
// for an acquisition whose create was retried.
func (a *acquisition) readHead(ctx context.Context) error {
	var resp *clientv3.GetResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Get(ctx, a.pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
		return err
	})
	if err != nil {
		return err
	}
	return a.checkHead(resp.Kvs)
}

// read reads the queue again after a wait: for an exclusive acquisition
// the record just before its own (recheck), for the others the records
// ahead of it and the one behind it (readAhead).
func (a *acquisition) read(ctx context.Context) (view, error) {
	if a.req.Kind != queue.Exclusive {
		return a.readAhead(ctx)
	}
	v, ok, err := a.recheck(ctx)
	if err == nil && !ok {
		err = a.deleted()
	}
	return v, err
}

// recheck confirms that our record still exists with its create revision
// (and so that the session lease is alive on the server) and reads the
// record just before ours. ok is false when our record is gone.
func (a *acquisition) recheck(ctx context.Context) (v view, ok bool, err error) {
	var resp *clientv3.TxnResponse
	err = a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(append([]clientv3.Op{clientv3.OpGet(a.pfx, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithMaxCreateRev(a.rev-1), clientv3.WithLimit(1))}, a.delayReads()...)...).
			Commit()
		return err
	})
	if err != nil {
		return view{}, false, err
	}
	if !resp.Succeeded {
		return view{rev: resp.Header.Revision}, false, nil
	}
	a.noteDelayReads(resp.Responses)
	return view{ahead: resp.Responses[0].GetResponseRange().Kvs, rev: resp.Header.Revision}, true, nil
}

// readAhead confirms that our record still exists with its create
// revision and reads the keys of the records ahead of it, in queue order,
// and of the one right after it (next: none or one).
func (a *acquisition) readAhead(ctx context.Context) (view, error) {
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(append([]clientv3.Op{clientv3.OpGet(a.pfx, queueRead(clientv3.WithMaxCreateRev(a.rev-1))...),
				clientv3.OpGet(a.pfx, queueRead(clientv3.WithMinCreateRev(a.rev+1), clientv3.WithLimit(1))...)}, a.delayReads()...)...).
			Commit()
		return err
	})
	if err != nil {
		return view{}, err
	}
	if !resp.Succeeded {
		return view{}, a.deleted()
	}
	a.noteDelayReads(resp.Responses)
	return view{ahead: resp.Responses[0].GetResponseRange().Kvs, next: resp.Responses[1].GetResponseRange().Kvs, rev: resp.Header.Revision}, nil
}

// touch rewrites the acquisition's record unchanged (queue.Touches), with
// the lock-delay markers' reads (delayReads), and returns the revision at
// which that confirmed the record. Guarded by the create revision, it
// never brings back a record that went, and is safe to repeat.
func (a *acquisition) touch(ctx context.Context) (int64, error) {
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(append([]clientv3.Op{clientv3.OpPut(a.key, a.l.opts.Identity, clientv3.WithLease(a.s.id))}, a.delayReads()...)...).
			Commit()
		return err
	})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, a.deleted()
	}
	a.noteDelayReads(resp.Responses)
	return resp.Header.Revision, nil
}

// deleted is the error of an acquisition whose record went while it
// waited.
func (a *acquisition) deleted() error {
	if a.s.ended() {
		return a.s.lostErr()
	}
	return fmt.Errorf("%w: record %q was deleted while waiting", lock.ErrLost, a.key)
}
