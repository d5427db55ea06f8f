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

// go-zookeeper's calls take no context and block until the server answers
// or the connection fails. A future runs one call on its own goroutine so
// that the caller can stop waiting when its context ends, its epoch ends
// or the Locker closes; a call whose result matters even then (a create)
// hands the late result to a function that cleans up after it.

type result[T any] struct {
	v   T
	err error
}

type future[T any] struct {
	ch        chan result[T]
	mu        sync.Mutex
	abandoned bool
	onAbandon func(T, error) // may be nil
}

// start runs f on a goroutine of the Locker (Close waits for it).
func start[T any](l *Locker, f func() (T, error), onAbandon func(T, error)) *future[T] {
	fu := &future[T]{ch: make(chan result[T], 1), onAbandon: onAbandon}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
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
	}()
	return fu
}

// abandon gives up on the result; if it has arrived already, onAbandon
// gets it now.
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

// wait returns f's result, or a *stopError when ctx ends, ep ends (ep may
// be nil) or the Locker closes first.
func (fu *future[T]) wait(ctx context.Context, l *Locker, ep *epoch) (T, error) {
	var epDone <-chan struct{}
	if ep != nil {
		epDone = ep.done
	}
	select {
	case r := <-fu.ch:
		return r.v, r.err
	default:
	}
	closing := l.close
	if ctx.Value(finalKey{}) != nil {
		closing = nil // Close's own last cleanup
	}
	var cause error
	select {
	case r := <-fu.ch:
		return r.v, r.err
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-epDone:
		cause = ep.err
	case <-closing:
		cause = lock.ErrClosed
	}
	fu.abandon()
	var zero T
	return zero, &stopError{cause}
}

// finalKey marks the context of the cleanup Close runs after the Locker
// has closed, whose requests must not stop at the Locker's closing.
type finalKey struct{}

// do runs f and waits for it as wait does.
func do[T any](ctx context.Context, l *Locker, ep *epoch, f func() (T, error)) (T, error) {
	return start(l, f, nil).wait(ctx, l, ep)
}

// stopError says why a caller stopped waiting: ctx's error, the epoch's
// loss (wrapping lock.ErrLost) or lock.ErrClosed.
type stopError struct{ cause error }

func (e *stopError) Error() string { return e.cause.Error() }
func (e *stopError) Unwrap() error { return e.cause }

func isStop(err error) bool {
	var s *stopError
	return errors.As(err, &s)
}

// isConnErr reports whether err leaves open whether the server applied the
// request: the connection failed before its reply arrived. go-zookeeper
// reports that with its own errors, or with the network error of a failed
// write.
func isConnErr(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &netErr)
}

// exists is the result of an ExistsW call.
type exists struct {
	ok    bool
	stat  *zk.Stat
	watch <-chan zk.Event
}

func (l *Locker) existsW(path string) func() (exists, error) {
	return func() (exists, error) {
		ok, st, w, err := l.conn.ExistsW(path)
		return exists{ok, st, w}, err
	}
}

type children struct {
	names []string
	stat  *zk.Stat
}

func (l *Locker) children(path string) func() (children, error) {
	return func() (children, error) {
		c, st, err := l.conn.Children(path)
		return children{c, st}, err
	}
}
