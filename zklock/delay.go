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

// delayMark and a lock znode's protection prefix name its lock-delay
// marker, a child of the lock's parent that listings of the queue ignore.
const delayMark = "~delay~"

// markerOf returns the path of the marker of the lock znodes of parent
// whose names begin with prefix.
func markerOf(parent, prefix string) string { return parent + "/" + delayMark + prefix }

// prefixOf returns the protection prefix of a lock znode's child name.
func prefixOf(child string) string { return child[:len(child)-seqLen] }

// delay waits, between admission and grant, the lock-delay from the
// admitting listing for the markers whose znode is gone, then deletes
// them. See docs/design/zookeeper.md, "Lock-delay".
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
		// A marker found stale by a later listing is waited for from it.
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

// staleMarkers returns the markers among kids whose lock znodes are gone,
// or an error if the acquisition's own znode is.
func (a *acquisition) staleMarkers(kids []string) ([]string, error) {
	live := make(map[string]bool) // the prefixes of the lock znodes
	own := false
	q, _ := lockQueue(kids)
	for _, k := range q {
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
// acquisition's znode; not done without an error says: list again.
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
		// Our znode went, or another grantee removed a marker first.
		return false, nil
	}
	return false, a.retry(ctx, err)
}

// multiErr returns the error of the operation of a Multi that failed, or
// err; the operations after it report "unknown error: -2".
func multiErr(res []zk.MultiResponse, err error) error {
	for _, r := range res {
		if r.Error != nil && !strings.HasPrefix(r.Error.Error(), "unknown error") {
			return r.Error
		}
	}
	return err
}
