package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// Observe implements [lock.Observer]. It queues the changes it sees, so a
// slow reader misses none of them, and survives lost connections and
// expired sessions. What it reports is in grant order, tokens rising, with
// at most one zero Holder between two holders; a holder that comes and
// goes within about a round trip, or while the Locker is disconnected, is
// missed ("What Observe reports" in docs/design/zookeeper.md).
func (l *Locker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.enterName(ctx, "observe", name); err != nil {
		return nil, nil, err
	}
	defer l.leave()
	o := &observation{l: l, name: name, parent: l.parent(name), out: make(chan lock.Holder), wake: make(chan struct{}, 1)}
	l.g.spawn(func() { o.run(ctx) })
	return o.out, o.error, nil
}

type observation struct {
	l      *Locker
	name   string
	parent string
	out    chan lock.Holder
	wake   chan struct{} // a change was queued

	mu    sync.Mutex
	err   error
	queue []lock.Holder // changes not yet sent

	last observed // follow's alone
}

// observed is what an observation's last listing showed and reported.
type observed struct {
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

// run feeds the reader from the queue follow fills, so that a listing
// waiting for the connection never holds back what is queued.
func (o *observation) run(ctx context.Context) {
	defer close(o.out)
	fctx, cancel := context.WithCancel(ctx)
	followed := make(chan struct{})
	o.l.g.spawn(func() {
		defer close(followed)
		o.follow(fctx)
	})
	defer func() {
		cancel()
		<-followed
	}()
	var err error
	for err == nil {
		var send chan lock.Holder
		var head lock.Holder
		o.mu.Lock()
		if len(o.queue) > 0 {
			send, head = o.out, o.queue[0]
		}
		o.mu.Unlock()
		select {
		case send <- head:
			o.mu.Lock()
			o.queue = o.queue[1:]
			o.mu.Unlock()
		case <-o.wake:
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-o.l.g.closing:
			err = lock.ErrClosed
		}
	}
	o.mu.Lock()
	o.err = fmt.Errorf("zklock: observe %q: %w", o.name, err)
	o.mu.Unlock()
}

// observeRetryMin and observeRetryMax bound the backoff of an observation
// whose listings fail for a reason other than the connection.
const (
	observeRetryMin = 50 * time.Millisecond
	observeRetryMax = 2 * time.Second
)

// follow keeps one listing or one watch going until ctx ends or the
// Locker closes.
func (o *observation) follow(ctx context.Context) {
	var backoff time.Duration
	for {
		w, stop, err := o.list(ctx)
		var again <-chan time.Time
		switch {
		case err == nil:
			backoff = 0
		case isStop(err):
			return
		case isConnErr(err):
			// Requests queue in go-zookeeper while it reconnects: wait.
			o.l.o.Logger.Debug("zklock: observe: listing failed with the connection; listing again", "lock", o.name, "err", err)
			_ = o.l.ss.awaitConnected(ctx, nil)
		default:
			backoff = min(max(2*backoff, observeRetryMin), observeRetryMax)
			o.l.o.Logger.Warn("zklock: observe: listing failed; retrying", "lock", o.name, "in", backoff, "err", secure.Refusal(err, isRefusal))
			again = time.After(backoff)
		}
		if err == nil || again != nil {
			select {
			case <-w:
			case <-again:
			case <-ctx.Done():
			case <-o.l.g.closing:
			}
		}
		if stop != nil {
			stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-o.l.g.closing:
			return
		default:
		}
	}
}

// list takes one listing, queues the changes it reveals, and returns the
// watch for the next change and its stop. A handshake ends the wait
// (recordWatcher.connect).
func (o *observation) list(ctx context.Context) (<-chan zk.Event, func(), error) {
	if !o.last.listed {
		// The first holder reported is the current one, as Holder's is:
		// the server catches up with the leader first.
		if err := o.l.syncWith(ctx, o.parent); err != nil {
			return nil, func() {}, err
		}
	}
	for {
		w, stop := o.l.watch.waitChildren(o.parent) // the wrapper sets the watch flag
		kids, err := call(ctx, o.l.g, nil, childrenOf(o.l.conn, o.parent))
		again := false
		if err == nil {
			again, err = o.take(ctx, kids.names, kids.stat)
		}
		if err == nil && !again {
			return w, stop, nil
		}
		stop()
		if errors.Is(err, zk.ErrNoNode) {
			// Unless the parent was created meanwhile: list again.
			if w, stop, again, err := o.absent(ctx); !again {
				return w, stop, err
			}
		} else if err != nil {
			return nil, nil, err
		}
	}
}

// absent reports a missing parent as a free lock and returns the watch for
// its creation and its stop; again: it exists by now, list again.
func (o *observation) absent(ctx context.Context) (w <-chan zk.Event, stop func(), again bool, err error) {
	created := make(chan zk.Event, 1)
	read, stop := o.l.watch.reader(o.parent, true, created)
	e, err := call(ctx, o.l.g, nil, read)
	if err != nil || e.ok {
		stop()
		return nil, nil, err == nil, err
	}
	o.report("", lock.Holder{})
	o.last.listed = false
	return created, stop, false, nil
}

// take queues the changes a listing of the parent reveals and remembers
// the listing; again: the holder it found went meanwhile, list again.
func (o *observation) take(ctx context.Context, names []string, st *zk.Stat) (again bool, err error) {
	if o.last.listed && st.Czxid != o.last.parentCzxid {
		// The parent was deleted and created again: every child of the
		// old one is gone, so the lock was free in between.
		o.report("", lock.Holder{})
		o.last.listed = false
	}
	q, _ := lockQueue(names)
	if len(q) == 0 {
		o.report("", lock.Holder{})
	} else if next := q[0]; next != o.last.holder || !o.last.reported {
		if o.last.holder != "" && o.freeBetween(q, st, next) {
			o.report("", lock.Holder{})
		}
		g, err := call(ctx, o.l.g, nil, getOf(o.l.conn, o.parent+"/"+next))
		if errors.Is(err, zk.ErrNoNode) {
			return true, nil // already released: list again
		}
		if err != nil {
			return false, err
		}
		o.report(next, holderOf(next, g.data, g.stat))
	}
	o.last.listed = true
	o.last.parentCzxid = st.Czxid
	o.last.cversion = st.Cversion
	o.last.kids = make(map[string]bool, len(q))
	for _, k := range q {
		o.last.kids[k] = true
	}
	return false, nil
}

// report queues h unless it is what was reported last.
func (o *observation) report(child string, h lock.Holder) {
	if o.last.reported && child == o.last.holder {
		return
	}
	o.last.reported = true
	o.last.holder = child
	o.mu.Lock()
	o.queue = append(o.queue, h)
	o.mu.Unlock()
	poke(o.wake)
}

// freeBetween reports whether, according to the parent's child version,
// the last reported holder's znode was deleted before next was created
// (docs/design/zookeeper.md, "The child version").
func (o *observation) freeBetween(q []string, st *zk.Stat, next string) bool {
	if !o.last.listed || o.last.kids[next] {
		return false // next was already queued: a direct hand-over
	}
	used := map[int64]bool{}
	for _, k := range q {
		if !o.last.kids[k] {
			used[seqNum(k)] = true
		}
	}
	deleted := 0
	for k := range o.last.kids {
		if !slices.Contains(q, k) {
			deleted++
		}
	}
	if deleted != 1 || int64(st.Cversion-o.last.cversion) != int64(len(used)+deleted) {
		return false
	}
	for v := int64(o.last.cversion); v < int64(st.Cversion); v++ {
		if !used[v] {
			return v < seqNum(next)
		}
	}
	return false
}
