package zklock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/lock"
)

// Observe sends the current holder of name, then every change of holder,
// until ctx ends, the Locker is closed, or a request fails for a reason
// other than a passing disconnection. A zero Holder means the lock is free.
// The changes are queued inside the observation, so a slow reader misses
// nothing the observation saw.
//
// The observation follows a child watch on the lock's parent and lists the
// children after every change. go-zookeeper v1.0.4 has no persistent
// watches, and a listing shows only the present, so:
//
//   - A grant whose znode is created and deleted between two listings
//     (within about one round trip) is not seen and not reported.
//   - A free moment between two grants is reported when the parent's child
//     version shows that the old holder's znode was deleted before the new
//     one was created (ZooKeeper numbers sequential children with that
//     version); when other changes in between make it ambiguous, it is not.
//   - What is reported is in grant order: tokens rise.
func (l *Locker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.usable(ctx); err != nil {
		return nil, nil, fmt.Errorf("zklock: observe %q: %w", name, err)
	}
	if err := lock.ValidateName(name); err != nil {
		return nil, nil, fmt.Errorf("zklock: observe: %w", err)
	}
	if err := l.enter(); err != nil {
		return nil, nil, fmt.Errorf("zklock: observe %q: %w", name, err)
	}
	defer l.leave()
	o := &observation{l: l, name: name, parent: l.parent(name), out: make(chan lock.Holder)}
	l.g.spawn(func() { o.run(ctx) })
	return o.out, o.error, nil
}

type observation struct {
	l      *Locker
	name   string
	parent string
	out    chan lock.Holder

	mu  sync.Mutex
	err error

	queue []lock.Holder // changes not yet sent

	// What the last listing showed.
	listed      bool
	parentCzxid int64
	cversion    int32
	kids        map[string]bool
	holder      string // child name of the last reported holder; "" when free
	reported    bool
}

func (o *observation) error() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *observation) run(ctx context.Context) {
	defer close(o.out)
	fail := func(err error) {
		o.mu.Lock()
		o.err = fmt.Errorf("zklock: observe %q: %w", o.name, permission(err))
		o.mu.Unlock()
	}
	var watch <-chan zk.Event
	for {
		if watch == nil {
			w, err := o.list(ctx)
			switch {
			case err == nil:
				watch = w
			case isConnErr(err):
				if err := o.l.ss.awaitConnected(ctx, nil); err != nil {
					fail(err)
					return
				}
				continue
			default:
				fail(err)
				return
			}
		}
		var send chan lock.Holder
		var head lock.Holder
		if len(o.queue) > 0 {
			send, head = o.out, o.queue[0]
		}
		select {
		case send <- head:
			o.queue = o.queue[1:]
		case <-watch:
			watch = nil
		case <-ctx.Done():
			fail(context.Cause(ctx))
			return
		case <-o.l.g.closing:
			fail(lock.ErrClosed)
			return
		}
	}
}

// list takes one listing, queues the changes it reveals, and returns the
// watch for the next change.
func (o *observation) list(ctx context.Context) (<-chan zk.Event, error) {
	for {
		type cw struct {
			names []string
			stat  *zk.Stat
			w     <-chan zk.Event
		}
		r, err := call(ctx, o.l.g, nil, func() (cw, error) {
			n, st, w, err := o.l.conn.ChildrenW(o.parent)
			return cw{n, st, w}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			e, err := call(ctx, o.l.g, nil, existsW(o.l.conn, o.parent))
			if err != nil {
				return nil, err
			}
			if e.ok {
				continue // created meanwhile
			}
			o.report("", lock.Holder{})
			o.listed = false
			return e.watch, nil
		}
		if err != nil {
			return nil, err
		}
		again, err := o.take(ctx, r.names, r.stat)
		if err != nil {
			return nil, err
		}
		if again {
			continue
		}
		return r.w, nil
	}
}

// take queues the changes a listing of the parent (its children's names
// and its stat) reveals, and remembers the listing. again says that the
// holder it found was released meanwhile: list again.
func (o *observation) take(ctx context.Context, names []string, st *zk.Stat) (again bool, err error) {
	if o.listed && st.Czxid != o.parentCzxid {
		// The parent was deleted and created again: every child of the
		// old one is gone, so the lock was free in between.
		o.report("", lock.Holder{})
		o.listed = false
	}
	q := queueOf(names)
	next := ""
	if len(q) > 0 {
		next = q[0]
	}
	if next != "" && (next != o.holder || !o.reported) {
		if o.holder != "" && o.freeBetween(q, st, next) {
			o.report("", lock.Holder{})
		}
		type gd struct {
			data []byte
			stat *zk.Stat
		}
		g, err := call(ctx, o.l.g, nil, func() (gd, error) {
			d, st, err := o.l.conn.Get(o.parent + "/" + next)
			return gd{d, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return true, nil // already released: list again
		}
		if err != nil {
			return false, err
		}
		o.report(next, holderOf(next, g.data, g.stat))
	} else if next == "" {
		o.report("", lock.Holder{})
	}
	o.listed = true
	o.parentCzxid = st.Czxid
	o.cversion = st.Cversion
	o.kids = make(map[string]bool, len(q))
	for _, k := range q {
		o.kids[k] = true
	}
	return false, nil
}

// report queues h unless it is what was reported last.
func (o *observation) report(child string, h lock.Holder) {
	if o.reported && child == o.holder {
		return
	}
	o.reported = true
	o.holder = child
	o.queue = append(o.queue, h)
}

// freeBetween reports whether, according to the parent's child version,
// the last reported holder's znode was deleted before next was created.
// ZooKeeper gives a sequential child the parent's cversion as its number,
// and every create and delete of a child raises the cversion by one; when
// the creations and deletions between two listings account for every step,
// the step not taken by a creation is the old holder's deletion.
func (o *observation) freeBetween(q []string, st *zk.Stat, next string) bool {
	if !o.listed || o.kids[next] {
		return false // next was already queued: a direct hand-over
	}
	used := map[int64]bool{}
	for _, k := range q {
		if !o.kids[k] {
			used[seqNum(k)] = true
		}
	}
	deleted := 0
	for k := range o.kids {
		if !slicesContains(q, k) {
			deleted++
		}
	}
	if deleted != 1 || int64(st.Cversion-o.cversion) != int64(len(used)+deleted) {
		return false
	}
	for v := int64(o.cversion); v < int64(st.Cversion); v++ {
		if !used[v] {
			return v < seqNum(next)
		}
	}
	return false
}

// seqNum returns a lock znode's sequence number as a number.
func seqNum(child string) int64 {
	n, _ := strconv.ParseInt(seqOf(child), 10, 64)
	return n
}

func slicesContains(q []string, k string) bool {
	for _, x := range q {
		if x == k {
			return true
		}
	}
	return false
}
