package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// A lock's znodes are children of root/name named "~<32 hex digits>~" (the
// protection prefix, random per acquisition) followed by the 10-digit
// sequence number the server appends. '~' cannot occur in a lock name, so a
// lock znode of name "a" and the parent of name "a/b" can never be taken
// for one another, and children that do not match the pattern exactly are
// ignored.
const (
	marker    = '~'
	prefixLen = 1 + 32 + 1
	seqLen    = 10
	childLen  = prefixLen + seqLen
)

func newPrefix() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return string(marker) + hex.EncodeToString(b) + string(marker)
}

// isLockChild reports whether a child name is a lock znode.
func isLockChild(s string) bool {
	if len(s) != childLen || s[0] != marker || s[prefixLen-1] != marker {
		return false
	}
	for i := 1; i < prefixLen-1; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	for i := prefixLen; i < childLen; i++ {
		if c := s[i]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// queue returns the lock znodes among names, in grant order (by sequence
// number).
func queue(names []string) []string {
	q := make([]string, 0, len(names))
	for _, n := range names {
		if isLockChild(n) {
			q = append(q, n)
		}
	}
	slices.SortFunc(q, func(a, b string) int { return strings.Compare(a[prefixLen:], b[prefixLen:]) })
	return q
}

// parent returns the znode whose children are name's lock znodes.
func (l *Locker) parent(name string) string { return l.root + "/" + name }

// Acquire blocks until it holds the lock called name, ctx ends, the Locker
// is closed, or the session is lost. It returns a *Lease. See
// [lock.Locker.Acquire].
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("zklock: acquire %q: %w", name, err)
	}
	le, err := l.acquire(ctx, name, false)
	if err != nil {
		return nil, err
	}
	return le, nil
}

// TryAcquire is Acquire without waiting: it returns an error wrapping
// [lock.ErrLocked] at once if another lease holds name, after deleting the
// znode it queued.
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("zklock: try acquire %q: %w", name, err)
	}
	le, err := l.acquire(ctx, name, true)
	if err != nil {
		return nil, err
	}
	return le, nil
}

func (l *Locker) acquire(ctx context.Context, name string, try bool) (*Lease, error) {
	op := "acquire"
	if try {
		op = "try acquire"
	}
	fail := func(err error) (*Lease, error) {
		return nil, fmt.Errorf("zklock: %s %q: %w", op, name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("zklock: %s: %w", op, err)
	}
	if err := l.enter(); err != nil {
		return fail(err)
	}
	defer l.leave()
	if err := context.Cause(ctx); err != nil {
		return fail(err)
	}
	parent := l.parent(name)
	var (
		ep   *epoch
		path string
	)
	for attempt := 0; ; attempt++ {
		var err error
		ep, err = l.session(ctx)
		if err != nil {
			return fail(err)
		}
		path, err = l.create(ctx, ep, parent, newPrefix())
		if err == nil {
			break
		}
		// A session found lost before this acquisition had a znode costs it
		// no place in the queue: start again on the next session.
		if ended(ep) && errors.Is(err, lock.ErrLost) && attempt < 3 {
			continue
		}
		return fail(err)
	}
	l.track(path)
	le, err := l.queueUp(ctx, ep, name, parent, path, try)
	if err != nil {
		l.untrack(path)
		l.discard(path)
		return fail(err)
	}
	return le, nil
}

// discard deletes the znode of a failed or cancelled acquisition: at once
// if the connection is up (with a fresh, bounded context, since the
// caller's may have ended), otherwise through the janitor.
func (l *Locker) discard(path string) {
	if l.conn.State() == zk.StateHasSession {
		ctx, cancel := context.WithTimeout(l.bg, min(l.SessionTimeout(), 5*time.Second))
		defer cancel()
		if err := l.deleteIfOurs(ctx, path); err == nil {
			return
		}
	}
	l.addCleanup(cleanup{path: path})
}

// create creates this acquisition's znode and returns its path. A create
// whose reply was lost is looked up by its prefix; one abandoned while in
// flight is cleaned up when its reply comes.
func (l *Locker) create(ctx context.Context, ep *epoch, parent, prefix string) (string, error) {
	abandoned := func(p string, err error) {
		switch {
		case err == nil:
			l.addCleanup(cleanup{path: p})
		case isConnErr(err):
			l.addCleanup(cleanup{parent: parent, prefix: prefix})
		}
	}
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return "", fmt.Errorf("creating the lock znode under %s keeps failing", parent)
		}
		path, err := start(l, func() (string, error) {
			return l.conn.Create(parent+"/"+prefix, l.data, zk.FlagEphemeralSequential, l.o.acl)
		}, abandoned).wait(ctx, l, ep)
		switch {
		case err == nil:
			return path, nil
		case isStop(err):
			return "", err
		case errors.Is(err, zk.ErrNoNode):
			// The parent is missing, or the server removed the empty
			// container between our check and the create.
			if err := l.ensure(ctx, ep, parent); err != nil {
				return "", err
			}
		case isConnErr(err):
			// The server may have applied the create: look for it.
			found, err := l.findOwn(ctx, ep, parent, prefix)
			if err != nil {
				l.addCleanup(cleanup{parent: parent, prefix: prefix})
				return "", err
			}
			if found != "" {
				return found, nil
			}
		default:
			return "", fmt.Errorf("create under %s: %w", parent, err)
		}
	}
}

// findOwn returns the path of the znode with prefix under parent, or "" if
// there is none, once the connection is back in epoch ep.
func (l *Locker) findOwn(ctx context.Context, ep *epoch, parent, prefix string) (string, error) {
	for {
		if err := l.awaitConnected(ctx, ep); err != nil {
			return "", err
		}
		_, err := do(ctx, l, ep, func() (string, error) { return l.conn.Sync(parent) })
		if err == nil {
			var kids children
			kids, err = do(ctx, l, ep, l.children(parent))
			if err == nil {
				for _, k := range queue(kids.names) {
					if strings.HasPrefix(k, prefix) {
						return parent + "/" + k, nil
					}
				}
				return "", nil
			}
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return "", nil
		case isConnErr(err):
			continue
		default:
			return "", err
		}
	}
}

// ensure creates path and its missing ancestors: persistent znodes down to
// the root, containers below it (so that the server removes a lock's
// parent, and the intermediate znodes of a multi-segment name, once they
// are empty).
func (l *Locker) ensure(ctx context.Context, ep *epoch, path string) error {
	for attempt := 0; attempt < 8; attempt++ {
		var err error
		if len(path) > len(l.root) {
			_, err = do(ctx, l, ep, func() (string, error) {
				return l.conn.CreateContainer(path, nil, zk.FlagContainer, l.o.acl)
			})
		} else {
			_, err = do(ctx, l, ep, func() (string, error) {
				return l.conn.Create(path, nil, zk.FlagPersistent, l.o.acl)
			})
		}
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if err := l.ensure(ctx, ep, path[:strings.LastIndexByte(path, '/')]); err != nil {
				return err
			}
		case isConnErr(err):
			if err := l.awaitConnected(ctx, ep); err != nil {
				return err
			}
		default:
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return fmt.Errorf("create %s: keeps failing", path)
}

// queueUp waits until the znode at path is the lowest of parent's lock
// znodes. On error the caller deletes the znode.
func (l *Locker) queueUp(ctx context.Context, ep *epoch, name, parent, path string, try bool) (*Lease, error) {
	own := path[len(parent)+1:]
	prefix := own[:prefixLen]
	var (
		ownWatch <-chan zk.Event
		czxid    int64
		version  int32
	)
	for {
		var q []string
		if ownWatch == nil {
			// Read the znode's stat (the token) and set a watch on it in
			// the same round trip as the listing: go-zookeeper pipelines
			// requests issued concurrently on one connection.
			l.track(path)
			fc := start(l, l.children(parent), nil)
			fe := start(l, l.existsW(path), nil)
			kids, errC := fc.wait(ctx, l, ep)
			if errC != nil {
				fe.abandon()
			}
			st, errE := fe.wait(ctx, l, ep)
			if err := errors.Join(errC, errE); err != nil {
				if retry, err := l.retryable(ctx, ep, err); retry {
					continue
				} else {
					return nil, err
				}
			}
			if !st.ok {
				return nil, fmt.Errorf("%w: the queued znode %s was deleted", lock.ErrLost, path)
			}
			if st.stat.EphemeralOwner != ep.id {
				return nil, fmt.Errorf("%w: the queued znode %s belongs to session 0x%x, not 0x%x", lock.ErrLost, path, st.stat.EphemeralOwner, ep.id)
			}
			ownWatch, czxid, version = st.watch, st.stat.Czxid, st.stat.Version
			q = queue(kids.names)
		} else {
			kids, err := do(ctx, l, ep, l.children(parent))
			if err != nil {
				if retry, err := l.retryable(ctx, ep, err); retry {
					continue
				} else {
					return nil, err
				}
			}
			q = queue(kids.names)
		}

		i := slices.Index(q, own)
		if i < 0 {
			return nil, fmt.Errorf("%w: the queued znode %s was deleted", lock.ErrLost, path)
		}
		for _, k := range q {
			if k != own && strings.HasPrefix(k, prefix) {
				// A duplicate from a retried create: not ours to keep.
				l.addCleanup(cleanup{path: parent + "/" + k})
			}
		}
		if i == 0 {
			return l.grant(ep, name, path, czxid, version, ownWatch)
		}
		if try {
			return nil, lock.ErrLocked
		}
		pred, err := do(ctx, l, ep, l.existsW(parent+"/"+q[i-1]))
		if err != nil {
			if retry, err := l.retryable(ctx, ep, err); retry {
				continue
			} else {
				return nil, err
			}
		}
		if !pred.ok {
			continue
		}
		select {
		case <-pred.watch:
		case ev := <-ownWatch:
			if ev.Type == zk.EventNodeDeleted {
				return nil, fmt.Errorf("%w: the queued znode %s was deleted", lock.ErrLost, path)
			}
			ownWatch = nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-ep.done:
			return nil, ep.err
		case <-l.close:
			return nil, lock.ErrClosed
		}
	}
}

// retryable decides what a failed request in a wait means: after a
// connection failure the wait goes on once the connection is back in the
// same epoch; anything else ends it.
func (l *Locker) retryable(ctx context.Context, ep *epoch, err error) (bool, error) {
	if isStop(err) {
		return false, err
	}
	if errors.Is(err, zk.ErrNoNode) {
		return false, fmt.Errorf("%w: the lock's parent was deleted while waiting: %w", lock.ErrLost, err)
	}
	if !isConnErr(err) {
		return false, err
	}
	if err := l.awaitConnected(ctx, ep); err != nil {
		return false, err
	}
	return true, nil
}

func (l *Locker) grant(ep *epoch, name, path string, czxid int64, version int32, own <-chan zk.Event) (*Lease, error) {
	le := &Lease{
		l:       l,
		ep:      ep,
		name:    name,
		path:    path,
		czxid:   czxid,
		version: version,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	l.mu.Lock()
	select {
	case <-ep.done:
		l.mu.Unlock()
		return nil, ep.err
	default:
	}
	if l.closed {
		l.mu.Unlock()
		return nil, lock.ErrClosed
	}
	l.leases[le] = struct{}{}
	l.mu.Unlock()
	l.hold(le, own)
	return le, nil
}

func ended(ep *epoch) bool {
	select {
	case <-ep.done:
		return true
	default:
		return false
	}
}
