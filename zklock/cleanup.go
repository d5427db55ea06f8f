package zklock

import (
	"context"
	"errors"
	"strings"

	"github.com/go-zookeeper/zk"
)

// cleanup is a znode the Locker created, or may have created, and must
// delete: the record of a lost lease or of a failed, cancelled or
// interrupted wait. path names it; or, for a create whose reply never came,
// parent and prefix find it.
//
// A znode is deleted only while the connection has the session that owns
// it (its ephemeralOwner). A znode of another session is left alone: this
// Locker only moves to a new session after the server expired the old one,
// which removes the old session's znodes by itself.
type cleanup struct {
	path   string
	parent string
	prefix string
}

func (l *Locker) addCleanup(c cleanup) {
	l.mu.Lock()
	l.cleanups = append(l.cleanups, c)
	l.mu.Unlock()
	l.kickJanitor()
}

func (l *Locker) janitorLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.close:
			return
		case <-l.jkick:
		}
		l.sweep(l.bg)
	}
}

// sweep tries every pending cleanup once and returns how many are left.
func (l *Locker) sweep(ctx context.Context) int {
	l.mu.Lock()
	todo := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	var keep []cleanup
	for i, c := range todo {
		if ctx.Err() != nil || l.conn.State() != zk.StateHasSession {
			keep = append(keep, todo[i:]...)
			break
		}
		err := l.clean(ctx, c)
		switch {
		case err == nil:
		case isStop(err) || isConnErr(err):
			keep = append(keep, c)
		default:
			l.o.logger.Warn("zklock: cannot delete a znode of this Locker", "path", c.path+c.parent, "err", err)
		}
	}
	l.mu.Lock()
	l.cleanups = append(keep, l.cleanups...)
	n := len(l.cleanups)
	l.mu.Unlock()
	return n
}

func (l *Locker) clean(ctx context.Context, c cleanup) error {
	if c.path != "" {
		return l.deleteIfOurs(ctx, c.path)
	}
	// A create sent to a server the connection then lost may still be on
	// its way to the leader: sync first, so that the listing sees it.
	if _, err := do(ctx, l, nil, func() (string, error) { return l.conn.Sync(c.parent) }); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	}
	kids, err := do(ctx, l, nil, l.children(c.parent))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids.names {
		if strings.HasPrefix(k, c.prefix) {
			if err := l.deleteIfOurs(ctx, c.parent+"/"+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteIfOurs deletes path if the current session owns it.
func (l *Locker) deleteIfOurs(ctx context.Context, path string) error {
	for range 3 {
		sid := l.conn.SessionID()
		ok, st, err := doExists(ctx, l, path)
		if err != nil || !ok {
			return err
		}
		if st.EphemeralOwner != sid {
			return nil
		}
		_, err = do(ctx, l, nil, func() (struct{}, error) { return struct{}{}, l.conn.Delete(path, st.Version) })
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return err
		}
	}
	return errors.New("zklock: the znode keeps changing")
}

func doExists(ctx context.Context, l *Locker, path string) (bool, *zk.Stat, error) {
	r, err := do(ctx, l, nil, func() (exists, error) {
		ok, st, err := l.conn.Exists(path)
		return exists{ok: ok, stat: st}, err
	})
	return r.ok, r.stat, err
}
