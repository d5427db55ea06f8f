package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/leasestate"
	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/lock"
)

// recordWatchDelay is how long after a grant the watch on the lease's own
// record starts.
const recordWatchDelay = 50 * time.Millisecond

// Lease is one grant of a lock, backed by one record: the key [Lease.Key],
// created at revision [Lease.Token], attached to the session lease. Its
// methods are safe for concurrent use.
type Lease struct {
	record
	l     *Locker
	watch *recordWatch     // the watch on the record, in the session's watcher
	st    leasestate.State // Done, Err (unprefixed), a release begun
}

// Name returns the lock's name.
func (le *Lease) Name() string {
	if le == nil || le.l == nil {
		return ""
	}
	return names.Between(le.pfx, len(le.l.opts.prefix), "/")
}

// Token returns the lease's fencing token: the create revision of its
// record. Revisions rise with every write to the cluster, so the token is
// greater than that of every earlier grant of this name, and never zero.
func (le *Lease) Token() fencing.Token {
	if le == nil {
		return 0
	}
	return fencing.Token(le.rev)
}

// Key returns the etcd key of the lease's record. A later acquisition of
// the name through the same Locker may take the same key again, with a
// new create revision: tell grants apart by [Lease.Token], and guard
// writes with [Lease.IsHeld].
func (le *Lease) Key() string {
	if le == nil {
		return ""
	}
	return le.key
}

// IsHeld returns the comparison "the lease's record still exists with its
// own create revision": in the If of a [clientv3.Txn], it lets the Txn's
// writes land only while this lease holds the lock. Give such a Txn a
// read, such as Then(clientv3.OpGet(le.Key())), to make it linearizable.
// For a nil or zero *Lease the comparison always fails.
func (le *Lease) IsHeld() clientv3.Cmp {
	if !le.valid() {
		return clientv3.Compare(clientv3.CreateRevision("\x00"), "=", -1) // no key has a negative revision
	}
	return clientv3.Compare(clientv3.CreateRevision(le.key), "=", le.rev)
}

// Done returns a channel closed when the lease ends (already closed for a
// nil or zero *Lease, which holds nothing).
func (le *Lease) Done() <-chan struct{} {
	if !le.valid() {
		return leasestate.Closed()
	}
	return le.st.Done()
}

// Err returns nil while the lease is held; afterwards an error wrapping
// [lock.ErrReleased] or [lock.ErrLost], with the cause of a loss. A nil or
// zero *Lease reports an error wrapping [lock.ErrInvalidConfig].
func (le *Lease) Err() error {
	if !le.valid() {
		return fmt.Errorf("etcdlock: lease: %w", errNotLease)
	}
	if err := le.st.Err(); err != nil {
		return fmt.Errorf("etcdlock: %w", err)
	}
	return nil
}

// end ends the lease once with cause, which wraps lock.ErrReleased or
// lock.ErrLost (unprefixed: the exported methods add the prefix).
func (le *Lease) end(cause error) bool {
	if !le.st.End(fmt.Errorf("lease %q (token %d): %w", le.Name(), le.rev, cause)) {
		return false
	}
	le.s.watch.stop(le.watch)
	le.s.remove(le)
	if errors.Is(cause, lock.ErrLost) {
		le.l.opts.Logger.Warn("etcdlock: lease lost", config.LogLock, le.Name(), config.LogToken, le.rev, config.LogSession, fmt.Sprintf("%x", int64(le.s.id)), config.LogErr, cause)
	}
	return true
}

// lose ends the lease with cause, a deletion of its record by someone else
// (gone) or a failure to see it while the session lives, unless Release is
// deleting it. An ambiguous lease's late create could bring the record
// back: its end is written in the background (see cleanupOp).
func (le *Lease) lose(cause error, gone bool) {
	switch {
	case le.st.Releasing() || !le.end(cause):
	case le.ambiguous && !le.s.ended():
		le.l.cleanupLater(record{s: le.s, key: le.key, ambiguous: true, slot: le.slot})
	case gone:
		le.free()
	}
}

// Release ends the lease (Done closes) and deletes its record, guarded by
// its create revision. A delete ctx does not see confirmed goes on in the
// background (docs/design/etcd.md, "Late creates"). Releasing again
// returns an error wrapping [lock.ErrReleased]; releasing a lost lease, or
// one whose record is already gone, returns one wrapping [lock.ErrLost]
// (Err too, from then on). A nil ctx, or a nil or zero *Lease, is an
// error wrapping [lock.ErrInvalidConfig].
func (le *Lease) Release(ctx context.Context) (err error) {
	if !le.valid() {
		return fmt.Errorf("etcdlock: release: %w", errNotLease)
	}
	if ctx == nil {
		return fmt.Errorf("etcdlock: release %q: %w: nil context", le.Name(), lock.ErrInvalidConfig)
	}
	ctx, end := le.l.tel.StartRelease(ctx, le.Name(), uint64(le.rev))
	defer func() { end(err) }()
	ended, first := le.st.BeginRelease()
	switch {
	case ended != nil:
		// An ambiguous lease's record is deleted by lose's cleanup.
		if errors.Is(ended, lock.ErrLost) && !le.s.ended() && !le.ambiguous {
			ctx, cancel := context.WithTimeout(ctx, le.l.closeWait())
			if _, _, err := le.deleteRecord(ctx, false); err == nil {
				le.free()
			}
			cancel()
		}
		return fmt.Errorf("etcdlock: release: %w", ended)
	case !first:
		return fmt.Errorf("etcdlock: release %q: %w (by a concurrent call)", le.Name(), lock.ErrReleased)
	}

	// A waiter may be granted the lock as soon as the delete is applied,
	// before its answer comes back: Done must be closed by then.
	if !le.end(lock.ErrReleased) {
		// The session ended the lease since BeginRelease.
		return fmt.Errorf("etcdlock: release: %w", le.st.Err())
	}
	deleted, itself, err := le.deleteRecord(ctx, true)
	if err != nil {
		r := le.record
		r.marker = "" // a release not confirmed is not clean: its marker stays
		le.l.cleanupLater(r)
		return fmt.Errorf("etcdlock: release %q: delete of the record not confirmed (retried in the background): %w", le.Name(), err)
	}
	le.free()
	if !deleted {
		lost := fmt.Errorf("lease %q (token %d): %w: record %q was already gone at release", le.Name(), le.rev, lock.ErrLost, le.key)
		le.st.LostAtRelease(lost)
		return fmt.Errorf("etcdlock: release: %w", lost)
	}
	if itself && !le.ambiguous && le.seq != 0 { // a resumed record's seq is 0
		le.s.keys.reuse(le.pfx, le.seq)
	}
	return nil
}

// deleteRecord deletes the record if it still has the lease's create
// revision, retrying until ctx is done, and reports whether it did, and
// whether this answer did it (itself) rather than an earlier attempt. It
// writes the session's guard after an ambiguous create (see cleanupOp),
// and a clean release deletes the lock-delay marker too: a record already
// gone leaves its marker for the next grant to wait on.
func (le *Lease) deleteRecord(ctx context.Context, clean bool) (deleted, itself bool, err error) {
	held := []clientv3.Op{clientv3.OpDelete(le.key)}
	if clean && le.marker != "" {
		held = append(held, clientv3.OpDelete(le.marker))
	}
	var orElse []clientv3.Op
	if le.ambiguous {
		guard := clientv3.OpPut(le.s.guard.key, "", clientv3.WithLease(le.s.id))
		held, orElse = append(held, guard), []clientv3.Op{clientv3.OpDelete(le.key), guard}
	}
	var failed bool
	resp, err := call(ctx, le.l, nil, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		resp, err := le.l.client.Txn(ctx).If(le.IsHeld(), leaseIs(le.key, le.s.id)).Then(held...).Else(orElse...).Commit()
		if le.ambiguous && isLeaseNotFound(err) {
			return nil, nil // the session lease, and so the record, is gone
		}
		failed = failed || err != nil
		return resp, err
	})
	switch {
	case err != nil:
		return false, false, err
	case resp == nil:
		return failed, false, nil
	}
	if le.ambiguous {
		le.s.guard.raise(resp.Header.Revision)
	}
	// After a request with no answer, a record already gone was most
	// likely deleted by that request.
	return resp.Succeeded || failed, resp.Succeeded, nil
}
