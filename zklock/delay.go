package zklock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
)

// delayMark, followed by a lock znode's protection prefix, names its
// lock-delay marker: a persistent child of the lock's parent, which fails
// parseChild's pattern, so every listing of the queue ignores it.
const delayMark = "~delay~"

// markerOf returns the path of the marker of the lock znodes of parent
// whose names begin with prefix.
func markerOf(parent, prefix string) string { return parent + "/" + delayMark + prefix }

// prefixOf returns the protection prefix of a lock znode's child name.
func prefixOf(child string) string { return child[:len(child)-seqLen] }

// delay runs, when the Locker has a lock-delay, between the admission of
// an acquisition and its grant: for markers whose znode is gone in the
// admitting listing, it waits the lock-delay from that listing's answer,
// then deletes them in one multi checked against its own znode. With no
// such marker it sends nothing. See docs/design/zookeeper.md, "Lock-delay".
func (a *acquisition) delay(ctx context.Context) error {
	d := a.l.o.LockDelay
	if d <= 0 {
		return nil
	}
	l := a.l
	kids, seen := a.last.kids, a.last.at
	waited := make(map[string]bool) // the stale markers waited for
	for {
		stale, err := a.staleMarkers(kids)
		if err != nil || len(stale) == 0 {
			return err
		}
		// A marker found stale only by a later listing (a shared holder
		// that ended while this one waited) is waited for from that
		// listing: deleting it sooner would spare the next grant its
		// delay.
		if slices.ContainsFunc(stale, func(p string) bool { return !waited[p] }) {
			l.o.Logger.Info("zklock: lock-delay: an earlier acquisition did not end with a clean release; waiting", "name", a.name, "delay", d)
			if err := clock.Sleep(ctx, time.Until(seen.Add(d)), l.g.closing, a.s.done, a.s.endErr); err != nil {
				return err
			}
			for _, p := range stale {
				waited[p] = true
			}
		}
		if done, err := a.dropMarkers(ctx, stale); done || err != nil {
			return err
		}
		names, err := call(ctx, l.g, a.s, childrenOf(l.conn, a.parent))
		if err != nil {
			if err := a.retry(ctx, err); err != nil {
				return err
			}
			continue // with the listing before
		}
		kids, seen = names.names, time.Now()
	}
}

// staleMarkers returns the paths of the markers among the parent's
// children kids whose lock znodes are gone, or an error if the
// acquisition's own znode is.
func (a *acquisition) staleMarkers(kids []string) ([]string, error) {
	live := make(map[string]bool) // the prefixes of the lock znodes
	own := false
	for _, k := range queueOf(kids) {
		live[prefixOf(k)] = true
		own = own || k == a.z.own
	}
	if !own {
		return nil, a.deleted()
	}
	var stale []string
	for _, k := range kids {
		if p, ok := strings.CutPrefix(k, delayMark); ok && !live[p] {
			stale = append(stale, a.parent+"/"+k)
		}
	}
	return stale, nil
}

// dropMarkers deletes the stale markers in one multi checked against the
// acquisition's znode. done says that they are gone; not done without an
// error says: list again (another grantee removed one first, or the
// request may be sent again).
func (a *acquisition) dropMarkers(ctx context.Context, stale []string) (done bool, err error) {
	l := a.l
	ops := []any{&zk.CheckVersionRequest{Path: a.z.path, Version: a.z.version}}
	for _, p := range stale {
		ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
	}
	res, err := call(ctx, l.g, a.s, func() ([]zk.MultiResponse, error) { return l.conn.Multi(ops...) })
	switch err = multiErr(res, err); {
	case err == nil:
		return true, nil
	case errors.Is(err, zk.ErrBadVersion):
		return true, a.deleted()
	case errors.Is(err, zk.ErrNoNode):
		// Our znode is gone, or another grantee removed a stale marker
		// first: look again.
		return false, nil
	}
	return false, a.retry(ctx, err)
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
