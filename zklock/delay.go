package zklock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// delayMark begins the name of a lock-delay marker: a persistent child of
// the lock's parent named delayMark followed by the child name of the lock
// znode it stands for. It fails parseChild's pattern (the character after
// the 32 hex digits' place is not '~'), so every listing of the queue
// ignores it.
const delayMark = "~delay~"

// markerOf returns the path of the marker of the lock znode child of
// parent.
func markerOf(parent, child string) string { return parent + "/" + delayMark + child }

// delay runs, when the Locker has a lock-delay, between the admission of
// an acquisition and its grant. It lists the parent: a marker whose lock
// znode is not among the children was left by a grant that ended without
// a clean Release (a clean Release deletes both in one Multi), and delay
// then waits the Locker's lock-delay from the moment that listing was
// answered, which is after the znode disappeared, so it errs toward
// waiting longer. Then, in one Multi checked against the acquisition's
// znode, it deletes the stale markers and creates its own.
//
// A grant admitted at once after a crash long ago waits too: a marker
// cannot tell when its znode went, and a needless wait is the safe side.
func (a *acquisition) delay(ctx context.Context) error {
	d := a.l.o.LockDelay
	if d <= 0 {
		return nil
	}
	l := a.l
	own := markerOf(a.parent, a.own)
	waited := make(map[string]bool) // the stale markers waited for
	for {
		kids, err := call(ctx, l.g, a.s, childrenOf(l.conn, a.parent))
		if err != nil {
			if err := a.retry(ctx, err); err != nil {
				return err
			}
			continue
		}
		seen := time.Now()
		lockKids := make(map[string]bool)
		for _, k := range queueOf(kids.names) {
			lockKids[k] = true
		}
		if !lockKids[a.own] {
			return a.deleted()
		}
		var stale []string
		for _, k := range kids.names {
			if z, ok := strings.CutPrefix(k, delayMark); ok && z != a.own && !lockKids[z] {
				stale = append(stale, a.parent+"/"+k)
			}
		}
		// A marker found stale only by a later listing (a shared holder
		// that ended while this one waited) is waited for from that
		// listing: deleting it sooner would spare the next grant its
		// delay.
		if slices.ContainsFunc(stale, func(p string) bool { return !waited[p] }) {
			l.o.Logger.Info("zklock: lock-delay: the previous holder did not release cleanly; waiting", "name", a.name, "delay", d)
			if err := a.sleep(ctx, time.Until(seen.Add(d))); err != nil {
				return err
			}
			for _, p := range stale {
				waited[p] = true
			}
		}
		ops := []any{
			&zk.CheckVersionRequest{Path: a.path, Version: a.version},
			&zk.CreateRequest{Path: own, Data: []byte(l.o.Identity), Acl: l.o.acl, Flags: zk.FlagPersistent},
		}
		for _, p := range stale {
			ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
		}
		// From now on our marker may exist: if the acquisition fails,
		// discard deletes it with the znode.
		a.marker = own
		res, err := call(ctx, l.g, a.s, func() ([]zk.MultiResponse, error) { return l.conn.Multi(ops...) })
		err = multiErr(res, err)
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			// Our marker exists only if a Multi of ours applied: a retry
			// of one whose reply was lost.
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			return a.deleted()
		case errors.Is(err, zk.ErrNoNode):
			// Our znode is gone, or another grantee removed a stale
			// marker first: look again.
			continue
		}
		if err := a.retry(ctx, err); err != nil {
			return err
		}
	}
}

// sleep waits d, or until ctx ends, the session ends or the Locker closes.
func (a *acquisition) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-a.s.done:
		return a.s.err
	case <-a.l.g.closing:
		return lock.ErrClosed
	}
}

// multiErr returns the error of a Multi: that of the operation that
// failed, or err. The operations after a failed one report the server's
// runtime-inconsistency code, which go-zookeeper has no sentinel for (it
// reads "unknown error: -2").
func multiErr(res []zk.MultiResponse, err error) error {
	for _, r := range res {
		if r.Error != nil && !strings.HasPrefix(r.Error.Error(), "unknown error") {
			return r.Error
		}
	}
	return err
}
