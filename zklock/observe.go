package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// Observe sends the current holder of name, then every change of holder,
// until ctx ends or the Locker is closed. A zero Holder means the lock is
// free; a holder is never sent twice in a row. The changes are queued
// inside the observation, so a slow reader misses nothing the observation
// saw. The channel is closed at the end; the returned function then tells
// why (ctx's cause or an error wrapping [lock.ErrClosed]). The observation
// survives lost connections and expired sessions.
//
// What is reported is in grant order, tokens rising, with at most one zero
// Holder between two holders, and the state the lock ends up in is always
// reported. A holder whose grant lasts longer than about one round trip
// plus the client's own delays is reported; one created and deleted within
// that window, or while the Locker is disconnected, is not, nor is a free
// moment no listing shows and the parent's child version cannot prove.
// Why: "What Observe reports" in docs/design/zookeeper.md.
func (l *Locker) Observe(ctx context.Context, name string) (<-chan lock.Holder, func() error, error) {
	if err := l.enterName(ctx, "observe", name); err != nil {
		return nil, nil, err
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

	mu    sync.Mutex
	err   error
	queue []lock.Holder // changes not yet sent

	// What the last listing showed, and what it reported: touched only by
	// the one listing that runs at a time.
	last observed
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

// end records why the observation ended.
func (o *observation) end(err error) {
	o.mu.Lock()
	o.err = fmt.Errorf("zklock: observe %q: %w", o.name, err)
	o.mu.Unlock()
}

// next returns the reader's channel and the change to send on it, or a
// nil channel when none is queued.
func (o *observation) next() (chan lock.Holder, lock.Holder) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queue) == 0 {
		return nil, lock.Holder{}
	}
	return o.out, o.queue[0]
}

// sent drops the change next returned, which the reader took.
func (o *observation) sent() {
	o.mu.Lock()
	o.queue = o.queue[1:]
	o.mu.Unlock()
}

// run feeds the reader from the queue and keeps one listing or one watch
// going at all times (see listings).
func (o *observation) run(ctx context.Context) {
	defer close(o.out)
	ls := &listings{o: o, results: make(chan listed, 1), stopWatch: func() {}}
	defer ls.end()
	ls.start(ctx)
	for {
		send, head := o.next()
		select {
		case send <- head:
			o.sent()
		case r := <-ls.results:
			ls.took(ctx, r)
		case <-ls.watch:
			ls.watch = nil
			if ls.retry == nil {
				ls.start(ctx)
			}
		case <-ls.retry:
			ls.retry = nil
			ls.start(ctx)
		case <-ctx.Done():
			o.end(context.Cause(ctx))
			return
		case <-o.l.g.closing:
			o.end(lock.ErrClosed)
			return
		}
	}
}

// listed is the result of one listing of an observation: the watch for
// the next change and the function that forgets it, or an error.
type listed struct {
	watch <-chan zk.Event
	stop  func()
	err   error
}

// listings runs an observation's listings, one at a time, each on its own
// goroutine, so that a listing waiting for the connection never holds
// back what is queued; and it keeps the watch of the latest one. Its
// fields but mu and ended belong to run's goroutine.
type listings struct {
	o       *observation
	results chan listed // at most one listing runs
	running bool        // a listing runs

	watch     <-chan zk.Event
	stopWatch func()
	retry     <-chan time.Time
	backoff   time.Duration

	mu    sync.Mutex
	ended bool // run has returned
}

// start starts a listing unless one runs.
func (ls *listings) start(ctx context.Context) {
	if ls.running {
		return
	}
	ls.running = true
	o := ls.o
	o.l.g.spawn(func() {
		w, stop, err := o.list(ctx)
		if err != nil && !isStop(err) && isConnErr(err) {
			// Requests queue in go-zookeeper while it reconnects;
			// waiting here keeps a connection that fails at once from
			// spinning.
			_ = o.l.ss.awaitConnected(ctx, nil)
		}
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.ended {
			if stop != nil {
				stop()
			}
			return
		}
		ls.results <- listed{w, stop, err}
	})
}

// took acts on the result of a listing.
func (ls *listings) took(ctx context.Context, r listed) {
	o := ls.o
	ls.running = false
	switch {
	case r.err == nil:
		ls.stopWatch()
		ls.watch, ls.stopWatch, ls.backoff = r.watch, r.stop, 0
	case ctx.Err() != nil || o.l.ss.isClosed():
		// run's select ends it.
	case isConnErr(r.err):
		o.l.o.Logger.Debug("zklock: observe: listing failed with the connection; listing again", "lock", o.name, "err", r.err)
		ls.start(ctx)
	default:
		ls.backoff = min(max(2*ls.backoff, observeRetryMin), observeRetryMax)
		o.l.o.Logger.Warn("zklock: observe: listing failed; retrying", "lock", o.name, "in", ls.backoff, "err", secure.Refusal(r.err, isRefusal))
		ls.retry = time.After(ls.backoff)
	}
}

// end forgets the watch, and makes a listing that ends after run forget
// its own.
func (ls *listings) end() {
	ls.stopWatch()
	ls.mu.Lock()
	ls.ended = true
	ls.mu.Unlock()
	select {
	case r := <-ls.results:
		if r.stop != nil {
			r.stop()
		}
	default:
	}
}

// observeRetryMin and observeRetryMax bound the backoff of an observation
// whose listings fail for a reason other than the connection.
const (
	observeRetryMin = 50 * time.Millisecond
	observeRetryMax = 2 * time.Second
)

// list takes one listing, queues the changes it reveals, and returns the
// watch for the next change, and the function that forgets it (called by
// run when it no longer waits for it). The watch is set as waiters set
// theirs (docs/design/zookeeper.md, "Watches"), so every handshake ends
// the wait and the observation lists again.
func (o *observation) list(ctx context.Context) (<-chan zk.Event, func(), error) {
	if !o.last.listed {
		// The first holder reported is the current one, as Holder's is:
		// the server catches up with the leader first.
		if err := o.l.syncWith(ctx, o.parent); err != nil {
			return nil, func() {}, err
		}
	}
	for {
		r, stop, err := o.children(ctx)
		if errors.Is(err, zk.ErrNoNode) {
			w, stop, again, err := o.absent(ctx)
			if again {
				continue // created meanwhile
			}
			return w, stop, err
		}
		if err != nil {
			return nil, nil, err
		}
		again, err := o.take(ctx, r.names, r.stat)
		if err != nil || again {
			stop()
		}
		if err != nil {
			return nil, nil, err
		}
		if !again {
			return r.watch, stop, nil
		}
	}
}

// childrenWatch is a listing of children with the watch it set.
type childrenWatch struct {
	names []string
	stat  *zk.Stat
	watch <-chan zk.Event
}

// children lists the parent's children and sets a child watch; stop
// forgets the watch.
func (o *observation) children(ctx context.Context) (r childrenWatch, stop func(), err error) {
	mine, stop := o.l.watch.waitChildren(o.parent)
	r, err = call(ctx, o.l.g, nil, func() (childrenWatch, error) {
		n, st, err := o.l.conn.Children(o.parent) // the wrapper sets the watch flag
		return childrenWatch{n, st, mine}, err
	})
	if err != nil {
		stop()
		return childrenWatch{}, nil, err
	}
	return r, stop, nil
}

// absent reports a missing parent as a free lock and returns the watch for
// its creation, and the function that forgets it; again says that it
// exists by now: list again.
func (o *observation) absent(ctx context.Context) (w <-chan zk.Event, stop func(), again bool, err error) {
	read, stop := o.l.watch.reader(o.parent, true)
	e, err := call(ctx, o.l.g, nil, read)
	if err != nil || e.ok {
		stop()
		return nil, nil, err == nil, err
	}
	o.report("", lock.Holder{})
	o.last.listed = false
	return e.watch, stop, false, nil
}

// take queues the changes a listing of the parent (its children's names
// and its stat) reveals, and remembers the listing. again says that the
// holder it found was released meanwhile: list again.
func (o *observation) take(ctx context.Context, names []string, st *zk.Stat) (again bool, err error) {
	if o.last.listed && st.Czxid != o.last.parentCzxid {
		// The parent was deleted and created again: every child of the
		// old one is gone, so the lock was free in between.
		o.report("", lock.Holder{})
		o.last.listed = false
	}
	q := queueOf(names)
	next := ""
	if len(q) > 0 {
		next = q[0]
	}
	if next != "" && (next != o.last.holder || !o.last.reported) {
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
	} else if next == "" {
		o.report("", lock.Holder{})
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
}

// freeBetween reports whether, according to the parent's child version,
// the last reported holder's znode was deleted before next was created
// (docs/design/zookeeper.md, "Touches and the child version").
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

// seqNum returns a lock znode's sequence number as a number.
func seqNum(child string) int64 {
	n, _ := strconv.ParseInt(seqOf(child), 10, 64)
	return n
}
