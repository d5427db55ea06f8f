package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/nilcheck"
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
	tls        *refusals            // the TLS handshakes of a client the Locker made; nil for a borrowed one
	g          *group               // what Close stops, and how

	sessSem chan struct{} // held while a session is being created
	down    chan struct{} // closed when the first Close has finished

	mu     sync.Mutex
	closed bool
	sess   *session
}

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.Observer    = (*Locker)(nil)
	_ lock.MultiLocker = (*Locker)(nil)
	_ lock.Lease       = (*Lease)(nil)
)

// New returns a Locker that keeps its locks in etcd through client, which
// it borrows: client must stay open until Close returns. A nil client (or
// one not made by clientv3.New) or a bad option is an error wrapping
// [lock.ErrInvalidConfig]. New does no I/O. Configure client with
// DialKeepAliveTime and DialKeepAliveTimeout (say 5s and 2s), so that a
// waiter is not served late through a member that stops answering.
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
	l.g = &group{}
	l.g.life, l.g.endLife = context.WithCancel(context.Background())
	l.g.closing, l.g.close = context.WithCancel(context.Background())
	return l
}

// Identity returns the identity stored in the Locker's lock records.
func (l *Locker) Identity() string {
	if l.usable(context.Background()) != nil {
		return ""
	}
	return l.opts.Identity
}

// Prefix returns the key prefix of the Locker's records: "" or ending in "/".
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
// current session, or false when it has none. Revoking that lease ends
// every lease of the session.
func (l *Locker) SessionLease() (clientv3.LeaseID, bool) {
	if l.usable(context.Background()) != nil {
		return 0, false
	}
	if s, _ := l.currentSession(); s != nil {
		return s.id, true
	}
	return 0, false
}

func (l *Locker) closeWait() time.Duration { return min(l.opts.ttl, maxCloseWait) }

// withClosing returns a context that is also cancelled when Close starts,
// so that no request of a call outlives Close.
func (l *Locker) withClosing(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.g.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// bounded runs f with ctx (see withClosing), and reports lock.ErrClosed
// when Close, not ctx, ended it.
func (l *Locker) bounded(ctx context.Context, f func(context.Context) error) error {
	if l.g.closing.Err() != nil {
		return lock.ErrClosed
	}
	cctx, cancel := l.withClosing(ctx)
	defer cancel()
	err := f(cctx)
	if err != nil && ctx.Err() == nil && l.g.closing.Err() != nil {
		return lock.ErrClosed
	}
	return err
}

// Close ends the Locker: waiting calls return errors wrapping
// [lock.ErrClosed], its leases end with [lock.ErrReleased], and the
// session lease is revoked, which deletes its records (within the TTL or
// 5s, else they go when the lease expires and Close returns the error).
// It waits for the Locker's goroutines; later calls return nil.
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
