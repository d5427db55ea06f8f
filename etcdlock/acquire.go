package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/leasestate"
	"github.com/fencelock/fencelock/lock"
)

// retryDelay spaces out retries of a request that failed without an answer.
const retryDelay = 50 * time.Millisecond

// acquire implements Acquire (try == false) and TryAcquire (try == true).
func (l *Locker) acquire(ctx context.Context, name string, try bool) (*Lease, error) {
	if err := lock.ValidateName(name); err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := l.withClosing(ctx)
	defer cancel()
	le, err := l.acquireRetry(ctx, name, try)
	if err != nil && parent.Err() == nil && l.closing.Err() != nil {
		err = lock.ErrClosed
	}
	return le, err
}

// withClosing returns a context that is also cancelled when Close starts,
// so that no request of a call outlives Close.
func (l *Locker) withClosing(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

func (l *Locker) acquireRetry(ctx context.Context, name string, try bool) (*Lease, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		le, err := l.acquireIn(ctx, s, name, try)
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

// acquireIn runs one acquisition within session s.
func (l *Locker) acquireIn(ctx context.Context, s *session, name string, try bool) (*Lease, error) {
	pfx := l.namePrefix(name)
	key := l.recordKey(name, s)
	put := clientv3.OpPut(key, l.opts.identity, clientv3.WithLease(s.id))
	// The newest two records by create revision: right after our put they
	// are ours and our predecessor, so one round trip both creates the
	// record and tells whether we own the lock and whom to watch.
	lastTwo := clientv3.OpGet(pfx, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))

	// The create is safe to repeat: a retry whose first attempt was
	// applied finds the record in place (the Else branch) instead of
	// creating a second one. An attempt that failed without an answer may
	// still be applied at any later time, even after the acquisition has
	// ended and its record was deleted: the guard comparison makes such a
	// late attempt fail once the acquisition's end has written the guard
	// (see endOp). ambiguous records that such an attempt exists.
	var (
		resp      *clientv3.TxnResponse
		ambiguous bool
	)
	err := l.do(ctx, s, func(ctx context.Context) error {
		for {
			was := s.guardRev.Load()
			guard := clientv3.Compare(clientv3.ModRevision(s.guardKey), "=", was)
			var txn clientv3.Txn
			if try {
				// Create only if name has no record at all; a retry whose
				// first attempt did create finds its own record first.
				txn = l.client.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(pfx).WithPrefix(), "=", 0), guard).
					Then(put).
					Else(clientv3.OpGet(pfx, clientv3.WithFirstCreate()...), clientv3.OpGet(s.guardKey))
			} else {
				txn = l.client.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), guard).
					Then(put, lastTwo).
					Else(clientv3.OpGet(key), clientv3.OpGet(s.guardKey))
			}
			var err error
			resp, err = txn.Commit()
			if err != nil {
				ambiguous = true
				l.opts.logger.Debug("etcdlock: create attempt failed", "key", key, "err", err)
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
				return fmt.Errorf("create of %q refused with the guard unchanged at revision %d", key, was)
			}
			s.noteGuard(was, now)
		}
	})
	if err != nil {
		if isLeaseNotFound(err) {
			l.dropSession(s, fmt.Errorf("%w: lease %x expired or was revoked", lock.ErrLost, int64(s.id)))
			return nil, errStaleSession
		}
		// The create may have been applied with its reply lost, or be
		// applied later.
		return nil, l.abandon(s, key, 0, true, err)
	}

	var (
		myRev       int64
		pred        *mvccpb.KeyValue
		needRecheck bool
	)
	switch {
	case try && resp.Succeeded:
		myRev = resp.Header.Revision
	case try:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != key {
			if ambiguous {
				// An earlier attempt may still create the record.
				return nil, l.abandon(s, key, 0, true, lock.ErrLocked)
			}
			return nil, lock.ErrLocked
		}
		myRev = kvs[0].CreateRevision
	case resp.Succeeded:
		myRev = resp.Header.Revision
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 1 {
			pred = kvs[1]
		}
	default:
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, fmt.Errorf("%w: record %q vanished while it was created", lock.ErrLost, key)
		}
		myRev = kvs[0].CreateRevision
		// Our record existed already: a retried create. Look the
		// predecessor up explicitly.
		needRecheck = true
	}
	readRev := resp.Header.Revision

	le := &Lease{l: l, s: s, name: name, key: key, rev: myRev, ambiguous: ambiguous, st: leasestate.New()}
	if needRecheck {
		var ok bool
		pred, readRev, ok, err = l.recheck(ctx, s, pfx, key, myRev)
		if err == nil && !ok {
			err = fmt.Errorf("%w: record %q was deleted", lock.ErrLost, key)
		}
		if err != nil {
			return nil, l.abandon(s, key, myRev, ambiguous, err)
		}
	}
	if pred != nil {
		if readRev, err = l.wait(ctx, s, pfx, key, myRev, pred, readRev); err != nil {
			return nil, l.abandon(s, key, myRev, ambiguous, err)
		}
	}
	if err := l.grant(le, readRev); err != nil {
		return nil, l.abandon(s, key, myRev, ambiguous, err)
	}
	return le, nil
}

// wait blocks until no record precedes ours, following the chain of
// predecessors, and returns the revision at which that was confirmed.
func (l *Locker) wait(ctx context.Context, s *session, pfx, key string, myRev int64, pred *mvccpb.KeyValue, readRev int64) (int64, error) {
	checkCreated := true
	for pred != nil {
		gone, createdLate, err := l.waitDelete(ctx, s, string(pred.Key), readRev, checkCreated)
		if err != nil {
			return 0, err
		}
		prevKey := string(pred.Key)
		var ok bool
		pred, readRev, ok, err = l.recheck(ctx, s, pfx, key, myRev)
		if err != nil {
			return 0, err
		}
		if !ok {
			if s.ended() {
				return 0, s.lostErr()
			}
			return 0, fmt.Errorf("%w: record %q was deleted while waiting", lock.ErrLost, key)
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
func (l *Locker) recheck(ctx context.Context, s *session, pfx, key string, myRev int64) (pred *mvccpb.KeyValue, rev int64, ok bool, err error) {
	var resp *clientv3.TxnResponse
	err = l.do(ctx, s, func(ctx context.Context) error {
		var err error
		resp, err = l.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", myRev)).
			Then(clientv3.OpGet(pfx, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithMaxCreateRev(myRev-1), clientv3.WithLimit(1))).
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

// do runs op until it succeeds, giving each attempt at most
// requestTimeout, and retrying failures that may pass on a second try
// (see retryable) until ctx is done, the Locker closes or, when s is not
// nil, the session ends. An attempt that times out is retried at once: the
// client sends the next one to another member, which matters when the one
// it used stopped answering without closing the connection. Only ops that
// are safe to repeat go through do.
func (l *Locker) do(ctx context.Context, s *session, op func(context.Context) error) error {
	var sessionDone <-chan struct{}
	if s != nil {
		sessionDone = s.done
	}
	for {
		actx, cancel := context.WithTimeout(ctx, l.requestTimeout())
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		delay := retryDelay
		switch {
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			delay = 0
		case !retryable(err):
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-l.closing.Done():
			t.Stop()
			return lock.ErrClosed
		case <-sessionDone:
			t.Stop()
			return s.lostErr()
		}
	}
}

// requestTimeout bounds one attempt of a request: a third of the TTL, and
// at least a second.
func (l *Locker) requestTimeout() time.Duration { return max(l.opts.ttl/3, time.Second) }

// abandon deletes the record of an acquisition that will not be reported
// and returns err. ambiguous says a create attempt failed without an
// answer, so that the record may exist, or appear later. When the session
// ended the lease takes the record with it (and makes any later create
// fail), so nothing is sent.
func (l *Locker) abandon(s *session, key string, rev int64, ambiguous bool, err error) error {
	if !s.ended() && !errors.Is(err, lock.ErrClosed) {
		l.cleanup(s, key, rev, ambiguous)
	}
	return err
}

// cleanup runs cleanupOp with a fresh bounded context, and when that fails
// hands it to cleanupLater.
func (l *Locker) cleanup(s *session, key string, rev int64, ambiguous bool) {
	ctx, cancel := context.WithTimeout(l.life, min(l.closeWait(), 2*time.Second))
	err := l.do(ctx, nil, l.cleanupOp(s, key, rev, ambiguous))
	cancel()
	if err != nil {
		l.opts.logger.Debug("etcdlock: cleanup failed; retrying in the background", "key", key, "err", err)
		l.cleanupLater(s, key, rev, ambiguous)
	}
}

// cleanupLater keeps trying cleanupOp in the background for a TTL plus the
// loss margin, or until the Locker closes. If it still has not succeeded
// and the session is alive, the record could block the lock for as long
// as the session lives, so cleanupLater ends the session and revokes its
// lease: the server deletes the record when the lease goes, at the latest
// a TTL later.
func (l *Locker) cleanupLater(s *session, key string, rev int64, ambiguous bool) {
	l.spawn(func() {
		ctx, cancel := context.WithTimeout(l.life, l.opts.ttl+l.opts.lossMargin)
		defer cancel()
		err := l.do(ctx, nil, l.cleanupOp(s, key, rev, ambiguous))
		if err == nil || l.life.Err() != nil || s.ended() {
			return
		}
		l.opts.logger.Warn("etcdlock: gave up deleting a record; ending the session so that its lease takes the record", "key", key, "err", err)
		l.dropSession(s, fmt.Errorf("%w: record %q could not be deleted within %v: %w", lock.ErrLost, key, l.opts.ttl+l.opts.lossMargin, err))
		s.revokeLost()
	})
}

// cleanupOp deletes an acquisition's record. Record keys are unique per
// acquisition, so whatever is found under key belongs to it.
//
// When ambiguous is false every create attempt was answered, so no attempt
// can be applied later; the delete is guarded by the record's create
// revision rev when it is known (rev > 0). Otherwise cleanupOp is endOp.
func (l *Locker) cleanupOp(s *session, key string, rev int64, ambiguous bool) func(context.Context) error {
	if ambiguous {
		return func(ctx context.Context) error { return l.endOp(ctx, s, key) }
	}
	return func(ctx context.Context) error {
		var err error
		if rev > 0 {
			_, err = l.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
				Then(clientv3.OpDelete(key)).Commit()
		} else {
			_, err = l.client.Delete(ctx, key)
		}
		return err
	}
}

// endOp ends an acquisition with an ambiguous create: in one transaction
// it deletes key, whatever record is there, and writes the session's guard.
// Every create attempt of the acquisition was sent before and compares the
// guard's mod revision with an older value, so none of them can be applied
// after this transaction, and none applied before it survives it. A session
// lease that is gone took the record, and makes any create fail: that
// counts as done.
func (l *Locker) endOp(ctx context.Context, s *session, key string) error {
	resp, err := l.client.Txn(ctx).
		Then(clientv3.OpDelete(key), clientv3.OpPut(s.guardKey, "", clientv3.WithLease(s.id))).
		Commit()
	switch {
	case isLeaseNotFound(err):
		return nil
	case err != nil:
		return err
	}
	s.raiseGuard(resp.Header.Revision)
	return nil
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
