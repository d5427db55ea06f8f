package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/leasestate"
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
	if err != nil && parent.Err() == nil && l.closing.Err() != nil {
		err = lock.ErrClosed
	}
	var token uint64
	if le != nil {
		token = uint64(le.rev)
	}
	if hold := op.End(config.Outcome(parent, err), token, err); le != nil {
		le.st.OnEnd(func(err error) { l.countEnd(le, hold, err) })
	}
	return le, err
}

// countEnd records the end of le, which ended with err. A deleted record
// is what etcd shows both for a grant revoked by another client and for
// the end of the session lease (whose expiry deletes every record
// attached to it), and the watch usually reports the deletion before the
// keepalive loop hears that the lease is gone: so for a deletion, the
// reason is counted once the session lease has been looked up, in the
// background, expired if it is gone.
func (l *Locker) countEnd(le *Lease, hold telemetry.Hold, err error) {
	reason := config.EndReason(err)
	if reason != telemetry.Deleted || !l.tel.Metrics() {
		hold.End(reason)
		return
	}
	hold.End("")
	if !l.spawn(func() {
		ctx, cancel := context.WithTimeout(l.life, l.closeWait())
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
	stop := context.AfterFunc(l.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

func (l *Locker) acquireRetry(ctx context.Context, name string, req queue.Request, try bool) (*Lease, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		le, err := l.acquireIn(ctx, s, name, req, try)
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

// acquisition is one acquisition of any kind within one session.
type acquisition struct {
	record
	l    *Locker
	name string
	pfx  string // the prefix of name's records
	req  queue.Request
	try  bool
}

// acquireIn runs one acquisition within session s.
func (l *Locker) acquireIn(ctx context.Context, s *session, name string, req queue.Request, try bool) (*Lease, error) {
	a := &acquisition{record: record{s: s, key: l.recordKey(name, s, req)}, l: l, name: name, pfx: l.namePrefix(name), req: req, try: try}
	resp, err := a.create(ctx)
	if err != nil {
		if isLeaseNotFound(err) {
			l.dropSession(s, telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: lease %x expired or was revoked", lock.ErrLost, int64(s.id))))
			return nil, errStaleSession
		}
		// The create may have been applied with its reply lost, or be
		// applied later.
		return nil, l.discard(a.record, err)
	}
	var readRev int64
	if req.Kind == queue.Exclusive {
		readRev, err = a.exclusive(ctx, resp)
	} else {
		readRev, err = a.queued(ctx, resp)
	}
	switch {
	case a.rev == 0 && !a.ambiguous && (errors.Is(err, lock.ErrLocked) || errors.Is(err, lock.ErrIncompatible)):
		return nil, err // nothing was created
	case err != nil:
		return nil, l.discard(a.record, err)
	}
	le := &Lease{l: l, record: a.record, name: a.name, st: leasestate.New()}
	if err := l.grant(le, readRev); err != nil {
		return nil, l.discard(a.record, err)
	}
	return le, nil
}

// create creates the acquisition's record, attached to the session lease.
//
// The create is safe to repeat: a retry whose first attempt was applied
// finds the record in place (the Else branch) instead of creating a second
// one. An attempt that failed without an answer may still be applied at
// any later time, even after the acquisition has ended and its record was
// deleted: the guard comparison makes such a late attempt fail once the
// acquisition's end has written the guard (see endOp). a.ambiguous records
// that such an attempt exists.
func (a *acquisition) create(ctx context.Context) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		for {
			was := a.s.guardRev.Load()
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
			a.s.noteGuard(was, now)
		}
	})
	return resp, err
}

// createTxn is one create attempt, guarded by the session's guard at
// revision was. An exclusive Acquire's attempt also reads the newest two
// records by create revision and the oldest one: right after the put the
// newest two are ours and our predecessor, so one round trip both creates
// the record and tells whether we own the lock and whom to watch, and the
// oldest one says what the name is (see queue.Incompatible). A shared or
// semaphore attempt reads the keys of the whole queue instead, which its
// rule needs. An exclusive TryAcquire's creates only if name has no record
// at all; a retry whose first attempt did create finds its own record
// first.
func (a *acquisition) createTxn(ctx context.Context, was int64) clientv3.Txn {
	guard := clientv3.Compare(clientv3.ModRevision(a.s.guardKey), "=", was)
	put := clientv3.OpPut(a.key, a.l.opts.Identity, clientv3.WithLease(a.s.id))
	if a.try && a.req.Kind == queue.Exclusive {
		return a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.pfx).WithPrefix(), "=", 0), guard).
			Then(put).
			Else(clientv3.OpGet(a.pfx, clientv3.WithFirstCreate()...), clientv3.OpGet(a.s.guardKey))
	}
	var then []clientv3.Op
	if a.req.Kind == queue.Exclusive {
		lastTwo := clientv3.OpGet(a.pfx, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))
		first := clientv3.OpGet(a.pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
		then = []clientv3.Op{put, lastTwo, first}
	} else {
		then = []clientv3.Op{put, clientv3.OpGet(a.pfx, queueRead()...)}
	}
	return a.l.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0), guard).
		Then(then...).
		Else(clientv3.OpGet(a.key), clientv3.OpGet(a.s.guardKey))
}

// queueRead reads the keys of a name's records in queue order: the key
// says each record's kind (see requestOf).
func queueRead(opts ...clientv3.OpOption) []clientv3.OpOption {
	return append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}, opts...)
}

// exclusive waits for an exclusive acquisition's turn, from its create's
// answer, and returns the revision at which the grant was confirmed.
func (a *acquisition) exclusive(ctx context.Context, resp *clientv3.TxnResponse) (int64, error) {
	pred, readRev, err := a.place(ctx, resp)
	if err != nil || pred == nil {
		return readRev, err
	}
	return a.wait(ctx, pred, readRev)
}

// place reads the answer of an exclusive acquisition's create: the
// record's create revision, the record just before it (nil when it holds
// the lock), and the revision at which that was read. A retried create
// found its record in place and looks the predecessor and the oldest
// record up explicitly.
func (a *acquisition) place(ctx context.Context, resp *clientv3.TxnResponse) (pred *mvccpb.KeyValue, readRev int64, err error) {
	readRev = resp.Header.Revision
	switch {
	case resp.Succeeded && a.try:
		a.rev = resp.Header.Revision
		return nil, readRev, nil
	case resp.Succeeded:
		a.rev = resp.Header.Revision
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 1 {
			pred = kvs[1]
		}
		return pred, readRev, a.checkHead(resp.Responses[2].GetResponseRange().Kvs)
	case a.try:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != a.key {
			if err := a.checkHead(kvs); err != nil {
				return nil, 0, err
			}
			return nil, 0, lock.ErrLocked
		}
		a.rev = kvs[0].CreateRevision
		return nil, readRev, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, 0, fmt.Errorf("%w: record %q vanished while it was created", lock.ErrLost, a.key)
	}
	a.rev = kvs[0].CreateRevision
	pred, readRev, ok, err := a.recheck(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("%w: record %q was deleted", lock.ErrLost, a.key)
	}
	if err == nil && pred != nil {
		err = a.readHead(ctx)
	}
	return pred, readRev, err
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

// queued waits for a shared or semaphore acquisition's turn, from its
// create's answer, and returns the revision at which the grant was
// confirmed: the rules of package queue applied to the records ahead of
// its own, read again after each deletion of a record it watches.
func (a *acquisition) queued(ctx context.Context, resp *clientv3.TxnResponse) (int64, error) {
	var ahead []*mvccpb.KeyValue
	readRev := resp.Header.Revision
	if resp.Succeeded {
		a.rev = resp.Header.Revision
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if kv.CreateRevision < a.rev {
				ahead = append(ahead, kv)
			}
		}
	} else {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return 0, fmt.Errorf("%w: record %q vanished while it was created", lock.ErrLost, a.key)
		}
		a.rev = kvs[0].CreateRevision
		var err error
		if ahead, readRev, err = a.readAhead(ctx); err != nil {
			return 0, err
		}
	}
	if err := a.checkHead(ahead); err != nil {
		return 0, err
	}
	checkCreated := true
	for {
		q := append(requestsOf(ahead), a.req)
		if queue.Admitted(q, len(ahead)) {
			return readRev, nil
		}
		if a.try {
			return 0, lock.ErrLocked
		}
		var keys []string
		for _, i := range queue.Watched(q, len(ahead)) {
			keys = append(keys, string(ahead[i].Key))
		}
		gone, createdLate, err := a.l.waitAnyDelete(ctx, a.s, keys, readRev, checkCreated)
		if err != nil {
			return 0, err
		}
		if ahead, readRev, err = a.readAhead(ctx); err != nil {
			return 0, err
		}
		// As in wait: skip the check of the watches' creation revision
		// once after it made us read again for nothing.
		checkCreated = !createdLate || gone
	}
}

// readAhead confirms that our record still exists with its create
// revision and reads the keys of the records ahead of it, in queue order.
func (a *acquisition) readAhead(ctx context.Context) ([]*mvccpb.KeyValue, int64, error) {
	var resp *clientv3.TxnResponse
	err := a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(clientv3.OpGet(a.pfx, queueRead(clientv3.WithMaxCreateRev(a.rev-1))...)).
			Commit()
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if !resp.Succeeded {
		return nil, 0, a.deleted()
	}
	return resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision, nil
}

// deleted is the error of an acquisition whose record went while it
// waited.
func (a *acquisition) deleted() error {
	if a.s.ended() {
		return a.s.lostErr()
	}
	return fmt.Errorf("%w: record %q was deleted while waiting", lock.ErrLost, a.key)
}

// waitAnyDelete is waitDelete on several keys at once: it returns when the
// first of them returns, and stops the others.
func (l *Locker) waitAnyDelete(ctx context.Context, s *session, keys []string, fromRev int64, checkCreated bool) (gone, createdLate bool, err error) {
	if len(keys) == 1 {
		return l.waitDelete(ctx, s, keys[0], fromRev, checkCreated)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		gone, createdLate bool
		err               error
	}
	results := make(chan result, len(keys))
	for _, key := range keys {
		go func() {
			var r result
			r.gone, r.createdLate, r.err = l.waitDelete(ctx, s, key, fromRev, checkCreated)
			results <- r
		}()
	}
	first := <-results
	cancel()
	for range len(keys) - 1 {
		<-results
	}
	return first.gone, first.createdLate, first.err
}

// wait blocks until no record precedes ours, following the chain of
// predecessors, and returns the revision at which that was confirmed.
func (a *acquisition) wait(ctx context.Context, pred *mvccpb.KeyValue, readRev int64) (int64, error) {
	checkCreated := true
	for pred != nil {
		gone, createdLate, err := a.l.waitDelete(ctx, a.s, string(pred.Key), readRev, checkCreated)
		if err != nil {
			return 0, err
		}
		prevKey := string(pred.Key)
		var ok bool
		pred, readRev, ok, err = a.recheck(ctx)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, a.deleted()
		}
		// Checking the watch's creation revision again for the same
		// predecessor could loop under unrelated write load; once per
		// predecessor is enough to skip most of the server's resync delay.
		checkCreated = !(createdLate && !gone && pred != nil && string(pred.Key) == prevKey)
	}
	return readRev, nil
}

// waitDelete watches key from fromRev+1 until it is deleted. fromRev is the
// revision of the read that found key, so no deletion after that read is
// missed, and the watch starts ahead of the server's current revision
// whenever no write came in between: such a watch is served at once, while
// one that starts behind waits for the server's periodic resync (about
// every 100ms). When checkCreated is set and the watch was created behind
// the current revision, waitDelete returns early (createdLate) so that the
// caller can re-read instead of waiting for the resync.
func (l *Locker) waitDelete(ctx context.Context, s *session, key string, fromRev int64, checkCreated bool) (gone, createdLate bool, err error) {
	// A member cut off from the leader would keep such a watch open and
	// silent; requiring a leader makes it fail, and the caller re-reads
	// and watches again, through whichever member the client picks.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.life))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(fromRev + 1), clientv3.WithFilterPut()}
	if checkCreated {
		opts = append(opts, clientv3.WithCreatedNotify())
	}
	// Watch blocks until the server confirms the watch, which a member
	// that stopped answering never does: create it aside, so that the
	// wait stays interruptible, and wait for that goroutine on return.
	ready := make(chan clientv3.WatchChan, 1)
	go func() { ready <- l.client.Watch(wctx, key, opts...) }()
	var wch clientv3.WatchChan
	defer func() {
		if wch == nil {
			cancel()
			<-ready
		}
	}()
	// A watch whose member stopped answering stays silent; re-reading
	// after a TTL of silence bounds the delay that causes, without
	// depending on the client's connection pings.
	silence := time.NewTimer(l.opts.ttl)
	defer silence.Stop()
	for {
		select {
		case wch = <-ready:
			continue
		case <-silence.C:
			return false, false, nil
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-l.closing.Done():
			return false, false, lock.ErrClosed
		case <-s.done:
			return false, false, s.lostErr()
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				// Re-read and start a new watch.
				return false, false, nil
			}
			silence.Reset(l.opts.ttl)
			if wr.Created {
				if wr.Header.Revision > fromRev {
					return false, true, nil
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == key {
					return true, false, nil
				}
			}
		}
	}
}

// recheck confirms that our record still exists with its create revision
// (and so that the session lease is alive on the server) and reads the
// record just before ours. ok is false when our record is gone.
func (a *acquisition) recheck(ctx context.Context) (pred *mvccpb.KeyValue, rev int64, ok bool, err error) {
	var resp *clientv3.TxnResponse
	err = a.l.call(ctx, a.s, func(ctx context.Context) error {
		var err error
		resp, err = a.l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(clientv3.OpGet(a.pfx, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithMaxCreateRev(a.rev-1), clientv3.WithLimit(1))).
			Commit()
		return err
	})
	if err != nil {
		return nil, 0, false, err
	}
	if !resp.Succeeded {
		return nil, resp.Header.Revision, false, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		pred = kvs[0]
	}
	return pred, resp.Header.Revision, true, nil
}

// grant turns an acquisition confirmed at readRev into a held lease and
// registers the watch on its record with the session's watcher.
func (l *Locker) grant(le *Lease, readRev int64) error {
	s := le.s
	le.stopWatch = s.watch.add(le, readRev)
	if err := s.add(le); err != nil {
		le.stopWatch()
		return err
	}
	return nil
}
