package etcdlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Locker grants leases on named locks stored in etcd. It is safe for
// concurrent use. Create it with [New] or [lock.Open].
type Locker struct {
	client     *clientv3.Client
	opts       *options
	ownsClient bool
	clk        clock.Clock          // the loss deadline's clock: clock.Real() but in unit tests
	tel        *telemetry.Telemetry // metrics and spans; nil records nothing
	tls        *tlsWatch            // the TLS handshakes of a client the Locker made; nil for a borrowed one
	g          *group               // what Close stops, and how

	sessSem chan struct{} // held while a session is being created
	down    chan struct{} // closed when the first Close has finished

	mu     sync.Mutex
	closed bool
	sess   *session
}

var (
	_ lock.Locker   = (*Locker)(nil)
	_ lock.Observer = (*Locker)(nil)
	_ lock.Lease    = (*Lease)(nil)
)

// New returns a Locker that keeps its locks in etcd through client. The
// Locker borrows client: Close does not close it, and client must stay open
// until Close returns. A nil client (or a zero clientv3.Client, not made by
// clientv3.New) or a bad option is an error wrapping
// [lock.ErrInvalidConfig]. New does no I/O: the session lease is granted
// by the first Acquire or TryAcquire.
//
// Configure client with DialKeepAliveTime and DialKeepAliveTimeout (for
// instance 5s and 2s): without gRPC pings, a watch on a member that stops
// answering without closing its connection stays silent, and a waiter on
// it is served late. TLS and authentication are the client's (see "Keys
// and security" in the package documentation). A request the cluster
// refuses fails at once with an error wrapping [lock.ErrPermission]; a TLS
// handshake the client cannot complete shows as the client's connection
// error at the end of the call's context or request timeout, since the
// Locker cannot see a borrowed client's handshakes.
func New(client *clientv3.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("etcdlock: new: %w: nil client", lock.ErrInvalidConfig)
	}
	if nilcheck.IsNil(client.KV) || nilcheck.IsNil(client.Lease) || nilcheck.IsNil(client.Watcher) {
		return nil, fmt.Errorf("etcdlock: new: %w: client not created by clientv3.New", lock.ErrInvalidConfig)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: new: %w", err)
	}
	return newLocker(client, o), nil
}

func newLocker(client *clientv3.Client, o *options) *Locker {
	l := &Locker{client: client, opts: o, clk: clock.Real(), sessSem: make(chan struct{}, 1), down: make(chan struct{})}
	tel, err := telemetry.New(backend, o.Telemetry)
	if err != nil {
		o.Logger.Warn("etcdlock: some instruments are not recorded", config.LogErr, err)
	}
	l.tel = tel
	l.g = newGroup()
	return l
}

// Identity returns the identity stored in the Locker's lock records.
func (l *Locker) Identity() string {
	if l.usable(context.Background()) != nil {
		return ""
	}
	return l.opts.Identity
}

// Prefix returns the key prefix of the Locker's records, ending in "/".
func (l *Locker) Prefix() string {
	if l.usable(context.Background()) != nil {
		return ""
	}
	return l.opts.prefix
}

// TTL returns the TTL of the Locker's session leases.
func (l *Locker) TTL() time.Duration {
	if l.usable(context.Background()) != nil {
		return 0
	}
	return l.opts.ttl
}

// SessionLease returns the ID of the etcd lease behind the Locker's
// current session, the one its records are attached to and its log lines
// name, and false when it has no live session: before the first grant,
// after a loss until the next grant, after Close. Revoking that lease
// (etcdctl lease revoke) ends every lease of the session.
func (l *Locker) SessionLease() (clientv3.LeaseID, bool) {
	if l.usable(context.Background()) != nil {
		return 0, false
	}
	s, _ := l.currentSession()
	if s == nil {
		return 0, false
	}
	return s.id, true
}

// namePrefix returns the key prefix of name's records. A '#' cannot appear
// in a lock name, so the records of "a" ("…a/#…") and of "a/b" ("…a/b/#…")
// never share a prefix range.
func (l *Locker) namePrefix(name string) string { return l.opts.prefix + name + "/#" }

// recordKey names one acquisition's record under pfx, name's prefix, by
// the session lease, a number the session gives it (session.number) and,
// for a shared or semaphore request, its kind's tag after a '~'
// (docs/design/etcd.md, "Key layout").
func (l *Locker) recordKey(pfx string, s *session, req queue.Request) string {
	key := fmt.Sprintf("%s%016x-%x", pfx, int64(s.id), s.number(pfx))
	if tag := req.Tag(); tag != "" {
		key += "~" + tag
	}
	return key
}

// requestOf returns the kind of request a record's key names (see
// recordKey). A key whose tag does not parse, which this package never
// writes, counts as an exclusive request: it makes everyone behind it
// wait, never admits anyone.
func requestOf(key []byte) queue.Request {
	rest := key[bytes.LastIndexByte(key, '#')+1:]
	i := bytes.IndexByte(rest, '~')
	if i < 0 {
		return queue.ExclusiveRequest
	}
	if r, ok := queue.ParseTag(string(rest[i+1:])); ok {
		return r
	}
	return queue.ExclusiveRequest
}

// requestsOf returns the kinds of requests of records in queue order.
func requestsOf(kvs []*mvccpb.KeyValue) []queue.Request {
	q := make([]queue.Request, len(kvs))
	for i, kv := range kvs {
		q[i] = requestOf(kv.Key)
	}
	return q
}

// holderOf returns the holder a record stands for.
func holderOf(kv *mvccpb.KeyValue) lock.Holder {
	r := requestOf(kv.Key)
	return lock.Holder{Identity: string(kv.Value), Token: fencing.Token(kv.CreateRevision), Shared: r.Shared(), Limit: r.Limit}
}

// session returns the live session, granting a new lease if there is none.
func (l *Locker) session(ctx context.Context) (*session, error) {
	if s, err := l.currentSession(); s != nil || err != nil {
		return s, err
	}
	select {
	case l.sessSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.g.closing.Done():
		return nil, lock.ErrClosed
	}
	defer func() { <-l.sessSem }()
	if s, err := l.currentSession(); s != nil || err != nil {
		return s, err
	}
	sent := l.clk.Now()
	gctx, release := l.tls.context(ctx)
	resp, err := l.client.Grant(gctx, int64(l.opts.ttl/time.Second))
	release()
	if err != nil {
		if rerr := l.tls.err(); rerr != nil {
			err = rerr
		}
		return nil, fmt.Errorf("grant session lease: %w", secure.Refusal(err, isRefusal))
	}
	s := newSession(l, resp.ID, sent)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		s.watch.cancel()
		rctx, cancel := context.WithTimeout(context.Background(), l.closeWait())
		_, _ = l.client.Revoke(rctx, resp.ID)
		cancel()
		return nil, lock.ErrClosed
	}
	l.sess = s
	l.g.wg.Add(2)
	l.mu.Unlock()
	go s.run()
	go s.watch.run()
	l.tel.SessionStarted()
	l.opts.Logger.Debug("etcdlock: session started", "session", fmt.Sprintf("%x", int64(resp.ID)), "ttl", l.opts.ttl)
	return s, nil
}

func (l *Locker) currentSession() (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, lock.ErrClosed
	}
	if l.sess != nil && !l.sess.ended() {
		return l.sess, nil
	}
	return nil, nil
}

// dropSession forgets s if it is still the current session, so that the
// next call grants a new one.
func (l *Locker) dropSession(s *session, cause error) {
	s.end(cause, true)
	l.mu.Lock()
	if l.sess == s {
		l.sess = nil
	}
	l.mu.Unlock()
}

func (l *Locker) closeWait() time.Duration { return min(l.opts.ttl, maxCloseWait) }

// Acquire blocks until it holds the lock called name, ctx is done, or the
// Locker is closed, and returns a *Lease. The uncontended path is one
// round trip. A failed or cancelled Acquire deletes its record (with a
// fresh context of at most 2s, then in the background; the session lease's
// expiry removes it at the latest).
//
// Errors wrap [lock.ErrInvalidName], [lock.ErrClosed], [lock.ErrLost] (the
// session ended while waiting; the next call starts a new one),
// [lock.ErrPermission] (the cluster refused the client; see "Keys and
// security" in the package documentation) or ctx's error.
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("etcdlock: acquire %q: %w", name, err)
	}
	le, err := l.acquire(ctx, name, queue.ExclusiveRequest, false)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: acquire %q: %w", name, err)
	}
	return le, nil
}

// TryAcquire is Acquire without waiting: when another lease holds name it
// returns an error wrapping [lock.ErrLocked]. It creates its record only if
// name has no record at all, in one transaction, so a refused TryAcquire
// writes nothing (unless one of its attempts went unanswered: it then ends
// the acquisition like a failed Acquire, see "Late creates" in
// docs/design/etcd.md).
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("etcdlock: try acquire %q: %w", name, err)
	}
	le, err := l.acquire(ctx, name, queue.ExclusiveRequest, true)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: try acquire %q: %w", name, err)
	}
	return le, nil
}

// Holder reports the identity and token of the lease that holds name, or
// an error wrapping [lock.ErrNotHeld] when name is free. It is one
// linearizable read.
func (l *Locker) Holder(ctx context.Context, name string) (lock.Holder, error) {
	if err := l.usable(ctx); err != nil {
		return lock.Holder{}, fmt.Errorf("etcdlock: holder %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return lock.Holder{}, fmt.Errorf("etcdlock: holder: %w", err)
	}
	if l.isClosed() {
		return lock.Holder{}, fmt.Errorf("etcdlock: holder %q: %w", name, lock.ErrClosed)
	}
	cctx, cancel := l.withClosing(ctx)
	defer cancel()
	var resp *clientv3.GetResponse
	err := l.call(cctx, nil, func(ctx context.Context) error {
		var err error
		resp, err = l.client.Get(ctx, l.namePrefix(name), clientv3.WithFirstCreate()...)
		return err
	})
	if err != nil {
		if ctx.Err() == nil && l.g.closing.Err() != nil {
			err = lock.ErrClosed
		}
		return lock.Holder{}, fmt.Errorf("etcdlock: holder %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return lock.Holder{}, fmt.Errorf("etcdlock: holder %q: %w", name, lock.ErrNotHeld)
	}
	return holderOf(resp.Kvs[0]), nil
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close ends the Locker: waiting calls return errors wrapping
// [lock.ErrClosed], every lease granted through it ends with
// [lock.ErrReleased], and the session lease is revoked, which deletes all of
// the Locker's records in one step. The revocation is bounded by the TTL or
// 5s, whichever is shorter; if it fails, the records go when the lease
// expires, and Close returns the error. Close waits for the Locker's
// goroutines, closes the client if the Locker owns it (opened by
// [lock.Open]), and returns nil when called again. A call made while another
// is in progress waits for that one to finish, so that whichever Close
// returns, the Locker is torn down.
func (l *Locker) Close() error {
	if err := l.usable(context.Background()); err != nil {
		return fmt.Errorf("etcdlock: close: %w", err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.down
		return nil
	}
	defer close(l.down)
	l.closed = true
	s := l.sess
	l.sess = nil
	l.mu.Unlock()

	l.g.close()
	var errs []error
	if s != nil {
		wasLive := !s.ended()
		s.end(telemetry.WithReason(telemetry.Closed, fmt.Errorf("%w: locker closed", lock.ErrReleased)), false)
		if wasLive {
			ctx, cancel := context.WithTimeout(context.Background(), l.closeWait())
			_, err := l.client.Revoke(ctx, s.id)
			cancel()
			if err != nil && !isLeaseNotFound(err) {
				errs = append(errs, fmt.Errorf("etcdlock: close: revoke lease %x: %w", int64(s.id), err))
			}
		}
	}
	l.g.endLife()
	l.g.wg.Wait()
	if l.ownsClient {
		if err := l.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("etcdlock: close client: %w", err))
		}
	}
	return errors.Join(errs...)
}
