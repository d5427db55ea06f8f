package zklock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// cleanup is a znode the Locker created, or may have created (a create
// without a reply: parent and prefix find it), and must delete while its
// session lives; marker, a discarded acquisition's, goes after it.
type cleanup struct {
	path   string
	parent string
	prefix string
	marker string
}

// janitor deletes the Locker's left-over znodes in the background. Its
// goroutine, run, owns the deletions; add and kick only queue and wake.
type janitor struct {
	conn   *zk.Conn
	g      *group
	logger *slog.Logger
	kick   chan struct{} // wakes run

	mu      sync.Mutex
	pending []cleanup
}

func newJanitor(g *group, logger *slog.Logger) *janitor {
	return &janitor{g: g, logger: logger, kick: make(chan struct{}, 1)}
}

func (j *janitor) add(c cleanup) {
	j.mu.Lock()
	j.pending = append(j.pending, c)
	j.mu.Unlock()
	j.wake()
}

func (j *janitor) wake() { poke(j.kick) }

func (j *janitor) run() {
	for {
		select {
		case <-j.g.closing:
			return
		case <-j.kick:
		}
		j.sweep(j.g.bg)
	}
}

// sweep tries every pending cleanup once.
func (j *janitor) sweep(ctx context.Context) {
	j.mu.Lock()
	todo := j.pending
	j.pending = nil
	j.mu.Unlock()
	var keep []cleanup
	for i, c := range todo {
		if ctx.Err() != nil || j.conn.State() != zk.StateHasSession {
			keep = append(keep, todo[i:]...)
			break
		}
		err := j.clean(ctx, c)
		switch {
		case err == nil:
		case isStop(err) || isConnErr(err):
			keep = append(keep, c)
		default:
			j.logger.Warn("zklock: cannot delete a znode of this Locker", "path", c.path+c.parent, "err", err)
		}
	}
	j.mu.Lock()
	j.pending = append(keep, j.pending...)
	j.mu.Unlock()
}

func (j *janitor) clean(ctx context.Context, c cleanup) error {
	found := []string{c.path}
	if c.path == "" {
		var err error
		if found, err = withPrefix(ctx, j.g, nil, j.conn, c.parent, c.prefix); err != nil {
			return err
		}
	}
	for _, p := range found {
		if err := j.deleteIfOurs(ctx, p); err != nil {
			return err
		}
	}
	return j.deleteMarker(ctx, c.marker)
}

// withPrefix returns the children of parent whose names begin with
// prefix, after a sync: a create sent before a lost connection may still
// be on its way to the leader. A missing parent has none.
func withPrefix(ctx context.Context, g *group, s *session, conn *zk.Conn, parent, prefix string) ([]string, error) {
	_, err := call(ctx, g, s, func() (string, error) { return conn.Sync(parent) })
	var kids children
	if err == nil {
		kids, err = call(ctx, g, s, childrenOf(conn, parent))
	}
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	var found []string
	for _, k := range kids.names {
		if strings.HasPrefix(k, prefix) {
			found = append(found, parent+"/"+k)
		}
	}
	return found, err
}

func (j *janitor) deleteMarker(ctx context.Context, marker string) error {
	if marker == "" {
		return nil
	}
	_, err := call(ctx, j.g, nil, func() (struct{}, error) { return struct{}{}, j.conn.Delete(marker, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// deleteIfOurs deletes path if the current session owns it.
func (j *janitor) deleteIfOurs(ctx context.Context, path string) error {
	for range 3 {
		sid := j.conn.SessionID()
		e, err := call(ctx, j.g, nil, statOf(j.conn, path))
		if err != nil || !e.ok {
			return err
		}
		if e.stat.EphemeralOwner != sid {
			return nil
		}
		_, err = call(ctx, j.g, nil, func() (struct{}, error) { return struct{}{}, j.conn.Delete(path, e.stat.Version) })
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return err
		}
	}
	return errors.New("the znode keeps changing")
}

// discard deletes the znode of a failed or cancelled acquisition and its
// marker: at once if the connection is up, else through the janitor.
func (l *Locker) discard(path, marker string) {
	if l.conn.State() == zk.StateHasSession {
		ctx, cancel := context.WithTimeout(l.g.bg, l.cleanupWait())
		defer cancel()
		if err := l.jan.clean(ctx, cleanup{path: path, marker: marker}); err == nil {
			return
		}
	}
	l.jan.add(cleanup{path: path, marker: marker})
}

// cleanupWait bounds a clean-up done on the caller's behalf after its
// context ended.
func (l *Locker) cleanupWait() time.Duration { return min(l.SessionTimeout(), 5*time.Second) }
