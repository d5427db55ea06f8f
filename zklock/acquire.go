package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// A lock's znodes are children of root/name named "~<32 hex digits>~" (the
// protection prefix, random per acquisition), then, for a shared or
// semaphore request, its kind's tag and a '~' (see queue.Request.Tag),
// followed by the 10-digit sequence number the server appends. '~' cannot
// occur in a lock name, so a lock znode of name "a" and the parent of name
// "a/b" can never be taken for one another, and children that do not match
// the pattern exactly are ignored.
const (
	marker    = '~'
	randLen   = 1 + 32 + 1
	seqLen    = 10
	minChild  = randLen + seqLen
	maxTagLen = 11 // "s" and a limit of up to 10 digits
)

// newPrefix returns a fresh protection prefix for a request.
func newPrefix(req queue.Request) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	p := string(marker) + hex.EncodeToString(b) + string(marker)
	if tag := req.Tag(); tag != "" {
		p += tag + string(marker)
	}
	return p
}

// parseChild reports whether a child name is a lock znode and, if so, the
// request it stands for.
func parseChild(s string) (queue.Request, bool) {
	if len(s) < minChild || len(s) > minChild+maxTagLen+1 || s[0] != marker || s[randLen-1] != marker {
		return queue.Request{}, false
	}
	for i := 1; i < randLen-1; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return queue.Request{}, false
		}
	}
	for i := len(s) - seqLen; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return queue.Request{}, false
		}
	}
	tag := s[randLen : len(s)-seqLen]
	if tag != "" {
		if tag[len(tag)-1] != marker {
			return queue.Request{}, false
		}
		tag = tag[:len(tag)-1]
		if tag == "" {
			return queue.Request{}, false
		}
	}
	return queue.ParseTag(tag)
}

// isExclusivePath reports whether path is the znode of an exclusive
// request: a lock's, or a read-write lock's writer's.
func isExclusivePath(path string) bool {
	r, ok := parseChild(path[strings.LastIndexByte(path, '/')+1:])
	return ok && r.Kind == queue.Exclusive
}

// isLockChild reports whether a child name is a lock znode.
func isLockChild(s string) bool {
	_, ok := parseChild(s)
	return ok
}

// requestOf returns the request of a lock znode's child name (one that
// queue returned).
func requestOf(child string) queue.Request {
	r, _ := parseChild(child)
	return r
}

// seqOf returns a lock znode's sequence number.
func seqOf(child string) string { return child[len(child)-seqLen:] }

// queueOf returns the lock znodes among names, in grant order (by sequence
// number).
func queueOf(names []string) []string {
	q, _ := lockQueue(names)
	return q
}

// lockQueue returns the lock znodes among names in grant order, and their
// requests: each name is parsed once.
func lockQueue(names []string) ([]string, []queue.Request) {
	type child struct {
		name string
		req  queue.Request
	}
	cs := make([]child, 0, len(names))
	for _, n := range names {
		if r, ok := parseChild(n); ok {
			cs = append(cs, child{n, r})
		}
	}
	slices.SortFunc(cs, func(a, b child) int { return strings.Compare(seqOf(a.name), seqOf(b.name)) })
	q, reqs := make([]string, len(cs)), make([]queue.Request, len(cs))
	for i, c := range cs {
		q[i], reqs[i] = c.name, c.req
	}
	return q, reqs
}

// parent returns the znode whose children are name's lock znodes.
func (l *Locker) parent(name string) string { return l.o.root + "/" + name }

// Acquire blocks until it holds the lock called name, ctx ends, the Locker
// is closed, or the session is lost. It returns a *Lease. See
// [lock.Locker.Acquire].
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, fmt.Errorf("zklock: acquire %q: %w", name, err)
	}
	le, err := l.acquire(ctx, "acquire", name, queue.ExclusiveRequest, false)
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
	le, err := l.acquire(ctx, "try acquire", name, queue.ExclusiveRequest, true)
	if err != nil {
		return nil, err
	}
	return le, nil
}

// acquisition is one acquisition of any kind: its lock, its znode, the
// session it works in, and what it has learnt of its znode so far.
type acquisition struct {
	l       *Locker
	name    string
	parent  string // the znode whose children are the lock's znodes
	req     queue.Request
	try     bool     // TryAcquire*: do not wait
	checked bool     // the queue's oldest request was found compatible
	prefix  string   // this acquisition's protection prefix
	s       *session // the session the znode belongs to
	path    string   // the znode, once created
	own     string   // its child name

	czxid   int64 // the znode's, once read (the token); 0: read it with the next listing
	version int32

	// alone says that the create's answer showed the znode as the
	// parent's only child: the head of an otherwise empty queue, admitted
	// without a listing (see created).
	alone bool

	// seenTouch is the predecessor and data version that made the last
	// listing be read again (see step), so that a data version set by
	// someone else costs one listing, not a loop.
	seenTouch string

	// speculate says that the next listing goes with a touch: the last
	// wait ended with the touch of the predecessor (see step).
	speculate bool
	// touchUnsure says that a touch failed in a way that leaves the
	// znode's data version unknown, so that a touch (which reads it
	// again when it has to) must come before a grant.
	touchUnsure bool

	// noMark says that this acquisition does not wait for release marks
	// (see waitFor): a record ahead had data set by someone else.
	noMark bool
	// marked says that the acquisition was admitted with no listing
	// after its predecessor went: on a release mark, or on the holder's
	// going (see waitFor).
	marked bool

	// marker is the acquisition's lock-delay marker, created with its
	// znode (see delay), when the Locker has a lock-delay: a discarded
	// acquisition deletes it with its znode.
	marker string
	// kids are the parent's children in the latest listing, answered at
	// listed: what delay reads at the grant.
	kids   []string
	listed time.Time
}

// acquire implements every Acquire and TryAcquire method: req says which
// kind of grant, try whether to wait, op how errors name the call.
func (l *Locker) acquire(ctx context.Context, op, name string, req queue.Request, try bool) (*Lease, error) {
	if err := lock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("zklock: %s: %w", op, err)
	}
	if req.Kind == queue.Permit {
		if err := queue.CheckLimit(req.Limit); err != nil {
			return nil, fmt.Errorf("zklock: %s %q: %w: %w", op, name, lock.ErrInvalidConfig, err)
		}
	}
	ctx, tel := l.tel.StartAcquire(ctx, name, req.Kind.String(), !try)
	a := &acquisition{l: l, name: name, parent: l.parent(name), req: req, try: try}
	le, err := a.run(ctx)
	var token uint64
	if le != nil {
		token = uint64(le.czxid)
	}
	if hold := tel.End(config.Outcome(ctx, err), token, err); le != nil && hold.Counts() {
		le.st.OnEnd(func(err error) { l.countEnd(le, hold, err) })
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: %s %q: %w", op, name, permission(err))
	}
	return le, nil
}

// countEnd records the end of le, which ended with err. The server deletes
// a session's ephemeral znodes when it expires the session, and a watch
// may report the deletion before the session's end reaches the Locker:
// for a deletion, the reason is counted in the background once one
// request on the session has shown whether it still lives (expired if
// not).
func (l *Locker) countEnd(le *Lease, hold telemetry.Hold, err error) {
	reason := config.EndReason(err)
	if reason != telemetry.Deleted || !l.tel.Metrics() {
		hold.End(reason)
		return
	}
	hold.End("")
	select {
	case <-l.g.closing:
		hold.Lost(reason)
		return
	default:
	}
	l.g.spawn(func() {
		_, _, err := l.conn.Exists("/")
		switch {
		case errors.Is(err, zk.ErrSessionExpired), err == nil && l.conn.SessionID() != le.s.id:
			reason = telemetry.Expired
		case err != nil:
			// The connection dropped: give the Locker the time it
			// takes to decide about the session.
			t := time.NewTimer(l.ss.timeout())
			defer t.Stop()
			select {
			case <-le.s.done:
			case <-t.C:
			case <-l.g.closing:
			}
		}
		if ended(le.s) {
			if r := telemetry.ReasonOf(le.s.err); r != "" {
				reason = r
			}
		}
		hold.Lost(reason)
	})
}

func (a *acquisition) run(ctx context.Context) (*Lease, error) {
	if err := a.l.enter(); err != nil {
		return nil, err
	}
	defer a.l.leave()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		var err error
		a.s, err = a.l.ss.get(ctx)
		if err != nil {
			return nil, err
		}
		a.prefix = newPrefix(a.req)
		a.path, err = a.create(ctx)
		if err == nil {
			break
		}
		// A session found lost before this acquisition had a znode costs it
		// no place in the queue: start again on the next session.
		if ended(a.s) && errors.Is(err, lock.ErrLost) && attempt < 3 {
			continue
		}
		return nil, err
	}
	a.own = a.path[len(a.parent)+1:]
	a.l.tab.track(a.path)
	le, err := a.queueUp(ctx)
	if err != nil {
		a.l.tab.untrack(a.path)
		a.l.discard(a.path, a.marker)
		return nil, err
	}
	return le, nil
}

// create creates this acquisition's znode and returns its path; it sets
// a.czxid when the create's reply carries the token (see created). A
// create whose reply was lost is looked up by its prefix. One still in
// flight when ctx ends is settled before create returns (see settle); one
// abandoned while in flight (the session ended, the Locker closed) is
// cleaned up when its reply comes.
func (a *acquisition) create(ctx context.Context) (string, error) {
	// The request and the clean-up of an abandoned one may outlive this
	// attempt (the next one takes another prefix): they read copies.
	l, parent, prefix := a.l, a.parent, a.prefix
	a.marker = ""
	if l.o.LockDelay > 0 {
		a.marker = markerOf(parent, prefix)
	}
	marker := a.marker
	abandoned := func(c created, err error) {
		switch {
		case err == nil:
			l.jan.add(cleanup{path: c.path, marker: marker})
		case isConnErr(err):
			l.jan.add(cleanup{parent: parent, prefix: prefix, marker: marker})
		}
	}
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return "", fmt.Errorf("creating the lock znode under %s keeps failing", a.parent)
		}
		stamp := !l.noStamp.Load()
		f := start(l.g, func() (created, error) { return l.createZnode(parent, prefix, marker, stamp) }, abandoned)
		r, stop := f.await(ctx, l.g, a.s)
		if stop != nil {
			if ctx.Err() != nil {
				a.settle(f)
			} else {
				f.abandon()
			}
			return "", &stopError{stop}
		}
		c, err := r.v, r.err
		switch {
		case err == nil:
			// The reply came on a connection of this acquisition's
			// session only if the connection is in it still: session IDs
			// are never reused, and a znode created in a later session
			// is found (and given up) by the first listing.
			if c.czxid != 0 && l.conn.SessionID() == a.s.id {
				a.czxid, a.alone = c.czxid, c.alone
			}
			return c.path, nil
		case stamp && errors.Is(err, errStampDenied):
			// No write permission on the parent: this Locker reads the
			// token with the first listing from now on.
			l.noStamp.Store(true)
			l.o.Logger.Debug("zklock: no write permission on a lock's parent; the token is read after the create", "parent", parent)
		case errors.Is(err, zk.ErrNoNode):
			// The parent is missing, or the server removed the empty
			// container between our check and the create.
			if err := a.ensure(ctx, a.parent); err != nil {
				return "", err
			}
		case isConnErr(err), marker != "" && errors.Is(err, zk.ErrNodeExists):
			// The server may have applied the create: look for it. (Our
			// marker exists only if a multi of ours was applied: one
			// whose reply was lost.)
			found, err := a.findOwn(ctx)
			if err != nil {
				l.jan.add(cleanup{parent: a.parent, prefix: a.prefix, marker: marker})
				return "", err
			}
			if found != "" {
				return found, nil
			}
		default:
			return "", fmt.Errorf("create under %s: %w", a.parent, err)
		}
	}
}

// created is the answer to a lock znode's create: its path and, when the
// create went with a stamp of the parent, its czxid and whether it was
// then the parent's only child. The stamp's stat is the parent's as the
// create left it, in the same transaction: a count of one child is the
// new znode alone, so nobody was queued ahead of it then, and nobody can
// be later (sequence numbers only grow).
type created struct {
	path  string
	czxid int64
	alone bool
}

// errStampDenied says that the multi of a create was refused for its stamp
// of the parent alone (zk.ErrNoAuth on the SetData).
var errStampDenied = errors.New("no write permission on the lock's parent")

// createZnode sends the create of a lock znode parent/prefix and, when
// marker is not empty, of its lock-delay marker (see delay), in one
// request.
//
// With stamp, the same multi also sets the parent's data, to nothing as
// it always is, unconditionally: every operation of a multi is one
// transaction with one zxid, which is the znode's czxid (the token) and
// the parent's new mzxid, and only a SetData answers with a stat. So the
// token comes with the create's answer, and the grant needs no read of
// the znode's stat: one request per grant fewer. The parent's data
// version counts the creates; nothing reads it, and a lock's parent holds
// no data of anyone's. A parent this Locker may not write (its ACL)
// makes the multi fail with errStampDenied, applying nothing.
func (l *Locker) createZnode(parent, prefix, marker string, stamp bool) (created, error) {
	id := []byte(l.o.Identity)
	if !stamp && marker == "" {
		p, err := l.conn.Create(parent+"/"+prefix, id, zk.FlagEphemeralSequential, l.o.acl)
		return created{path: p}, err
	}
	ops := make([]any, 0, 3)
	ops = append(ops, &zk.CreateRequest{Path: parent + "/" + prefix, Data: id, Acl: l.o.acl, Flags: zk.FlagEphemeralSequential})
	if stamp {
		ops = append(ops, &zk.SetDataRequest{Path: parent, Data: nil, Version: -1})
	}
	if marker != "" {
		ops = append(ops, &zk.CreateRequest{Path: marker, Data: id, Acl: l.o.acl, Flags: zk.FlagPersistent})
	}
	res, err := l.conn.Multi(ops...)
	if stamp && len(res) > 1 && errors.Is(res[1].Error, zk.ErrNoAuth) {
		// Refused for the stamp: the create before it passed its checks.
		return created{}, errStampDenied
	}
	if err := multiErr(res, err); err != nil {
		return created{}, err
	}
	c := created{path: res[0].String}
	if stamp && len(res) > 1 && res[1].Stat != nil {
		c.czxid, c.alone = res[1].Stat.Mzxid, res[1].Stat.NumChildren == 1
	}
	return c, nil
}

// settle finishes a create that was in flight when the caller's context
// ended. The server may still apply it, and a znode that appeared after
// Acquire had returned its error would head the queue until the janitor
// deleted it: for that while every other request of the name would wait
// for it and every TryAcquire would be refused, by a call that had already
// failed. So, as a cancelled wait deletes its znode before it returns,
// settle waits for the create's answer (on the Locker's context, bounded
// as discard is) and deletes the znode it made. When no answer comes in
// time, the session ends or the Locker closes, the janitor takes over
// when the answer comes, as for any abandoned create.
func (a *acquisition) settle(f *future[created]) {
	ctx, cancel := context.WithTimeout(a.l.g.bg, a.l.cleanupWait())
	defer cancel()
	r, stop := f.await(ctx, a.l.g, a.s)
	switch {
	case stop != nil:
		f.abandon()
	case r.err == nil:
		a.l.discard(r.v.path, a.marker)
	case isConnErr(r.err), a.marker != "" && errors.Is(r.err, zk.ErrNodeExists):
		// Applied perhaps, or an earlier attempt of this prefix was.
		a.l.jan.add(cleanup{parent: a.parent, prefix: a.prefix, marker: a.marker})
	}
}

// findOwn returns the path of the znode with this acquisition's prefix,
// or "" if there is none, once the connection is back in its session.
func (a *acquisition) findOwn(ctx context.Context) (string, error) {
	l := a.l
	for {
		if err := l.ss.awaitConnected(ctx, a.s); err != nil {
			return "", err
		}
		_, err := call(ctx, l.g, a.s, func() (string, error) { return l.conn.Sync(a.parent) })
		if err == nil {
			var kids children
			kids, err = call(ctx, l.g, a.s, childrenOf(l.conn, a.parent))
			if err == nil {
				for _, k := range queueOf(kids.names) {
					if strings.HasPrefix(k, a.prefix) {
						return a.parent + "/" + k, nil
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
func (a *acquisition) ensure(ctx context.Context, path string) error {
	l := a.l
	for attempt := 0; attempt < 8; attempt++ {
		var err error
		if len(path) > len(l.o.root) {
			_, err = call(ctx, l.g, a.s, func() (string, error) {
				return l.conn.CreateContainer(path, nil, zk.FlagContainer, l.o.acl)
			})
		} else {
			_, err = call(ctx, l.g, a.s, func() (string, error) {
				return l.conn.Create(path, nil, zk.FlagPersistent, l.o.acl)
			})
		}
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if err := a.ensure(ctx, path[:strings.LastIndexByte(path, '/')]); err != nil {
				return err
			}
		case isConnErr(err):
			if err := l.ss.awaitConnected(ctx, a.s); err != nil {
				return err
			}
		default:
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return fmt.Errorf("create %s: keeps failing", path)
}

// queueUp waits until the acquisition's znode is the lowest of its
// parent's lock znodes. On error the caller deletes the znode.
func (a *acquisition) queueUp(ctx context.Context) (*Lease, error) {
	for {
		le, err := a.step(ctx)
		if le != nil || err != nil {
			return le, err
		}
	}
}

// step lists the queue once and, unless the request is admitted, waits
// for one of the records it watches (package queue names them) to go. It
// returns a lease, an error, or neither: look again.
func (a *acquisition) step(ctx context.Context) (*Lease, error) {
	if a.alone {
		// The only child at its create: admitted then, so no listing can
		// have shown it waiting (no touch is due), and no earlier record
		// can have come since. With a lock-delay, the grant needs the
		// listing, which shows the markers of holders gone.
		a.alone = false
		if a.l.o.LockDelay == 0 {
			a.checked = true
			return a.grant()
		}
	}
	// A permit waiter woken by its predecessor's touch is admitted now
	// unless it is the first waiter, and under load it mostly is: it
	// touches together with the listing, so that the waiter behind it
	// wakes one write sooner, instead of after the listing. When the
	// guess is wrong, that waiter wakes for nothing and watches again,
	// and this one touches once more when it is admitted.
	var spec *future[*zk.Stat]
	if a.speculate {
		a.speculate = false
		spec = start(a.l.g, setData(a.l.conn, a.path, []byte(a.l.o.Identity), a.version), nil)
	}
	q, all, cversion, err := a.list(ctx)
	touched := false
	if spec != nil {
		st, serr := spec.wait(ctx, a.l.g, a.s)
		switch {
		case serr == nil:
			a.version, touched = st.Version, true
		case isStop(serr):
			return nil, serr
		default:
			a.touchUnsure = true
		}
	}
	if err != nil {
		return nil, a.retry(ctx, err)
	}
	i := slices.Index(q, a.own)
	if i < 0 {
		return nil, a.deleted()
	}
	for _, k := range q {
		if k != a.own && strings.HasPrefix(k, a.prefix) {
			// A duplicate from a retried create: not ours to keep.
			a.l.jan.add(cleanup{path: a.parent + "/" + k})
		}
	}
	reqs := all[:i+1]
	if !a.checked {
		// The oldest request decides what the name is.
		if why := queue.Incompatible(reqs[0], a.req); why != "" {
			return nil, fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
		}
		a.checked = true
	}
	if queue.Admitted(reqs, i) {
		if !touched && (a.touchUnsure || queue.Touches(all, i) && !a.neverWaited(q, cversion)) {
			if err := a.touch(ctx); err != nil {
				return nil, err
			}
		}
		if err := a.delay(ctx); err != nil {
			return nil, err
		}
		return a.grant()
	}
	if a.try {
		return nil, lock.ErrLocked
	}
	watched := queue.Watched(reqs, i)
	touchWakes := queue.WaitsForTouch(reqs, i)
	if !touchWakes && a.byMark(reqs, i, watched) {
		return a.waitFor(ctx, q[watched[0]], watched[0] == 0)
	}
	futures := make([]*future[exists], len(watched))
	// A Locker from Dial watches without go-zookeeper's bookkeeping (see
	// leaseTable.waitDeletion and waitChange); mine[n] is then the
	// channel the event comes on.
	mine := make([]<-chan zk.Event, len(watched))
	for n, j := range watched {
		// Only a touch waiter wakes on a data change; the others (the
		// first waiter of a semaphore among them, whose holders touch
		// as they are admitted) would only wake for nothing.
		path := a.parent + "/" + q[j]
		var w func() (exists, error)
		switch {
		case touchWakes && !a.l.tab.poll:
			// The touch is a data change: an exists watch, set as the
			// deletion watches below are.
			ch, stop := a.l.tab.waitChange(path)
			defer stop()
			mine[n] = ch
			w = statOf(a.l.conn, path)
		case touchWakes:
			w = existsW(a.l.conn, path)
		case !a.l.tab.poll:
			ch, stop := a.l.tab.waitDeletion(path)
			defer stop()
			mine[n] = ch
			w = deletionWatchDial(a.l.conn, path)
		default:
			w = deletionW(a.l.conn, path)
		}
		futures[n] = start(a.l.g, w, nil)
	}
	var chans []<-chan zk.Event
	for n, f := range futures {
		e, err := f.wait(ctx, a.l.g, a.s)
		if err != nil {
			for _, f := range futures[n+1:] {
				f.abandon()
			}
			return nil, a.retry(ctx, err)
		}
		if !e.ok {
			// Gone already: look again (the watches set meanwhile fire
			// later, unread, and cost nothing).
			continue
		}
		if touchWakes {
			// The predecessor may have been admitted and touched its
			// znode between the listing and this watch, which then
			// missed it. Lock znodes keep data version 0 unless
			// touched: look again for a version not yet looked at.
			if seen := fmt.Sprintf("%s@%d", q[watched[0]], e.stat.Version); e.stat.Version != 0 && seen != a.seenTouch {
				a.seenTouch = seen
				return nil, nil
			}
		}
		if mine[n] != nil {
			e.watch = mine[n]
		}
		chans = append(chans, e.watch)
	}
	if len(chans) < len(watched) {
		return nil, nil
	}
	fired, err := a.await(ctx, chans)
	if err != nil {
		return nil, err
	}
	if fired == zk.EventNodeDataChanged && touchWakes {
		a.speculate = true
	}
	if fired == zk.EventNodeDeleted && len(watched) == 1 && a.req.Kind != queue.Permit &&
		a.l.o.LockDelay == 0 && queue.AdmittedWithout(reqs, i, watched[0]) {
		// The one record ahead that kept this request waiting went, and
		// none can have joined ahead of it: admitted if its own znode is
		// still there, which a read of the znode alone confirms (a lock's
		// or reader's waiter touches nothing).
		return a.confirm(ctx)
	}
	if fired != zk.EventNodeDeleted || !queue.AdmittedByDeletion(reqs, i) || a.l.o.LockDelay > 0 {
		// Look again. With a lock-delay the grant needs a listing made
		// after the holder went, which shows whether it left a marker
		// (see delay).
		return nil, nil
	}
	// A holder went: admitted. The touch confirms the znode as the
	// listing would, and wakes the waiter behind it sooner; with nobody
	// behind it, it wakes nobody.
	if err := a.touch(ctx); err != nil {
		return nil, err
	}
	return a.grant()
}

// byMark reports whether the request at i of the queue reqs, not
// admitted, is admitted by the release of the one record it watches,
// watched[0], and may wait for that release's mark (see waitFor): the
// Locker is from Dial, has no lock-delay, and the record is an exclusive
// request (so it held the lock alone, at the head of the queue), whose
// release as a holder leaves nothing ahead that keeps this request
// waiting.
func (a *acquisition) byMark(reqs []queue.Request, i int, watched []int) bool {
	if a.noMark || a.l.tab.ka == nil || a.l.o.LockDelay > 0 || len(watched) != 1 {
		return false
	}
	j := watched[0]
	if reqs[j].Kind != queue.Exclusive || a.req.Kind == queue.Permit {
		return false
	}
	rest := reqs[j+1 : i+1]
	return queue.Admitted(rest, len(rest)-1)
}

// waitFor waits for the release of the exclusive record pred, which admits
// this request (byMark), and grants it without another request.
//
// A lease of an exclusive request from Dial is released with one
// transaction that sets its znode's data and deletes it (deleteOwn): the
// mark. Every other end of a lock znode (a cancelled or failed wait, an
// expired session, a revocation, Close, a delete by hand) is a plain
// deletion. The waiter watches pred for a change of its data as well as
// its deletion, with an exists (one watch, one event: the data change
// spends it before the deletion in the same transaction), so the event
// itself says whether pred left as a holder: a data change admits this
// request, a deletion makes it look again.
//
// When pred headed the listing (head), it was the holder, and its going
// admits this request however it went: nothing can join the queue ahead
// of it. A head already gone when the exists is answered, or deleted
// without a mark, then grants this request as a mark does, with no
// listing. (Under load the holder mostly releases between the waiter's
// listing and its exists: one request fewer for those hand-overs.)
//
// Someone else may delete the waiter's znode or set the data of pred by
// hand; a lease granted here and still held ownWatchDelay after its grant
// is therefore checked by a listing (Lease.checkMark), which ends it with
// lock.ErrLost if the grant should not have been made.
func (a *acquisition) waitFor(ctx context.Context, pred string, head bool) (*Lease, error) {
	l := a.l
	predPath := a.parent + "/" + pred
	ch, stop := l.tab.waitChange(predPath)
	defer stop()
	// The exists goes with the watch flag because the wait is registered
	// (keepalive.wantsChange).
	p, err := call(ctx, l.g, a.s, statOf(l.conn, predPath))
	if err != nil {
		return nil, a.retry(ctx, err)
	}
	switch {
	case !p.ok && head:
		return a.grantUnlisted()
	case !p.ok:
		return nil, nil // gone already: look again
	case p.stat.Version != 0:
		// Someone set its data, which no lock of this package does but
		// its release: a mark could not be told from that.
		a.noMark = true
		return nil, nil
	}
	fired, err := a.await(ctx, []<-chan zk.Event{ch})
	if err != nil {
		return nil, err
	}
	switch {
	case fired == zk.EventNodeDataChanged, fired == zk.EventNodeDeleted && head:
		return a.grantUnlisted()
	default:
		// Deleted otherwise, or the connection changed: look again.
		return nil, nil
	}
}

// grantUnlisted grants the acquisition on its predecessor's going, seen
// without a listing (see waitFor); the lease is checked once if it is
// still held ownWatchDelay after the grant.
func (a *acquisition) grantUnlisted() (*Lease, error) {
	if a.l.tab.deletedBeforeGrant(a.path) {
		return nil, a.deleted()
	}
	a.marked = true
	return a.grant()
}

// confirm grants the acquisition if its znode is still the one it
// created: a waiter's znode can go only with its session, whose end ends
// the wait anyway, or by someone else's hand. The read is served by the
// server that reported the deletion that admitted it, so it sees that
// deletion's state or a later one. A failed read that can be sent again
// leaves the decision to the next listing.
func (a *acquisition) confirm(ctx context.Context) (*Lease, error) {
	e, err := call(ctx, a.l.g, a.s, statOf(a.l.conn, a.path))
	switch {
	case err != nil:
		return nil, a.retry(ctx, err)
	case !e.ok || e.stat.Czxid != a.czxid:
		return nil, a.deleted()
	}
	return a.grant()
}

// neverWaited reports whether the listing q of the parent, whose child
// version is cversion, proves that no lock znode was deleted since this
// acquisition's was created: then its admission now means it was
// admitted all along, so no listing can have shown it waiting and nobody
// watches it for a touch (queue.Touches). ZooKeeper numbers a sequential
// znode with the parent's cversion before its create, and every create
// and delete of a child raises it by one; the changes since ours are the
// creates of the lock znodes listed after it alone only if none was
// deleted.
func (a *acquisition) neverWaited(q []string, cversion int32) bool {
	seq, err := strconv.ParseInt(seqOf(a.own), 10, 64)
	if err != nil {
		return false
	}
	later := 0
	for _, k := range q {
		if seqOf(k) > seqOf(a.own) {
			later++
		}
	}
	return int64(cversion)-seq-1 == int64(later)
}

// touch sets the acquisition's znode's data to what it is (its czxid, the
// token, stays), which fires the watch of the permit waiter behind it (see
// queue.Touches), and takes the znode's new data version for the lease
// (its CheckOp, its Release). Guarded by the version it read, a touch
// whose reply was lost and that is sent again finds the version raised:
// the znode is then read to confirm it is still ours.
func (a *acquisition) touch(ctx context.Context) error {
	l := a.l
	for {
		st, err := call(ctx, l.g, a.s, setData(l.conn, a.path, []byte(l.o.Identity), a.version))
		if errors.Is(err, zk.ErrBadVersion) {
			var e exists
			e, err = call(ctx, l.g, a.s, func() (exists, error) {
				ok, st, err := l.conn.Exists(a.path)
				return exists{ok: ok, stat: st}, err
			})
			switch {
			case err == nil && (!e.ok || e.stat.Czxid != a.czxid):
				return a.deleted()
			case err == nil:
				st = e.stat
			}
		}
		switch {
		case err == nil:
			a.version, a.touchUnsure = st.Version, false
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return a.deleted()
		}
		if err := a.retry(ctx, err); err != nil {
			return err
		}
	}
}

// list returns the lock znodes of the parent, in grant order, and the
// parent's child version at that listing. When the create's answer did
// not carry the token (its reply was lost and the znode found by its
// prefix, or the Locker may not stamp the parent: see createZnode), the
// first listing also reads the acquisition's own znode's stat, in the
// same round trip: go-zookeeper pipelines requests issued concurrently on
// one connection.
//
// A waiting acquisition sets no watch on its own znode: a waiter learns
// that its znode went (its session's end aside, which the session reports)
// from its next listing, at the latest when what it watches changes. The
// held lease's watch starts ownWatchDelay after the grant (see
// leaseTable.armLater), so a short critical section costs no watch event
// for its own release.
func (a *acquisition) list(ctx context.Context) ([]string, []queue.Request, int32, error) {
	l := a.l
	if a.czxid != 0 {
		kids, err := call(ctx, l.g, a.s, childrenOf(l.conn, a.parent))
		if err != nil {
			return nil, nil, 0, err
		}
		a.kids, a.listed = kids.names, time.Now()
		q, reqs := lockQueue(kids.names)
		return q, reqs, kids.stat.Cversion, nil
	}
	l.tab.track(a.path)
	fc := start(l.g, childrenOf(l.conn, a.parent), nil)
	fe := start(l.g, statOf(l.conn, a.path), nil)
	kids, errC := fc.wait(ctx, l.g, a.s)
	if errC != nil {
		fe.abandon()
	}
	st, errE := fe.wait(ctx, l.g, a.s)
	if err := errors.Join(errC, errE); err != nil {
		return nil, nil, 0, err
	}
	if !st.ok {
		return nil, nil, 0, a.deleted()
	}
	if st.stat.EphemeralOwner != a.s.id {
		return nil, nil, 0, fmt.Errorf("%w: the queued znode %s belongs to session 0x%x, not 0x%x", lock.ErrLost, a.path, st.stat.EphemeralOwner, a.s.id)
	}
	a.kids, a.listed = kids.names, time.Now()
	a.czxid, a.version = st.stat.Czxid, st.stat.Version
	q, reqs := lockQueue(kids.names)
	return q, reqs, kids.stat.Cversion, nil
}

// await waits for one of watched, the watches on the records this
// acquisition waits for, to fire, and returns the type of its event (0 if
// something else ended the wait).
func (a *acquisition) await(ctx context.Context, watched []<-chan zk.Event) (fired zk.EventType, err error) {
	if len(watched) == 1 {
		// A lock's or read-write lock's waiter, and most permit waiters:
		// no reflection.
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-a.s.done:
			return 0, a.s.err
		case <-a.l.g.closing:
			return 0, lock.ErrClosed
		case ev := <-watched[0]:
			return ev.Type, nil
		}
	}
	const doneCase, sessionCase, closingCase = 0, 1, 2
	cases := []reflect.SelectCase{
		doneCase:    {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		sessionCase: {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.s.done)},
		closingCase: {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.l.g.closing)},
	}
	for _, w := range watched {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	chosen, v, _ := reflect.Select(cases)
	switch chosen {
	case doneCase:
		return 0, context.Cause(ctx)
	case sessionCase:
		return 0, a.s.err
	case closingCase:
		return 0, lock.ErrClosed
	}
	ev, _ := v.Interface().(zk.Event)
	return ev.Type, nil
}

func (a *acquisition) deleted() error {
	return fmt.Errorf("%w: the queued znode %s was deleted", lock.ErrLost, a.path)
}

// retry decides what a failed request of the wait means: nil when the
// request may be sent again (retryable) and the connection is back in the
// same session; otherwise the error that ends the wait.
func (a *acquisition) retry(ctx context.Context, err error) error {
	if isStop(err) {
		return err
	}
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: the lock's parent was deleted while waiting: %w", lock.ErrLost, err)
	}
	if !retryable(err) {
		return err
	}
	return a.l.ss.awaitConnected(ctx, a.s)
}

// grant makes the acquisition's znode a held lease.
func (a *acquisition) grant() (*Lease, error) {
	// The lease keeps no name of its own: Name reads it from the path.
	le := &Lease{
		l:       a.l,
		s:       a.s,
		path:    a.path,
		czxid:   a.czxid,
		version: a.version,
		byMark:  a.marked,
	}
	if err := a.l.tab.hold(le); err != nil {
		return nil, err
	}
	a.l.tab.armLater(le)
	return le, nil
}
