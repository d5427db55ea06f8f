package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.Resumer = (*Locker)(nil)

// Ticket returns what [Locker.Resume] needs: "etcd/1 <token> <session
// lease ID in hexadecimal> <record key>". It fails for an ended lease,
// and (wrapping [lock.ErrUnsupported]) for one whose create went
// unanswered or of [LayoutConcurrency], whose key names its session.
func (le *Lease) Ticket() (lock.Ticket, error) {
	if err := le.Err(); err != nil {
		return "", fmt.Errorf("etcdlock: ticket: %w", err)
	}
	if le.ambiguous || le.l.opts.layout == LayoutConcurrency {
		return "", fmt.Errorf("etcdlock: ticket %q: %w: unanswered create or layout %s", le.Name(), lock.ErrUnsupported, le.l.opts.layout)
	}
	return lock.Ticket(fmt.Sprintf("etcd/1 %d %x %s", le.rev, int64(le.s.id), le.key)), nil
}

// parseTicket reads what Ticket writes; ok is false for anything else.
func parseTicket(t lock.Ticket) (rev int64, old clientv3.LeaseID, key string, ok bool) {
	f := strings.SplitN(strings.TrimSpace(string(t)), " ", 4)
	if len(f) != 4 || f[0] != "etcd/1" {
		return 0, 0, "", false
	}
	rev, rerr := strconv.ParseInt(f[1], 10, 64)
	id, ierr := strconv.ParseInt(f[2], 16, 64)
	return rev, clientv3.LeaseID(id), f[3], rerr == nil && ierr == nil && rev > 0 && id > 0
}

// Resume takes over the grant t names (see [lock.Resume]): one
// transaction moves its record, if it still has the ticket's token and
// lease, to this Locker's session lease, with no lock-delay. The old
// process's lease, if it still runs, ends with [lock.ErrLost] when it sees
// the move (docs/design/etcd.md, "Resume").
func (l *Locker) Resume(ctx context.Context, name string, t lock.Ticket) (lock.Lease, error) {
	if err := l.begin(ctx, "resume", name); err != nil {
		return nil, err
	}
	rev, old, key, ok := parseTicket(t)
	rest, mine := strings.CutPrefix(key, l.namePrefix(name))
	if !ok || !mine || rest == "" || strings.ContainsAny(rest, "/ \t\r\n") || l.opts.layout == LayoutConcurrency {
		return nil, fmt.Errorf("etcdlock: resume %q: %w: not a ticket of this name, prefix and layout", name, lock.ErrInvalidConfig)
	}
	r := record{pfx: l.namePrefix(name), key: key, rev: rev}
	var le *Lease
	err := l.bounded(ctx, func(ctx context.Context) (err error) {
		le, err = l.resume(ctx, r, old)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcdlock: resume %q: %w", name, err)
	}
	l.opts.Logger.Info("etcdlock: lease resumed", "lock", name, "token", le.rev, "session", fmt.Sprintf("%x", int64(le.s.id)))
	return le, nil
}

func (l *Locker) resume(ctx context.Context, r record, old clientv3.LeaseID) (*Lease, error) {
	s, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	r.s = s
	if s.id == old {
		return nil, fmt.Errorf("%w: this Locker holds record %q", lock.ErrLocked, r.key)
	} else if l.opts.LockDelay > 0 {
		r.marker = l.delayPrefix(r.pfx) + strings.TrimPrefix(r.key, r.pfx)
	}
	unanswered := false
	resp, err := call(ctx, l, s, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		resp, err := l.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", r.rev), leaseIs(r.key, old)).
			Then(clientv3.OpPut(r.key, l.opts.Identity, clientv3.WithLease(s.id))).Else(clientv3.OpGet(r.key)).Commit()
		unanswered = unanswered || err != nil && !isLeaseNotFound(err)
		return resp, err
	})
	if err != nil && (unanswered || isLeaseNotFound(err)) {
		// A move may still be applied, or the session is gone: end it.
		l.spawn(func() {
			l.dropSession(s, telemetry.WithReason(telemetry.Revoked, fmt.Errorf("%w: a resume of %q failed: %w", lock.ErrLost, r.key, err)))
			s.revokeLost()
		})
	}
	if err != nil {
		return nil, err
	}
	// After an unanswered attempt the record may be this session's already.
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); !resp.Succeeded && (len(kvs) == 0 || kvs[0].CreateRevision != r.rev || kvs[0].Lease != int64(s.id)) {
		return nil, fmt.Errorf("%w: record %q of token %d is gone, or another Locker resumed it", lock.ErrLost, r.key, r.rev)
	}
	le := &Lease{l: l, record: r}
	le.watch = s.watch.add(le, resp.Header.Revision)
	if err := s.add(le); err != nil {
		s.watch.stop(le.watch)
		return nil, err
	}
	return le, nil
}

func leaseIs(key string, id clientv3.LeaseID) clientv3.Cmp {
	return clientv3.Compare(clientv3.LeaseValue(key), "=", id)
}
