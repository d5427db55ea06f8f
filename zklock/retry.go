package zklock

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// group is the Locker's goroutines and what stops them: Close closes
// closing, cancels bg and waits for every goroutine started by spawn.
type group struct {
	wg      sync.WaitGroup
	closing chan struct{}
	bg      context.Context
	stop    context.CancelFunc
}

func newGroup() *group {
	bg, stop := context.WithCancel(context.Background())
	return &group{closing: make(chan struct{}), bg: bg, stop: stop}
}

// spawn runs f on a goroutine Close waits for.
func (g *group) spawn(f func()) { g.wg.Go(f) }

// poke wakes the goroutine that waits on kick without blocking.
func poke(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

type result[T any] struct {
	v   T
	err error
}

// future runs one go-zookeeper call on its own goroutine, so that its
// caller can stop waiting (docs/design/zookeeper.md, "Calls and retries").
type future[T any] struct {
	ch        chan result[T]
	mu        sync.Mutex
	abandoned bool
	onAbandon func(T, error) // may be nil
}

// start runs f on a goroutine of g (Close waits for it).
func start[T any](g *group, f func() (T, error), onAbandon func(T, error)) *future[T] {
	fu := &future[T]{ch: make(chan result[T], 1), onAbandon: onAbandon}
	g.spawn(func() {
		v, err := f()
		fu.mu.Lock()
		abandoned := fu.abandoned
		if !abandoned {
			fu.ch <- result[T]{v, err}
		}
		fu.mu.Unlock()
		if abandoned && fu.onAbandon != nil {
			fu.onAbandon(v, err)
		}
	})
	return fu
}

// abandon gives up on the result, which onAbandon gets if it has come.
func (fu *future[T]) abandon() {
	fu.mu.Lock()
	if fu.abandoned {
		fu.mu.Unlock()
		return
	}
	fu.abandoned = true
	var r result[T]
	got := false
	select {
	case r = <-fu.ch:
		got = true
	default:
	}
	fu.mu.Unlock()
	if got && fu.onAbandon != nil {
		fu.onAbandon(r.v, r.err)
	}
}

// wait returns f's result, or a *stopError if ctx, s or Close ends first.
func (fu *future[T]) wait(ctx context.Context, g *group, s *session) (T, error) {
	r, cause := fu.await(ctx, g, s)
	if cause != nil {
		fu.abandon()
		var zero T
		return zero, &stopError{cause}
	}
	return r.v, r.err
}

// await is wait without giving up on the result: it returns f's result,
// or why the caller stopped waiting first, after which f may be awaited
// again or abandoned.
func (fu *future[T]) await(ctx context.Context, g *group, s *session) (result[T], error) {
	var sDone <-chan struct{}
	if s != nil {
		sDone = s.done
	}
	select {
	case r := <-fu.ch:
		return r, nil
	default:
	}
	select {
	case r := <-fu.ch:
		return r, nil
	case <-ctx.Done():
		return result[T]{}, context.Cause(ctx)
	case <-sDone:
		return result[T]{}, s.err
	case <-g.closing:
		return result[T]{}, lock.ErrClosed
	}
}

// call sends one request, f, and waits for it as wait does; the callers
// apply the retry policy (retryable).
func call[T any](ctx context.Context, g *group, s *session, f func() (T, error)) (T, error) {
	return start(g, f, nil).wait(ctx, g, s)
}

// reread runs read, a public call's read, again while the connection fails
// under it (once it is back) or it returns errGone.
func (l *Locker) reread(ctx context.Context, read func() error) error {
	for {
		err := read()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errGone):
		case isStop(err) || !isConnErr(err):
			return err
		default:
			if err := l.ss.awaitConnected(ctx, nil); err != nil {
				return err
			}
		}
	}
}

// errGone says that a record went while it was read: read again.
var errGone = errors.New("a record went while it was read")

// stopError wraps why a caller stopped waiting: ctx, its session or Close.
type stopError struct{ cause error }

func (e *stopError) Error() string { return e.cause.Error() }
func (e *stopError) Unwrap() error { return e.cause }

func isStop(err error) bool {
	var s *stopError
	return errors.As(err, &s)
}

// isConnErr reports whether the connection failed before the reply to
// err's request arrived, leaving open whether the server applied it.
func isConnErr(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &netErr)
}

// retryable reports whether a request that failed with err may be sent
// again once the connection is back; a create's caller looks for it first.
func retryable(err error) bool { return !isStop(err) && isConnErr(err) }

// exists is the result of a read of a znode's stat.
type exists struct {
	ok   bool
	stat *zk.Stat
}

// deletionW reads a lock znode and sets a watch that fires on its
// deletion only (isDeletionWatch; docs/design/zookeeper.md, "Watches"). A
// missing znode is ok == false.
func deletionW(conn *zk.Conn, path string) func() (exists, error) {
	return func() (exists, error) {
		_, st, err := conn.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return exists{}, nil
		}
		return exists{ok: err == nil, stat: st}, err
	}
}

// statOf reads the stat of the znode at path, without a watch. A missing
// znode is ok == false.
func statOf(conn *zk.Conn, path string) func() (exists, error) {
	return func() (exists, error) {
		ok, st, err := conn.Exists(path)
		return exists{ok: ok, stat: st}, err
	}
}

func setData(conn *zk.Conn, path string, data []byte, version int32) func() (*zk.Stat, error) {
	return func() (*zk.Stat, error) {
		return conn.Set(path, data, version)
	}
}

// got is the result of a read of a znode's data.
type got struct {
	data []byte
	stat *zk.Stat
}

func getOf(conn *zk.Conn, path string) func() (got, error) {
	return func() (got, error) {
		d, st, err := conn.Get(path)
		return got{d, st}, err
	}
}

type children struct {
	names []string
	stat  *zk.Stat
}

func childrenOf(conn *zk.Conn, path string) func() (children, error) {
	return func() (children, error) {
		c, st, err := conn.Children(path)
		return children{c, st}, err
	}
}
