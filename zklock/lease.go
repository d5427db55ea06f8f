package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/leasestate"
	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// Lease is a grant of a lock: the ephemeral sequential znode at Path, the
// lowest of its lock's parent. Its methods are safe for concurrent use.
type Lease struct {
	l       *Locker
	s       *session
	path    string
	czxid   int64
	version int32
	byMark  bool             // granted with no listing after its predecessor went: checked once (checkMark)
	st      leasestate.State // its end, once; "releasing" once Release has begun
}

var _ lock.Lease = (*Lease)(nil)

// Name returns the lock's name.
func (le *Lease) Name() string {
	if le == nil || le.l == nil {
		return ""
	}
	// The path is root, "/", the name, "/", the znode's name (Locker.parent).
	return names.Between(le.path, len(le.l.o.root)+1, "/")
}

// Token returns the lease's fencing token: the czxid of its znode, which
// rises with every grant (docs/design/zookeeper.md, "Tokens").
func (le *Lease) Token() fencing.Token {
	if le == nil {
		return 0
	}
	return fencing.Token(le.czxid)
}

// Path returns the full path of the lease's znode.
func (le *Lease) Path() string {
	if le == nil {
		return ""
	}
	return le.path
}

// SessionID returns the ID of the ZooKeeper session that owns the lease's
// znode (0 for a nil or zero *Lease).
func (le *Lease) SessionID() int64 {
	if !le.valid() {
		return 0
	}
	return le.s.id
}

// Version returns the data version of the lease's znode when it was
// granted: 0 but for a semaphore permit, whose touches rewrite its data
// unchanged (docs/design/queue.md).
func (le *Lease) Version() int32 {
	if le == nil {
		return 0
	}
	return le.version
}

// CheckOp returns an operation for zk.Conn.Multi, on any connection, that
// succeeds only while the lease's znode exists with its granted version:
// first in a Multi, it makes the rest apply only while the lease holds
// (see the example). For a nil or zero *Lease it returns a check that
// always fails.
func (le *Lease) CheckOp() *zk.CheckVersionRequest {
	if !le.valid() {
		return &zk.CheckVersionRequest{Path: "/zookeeper/fencelock: no lease", Version: -2}
	}
	return &zk.CheckVersionRequest{Path: le.path, Version: le.version}
}

// Done returns a channel closed when the lease ends: released, lost, or
// ended by Close (already closed for a nil or zero *Lease).
func (le *Lease) Done() <-chan struct{} {
	if !le.valid() {
		return leasestate.Closed()
	}
	return le.st.Done()
}

// Err returns nil while the lease is held; afterwards an error wrapping
// [lock.ErrReleased] (Release or Close) or [lock.ErrLost] with its cause.
// A nil or zero *Lease reports an error wrapping [lock.ErrInvalidConfig].
func (le *Lease) Err() error {
	if err := le.endErr(); err != nil {
		return fmt.Errorf("zklock: %w", err)
	}
	return nil
}

// endErr is Err without the package prefix, for errors that add their own.
func (le *Lease) endErr() error {
	if !le.valid() {
		return fmt.Errorf("lease: %w", errNotLease)
	}
	return le.st.Err()
}

// end ends the lease once; later calls do nothing and return false. err
// carries no package prefix: Err adds it.
func (le *Lease) end(err error) bool {
	if !le.st.End(err) {
		return false
	}
	le.l.watch.untrack(le.path)
	if errors.Is(err, lock.ErrLost) {
		le.l.o.Logger.Warn("zklock: lease lost", config.LogLock, le.Name(), config.LogToken, le.czxid, config.LogSession, fmt.Sprintf("0x%x", le.s.id), "path", le.path, config.LogErr, err)
	}
	return true
}

// lose ends the lease as lost and has its znode deleted if it still exists
// in this session.
func (le *Lease) lose(cause error) {
	if le.end(fmt.Errorf("lease %q (token %d): %w", le.Name(), le.czxid, cause)) {
		le.l.jan.add(cleanup{path: le.path})
	}
}

// Release ends the lease (Done closes, Err wraps [lock.ErrReleased])
// before it sends the delete of its znode, guarded by its version.
// Releasing an ended lease returns an error wrapping [lock.ErrReleased]
// or [lock.ErrLost]; a znode found gone, one wrapping ErrLost (and Err
// then does too). If ctx ends or the connection fails first, the znode
// is deleted once the connection is back in the session (or goes with
// it), and Release says so. A nil ctx, or a nil or zero *Lease, is an
// error wrapping [lock.ErrInvalidConfig].
func (le *Lease) Release(ctx context.Context) (err error) {
	if !le.valid() {
		return fmt.Errorf("zklock: release: %w", errNotLease)
	}
	if ctx == nil {
		return fmt.Errorf("zklock: release %q: %w: nil context", le.Name(), lock.ErrInvalidConfig)
	}
	ctx, end := le.l.tel.StartRelease(ctx, le.Name(), uint64(le.czxid))
	defer func() { end(err) }()
	ended, first := le.st.BeginRelease()
	if ended != nil {
		if errors.Is(ended, lock.ErrLost) {
			le.l.jan.wake()
			return fmt.Errorf("zklock: release %q: %w", le.Name(), ended)
		}
		return fmt.Errorf("zklock: release %q: %w", le.Name(), lock.ErrReleased)
	}
	if !first {
		<-le.st.Done()
		return fmt.Errorf("zklock: release %q: %w", le.Name(), lock.ErrReleased)
	}

	// Before the delete: the server may grant the lock before it answers.
	le.end(fmt.Errorf("lease %q: %w", le.Name(), lock.ErrReleased))
	if err := le.l.enter(); err != nil {
		return nil // Close deletes the znode
	}
	defer le.l.leave()
	marker := ""
	if le.l.o.LockDelay > 0 {
		i := strings.LastIndexByte(le.path, '/')
		marker = markerOf(le.path[:i], prefixOf(le.path[i+1:]))
	}
	err = le.l.deleteOwn(ctx, le.path, le.version, le.czxid, marker)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		lost := fmt.Errorf("lease %q (token %d): %w: its znode was gone at release", le.Name(), le.czxid, lock.ErrLost)
		le.st.LostAtRelease(lost)
		return fmt.Errorf("zklock: release: %w", lost)
	case isRefusal(err) || errors.Is(err, lock.ErrPermission):
		// Trying again cannot help; the znode goes with the session.
		return fmt.Errorf("zklock: release %q: znode not deleted (it goes with the session): %w", le.Name(), secure.Refusal(err, isRefusal))
	default:
		if rerr := le.l.ss.hooks.refused(); rerr != nil && isConnErr(err) {
			err = fmt.Errorf("%w: %w", rerr, err)
		}
		le.l.jan.add(cleanup{path: le.path})
		return fmt.Errorf("zklock: release %q: znode not deleted yet (it will be once the connection is back, or with the session): %w", le.Name(), err)
	}
}

// deleteOwn deletes the znode at path if it is still the one created with
// czxid, guarded by its version, in one Multi with its lock-delay marker
// (unless empty) or else, where allowed, the release mark
// (acquisition.waitFor). It returns zk.ErrNoNode if the znode is gone.
func (l *Locker) deleteOwn(ctx context.Context, path string, version int32, czxid int64, marker string) error {
	mark := marker == "" && !l.markDenied.Load() && marksRelease(path)
	for range 3 {
		_, err := call(ctx, l.g, nil, func() (struct{}, error) {
			if mark { // the data change tells the waiter behind that a holder went
				res, err := l.conn.Multi(&zk.SetDataRequest{Path: path, Data: []byte(l.o.Identity), Version: version},
					&zk.DeleteRequest{Path: path, Version: version + 1})
				if len(res) > 0 && errors.Is(res[0].Error, zk.ErrNoAuth) {
					// May not set their data: delete plainly from now on.
					mark = false
					l.markDenied.Store(true)
					return struct{}{}, errSendAgain
				}
				return struct{}{}, multiErr(res, err)
			}
			if marker == "" {
				return struct{}{}, l.conn.Delete(path, version)
			}
			res, err := l.conn.Multi(&zk.DeleteRequest{Path: path, Version: version}, &zk.DeleteRequest{Path: marker, Version: -1})
			if len(res) == 2 && multiErr(res[:1], nil) == nil && errors.Is(res[1].Error, zk.ErrNoNode) {
				marker = ""
				return struct{}{}, errSendAgain
			}
			return struct{}{}, multiErr(res, err)
		})
		if errors.Is(err, errSendAgain) {
			continue
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return err
		}
		// Someone changed the znode's data: still ours if its czxid is.
		e, err := call(ctx, l.g, nil, statOf(l.conn, path))
		if err != nil {
			return err
		}
		if !e.ok || e.stat.Czxid != czxid {
			return zk.ErrNoNode
		}
		version = e.stat.Version
	}
	return fmt.Errorf("znode %s keeps changing", path)
}

// errSendAgain says that deleteOwn's Multi failed for a part it leaves
// out from now on (a marker gone, a release mark refused): send it again.
var errSendAgain = errors.New("send the delete again")

// stopped reports whether Release has taken over.
func (le *Lease) stopped() bool { return le.st.Releasing() }

// checkMark lists the queue once for a lease granted with no listing
// (acquisition.waitFor) still held ownWatchDelay after its grant, and
// ends it with lock.ErrLost unless the listing shows it admitted.
func (le *Lease) checkMark() {
	l := le.l
	i := strings.LastIndexByte(le.path, '/')
	parent, own := le.path[:i], le.path[i+1:]
	kids, err := call(l.g.bg, l.g, le.s, childrenOf(l.conn, parent))
	if err != nil || le.stopped() || le.endErr() != nil {
		return
	}
	q, reqs := lockQueue(kids.names)
	switch j := slices.Index(q, own); {
	case j < 0:
		le.lose(znodeDeleted(le.path))
	case !queue.Admitted(reqs[:j+1], j):
		le.lose(fmt.Errorf("%w: granted on the release of %s, which a listing still shows ahead of it: someone else set that znode's data", lock.ErrLost, parent+"/"+q[j-1]))
	}
}
