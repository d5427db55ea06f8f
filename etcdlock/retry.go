package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// retryDelay spaces out retries of a request that failed without an answer.
const retryDelay = 50 * time.Millisecond

// call runs op, which must be safe to repeat, giving each attempt a third
// of the TTL (at least 1s), until it succeeds, fails for good (a refusal
// wraps lock.ErrPermission), ctx is done, the Locker closes or s, if not
// nil, ends (docs/design/etcd.md, "Retries and stuck members").
func call[T any](ctx context.Context, l *Locker, s *session, op func(context.Context) (T, error)) (T, error) {
	var zero T
	var sessionDone <-chan struct{}
	if s != nil {
		sessionDone = s.done
	}
	for {
		if err := l.tls.err(); err != nil {
			return zero, err
		}
		wctx, release := l.tls.context(ctx)
		actx, cancel := context.WithTimeout(wctx, max(l.opts.ttl/3, time.Second))
		v, err := op(actx)
		cancel()
		release()
		if err == nil {
			return v, nil
		}
		if rerr := l.tls.err(); rerr != nil {
			return zero, rerr
		}
		delay := retryDelay
		switch {
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			delay = 0
		case !retryable(err):
			return zero, secure.Refusal(err, isRefusal)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return zero, errors.Join(ctx.Err(), err)
		case <-l.g.closing.Done():
			t.Stop()
			return zero, lock.ErrClosed
		case <-sessionDone:
			t.Stop()
			return zero, s.lostErr()
		}
	}
}

// get reads key under call's retry policy.
func (l *Locker) get(ctx context.Context, s *session, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return call(ctx, l, s, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return l.client.Get(ctx, key, opts...)
	})
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// retryable reports whether a request that failed with err may succeed if
// sent again: transport failures and the server's transient conditions.
func retryable(err error) bool {
	var ee rpctypes.EtcdError
	if !errors.As(err, &ee) {
		return true
	}
	switch ee {
	case rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged,
		rpctypes.ErrNotCapable, rpctypes.ErrStopped, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrUnhealthy, rpctypes.ErrTooManyRequests:
		return true
	}
	return false
}

// spawn starts f in a goroutine that Close waits for, or reports false
// once the Locker is closed.
func (l *Locker) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.g.wg.Go(f)
	return true
}

// group is the Locker's goroutines and what stops them. wg counts them:
// Add only under the Locker's mu while it is not closed.
type group struct {
	life    context.Context // bounds every background goroutine; ends in Close
	endLife context.CancelFunc
	closing context.Context // ends when Close starts: interrupts waiting calls
	close   context.CancelFunc
	wg      sync.WaitGroup
}
