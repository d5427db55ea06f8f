package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Acquire blocks until it holds the lock called name, ctx ends, the Locker
// is closed, or the session is lost. It returns a *Lease. See
// [lock.Locker.Acquire].
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "acquire", name, queue.ExclusiveRequest, false)
}

// TryAcquire is Acquire without waiting: it returns an error wrapping
// [lock.ErrLocked] at once if another lease holds name, after deleting the
// znode it queued.
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, "try acquire", name, queue.ExclusiveRequest, true)
}

// AcquireAll implements [lock.MultiLocker] for [lock.AcquireAll]: the
// znodes of names are created in one multi (docs/design/zookeeper.md,
// "Multi-name locks"), and the *Leases come in the order of names. Errors
// are those of Acquire, or wrap [lock.ErrInvalidConfig] for no names or a
// name given twice.
func (l *Locker) AcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return l.acquireAll(ctx, "acquire all", names, queue.ExclusiveRequest, false)
}

// TryAcquireAll is AcquireAll without waiting: if any of names is held, it
// deletes its znodes and returns an error wrapping [lock.ErrLocked].
func (l *Locker) TryAcquireAll(ctx context.Context, names []string) ([]lock.Lease, error) {
	return l.acquireAll(ctx, "try acquire all", names, queue.ExclusiveRequest, true)
}

// acquisition is one request's state: the session it works in, its
// znode, and what it has learnt of the queue. Its loop (queueUp) is
// decide, wait, grant.
type acquisition struct {
	l       *Locker
	name    string
	parent  string // the znode whose children are the lock's znodes
	req     queue.Request
	try     bool     // TryAcquire*: do not wait
	s       *session // the session the znode belongs to
	z       znode
	last    listing
	touches touches
	fast    shortcuts
}

// znode is what an acquisition knows of its own znode.
type znode struct {
	prefix  string // the protection prefix, fresh for each create
	marker  string // its lock-delay marker (see delay), or ""
	path    string // the znode, once created
	own     string // its child name
	czxid   int64  // once read (the token); 0: read it with the next listing
	version int32
}

// listing is what the acquisition keeps of the latest listing.
type listing struct {
	checked bool      // the queue's oldest request was found compatible
	kids    []string  // the parent's children, for delay
	at      time.Time // when they were answered
}

// touches is what a permit's waiter keeps of the touches (see
// queue.Touches) that wake it and that it makes.
type touches struct {
	seen      string // predecessor@version that made a listing be read again (touchMissed)
	speculate bool   // the next listing goes with a touch (look)
	unsure    bool   // the znode's data version is unknown: touch before the grant
}

// shortcuts is what the hand-over's shortcuts to a grant without a
// listing have learnt.
type shortcuts struct {
	alone  bool // the create showed the znode the parent's only child (decide)
	noMark bool // a record ahead had data set by someone else: no waitFor
	marked bool // admitted with no listing after its predecessor went (waitFor)
}

// acquire implements every Acquire method: req says which kind of grant,
// try whether to wait, op how errors name the call.
func (l *Locker) acquire(ctx context.Context, op, name string, req queue.Request, try bool) (lock.Lease, error) {
	les, err := l.acquireAll(ctx, op, []string{name}, req, try)
	if err != nil {
		return nil, err
	}
	return les[0], nil
}

// acquireAll implements acquire and AcquireAll, one acquisition per name.
func (l *Locker) acquireAll(ctx context.Context, op string, names []string, req queue.Request, try bool) ([]lock.Lease, error) {
	if err := l.enterName(ctx, op, names...); err != nil {
		return nil, err
	}
	defer l.leave()
	on := quoted(names)
	if req.Kind == queue.Permit {
		if err := queue.CheckLimit(req.Limit); err != nil {
			return nil, fmt.Errorf("zklock: %s %s: %w: %w", op, on, lock.ErrInvalidConfig, err)
		}
	}
	if _, ok := recipeName(l.o.layout, req); !ok {
		return nil, fmt.Errorf("zklock: %s %s: %w: layout %s has no %s requests", op, on, lock.ErrIncompatible, l.o.layout, req.Kind)
	}
	as, tels := make([]*acquisition, len(names)), make([]telemetry.Acquire, len(names))
	for i, name := range names {
		as[i] = &acquisition{l: l, name: name, parent: l.parent(name), req: req, try: try}
		_, tels[i] = l.tel.StartAcquire(ctx, name, req.Kind.String(), !try)
	}
	les, err := run(ctx, as)
	out := make([]lock.Lease, len(les))
	for i, tel := range tels {
		var le *Lease
		if err == nil {
			le, out[i] = les[i], les[i]
		}
		if hold := tel.End(config.Outcome(ctx, err), uint64(le.Token()), err); le != nil && hold.Counts() {
			le.st.OnEnd(func(err error) { l.countEnd(le, hold, err) })
		}
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: %s %s: %w", op, on, secure.Refusal(err, isRefusal))
	}
	return out, nil
}

// countEnd records the end of le, which ended with err. A deletion may be
// an expiry not reported yet: its reason is counted once a request shows
// whether the session lives.
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
		case err != nil: // give the Locker the time to decide about the session
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

// run creates the znodes of as in one request and queues each up in
// turn; on error it releases or deletes all of them.
func run(ctx context.Context, as []*acquisition) ([]*Lease, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	l := as[0].l
	for attempt := 0; ; attempt++ {
		s, err := l.ss.get(ctx)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			a.s, a.z.prefix = s, newPrefix(l.o.layout, a.req)
		}
		err = create(ctx, as)
		if err == nil {
			break
		}
		// No znode yet, so no place lost: try the next session.
		if ended(s) && errors.Is(err, lock.ErrLost) && attempt < 3 {
			continue
		}
		return nil, err
	}
	for _, a := range as {
		a.z.own = a.z.path[len(a.parent)+1:]
		l.watch.track(a.z.path)
	}
	les := make([]*Lease, 0, len(as))
	for _, a := range as {
		le, err := a.queueUp(ctx)
		if err == nil {
			les = append(les, le)
			continue
		}
		rctx, cancel := context.WithTimeout(l.g.bg, l.cleanupWait())
		defer cancel()
		for _, le := range les {
			_ = le.Release(rctx)
		}
		for _, a := range as[len(les):] {
			l.watch.untrack(a.z.path)
			l.discard(a.z.path, a.z.marker)
		}
		return nil, err
	}
	return les, nil
}

// queueUp decides, waits, and again until admitted, then grants. On
// error the caller deletes the znode.
func (a *acquisition) queueUp(ctx context.Context) (*Lease, error) {
	for {
		d, err := a.decide(ctx)
		if err == nil && !d.granted && len(d.watched) > 0 {
			if a.try {
				return nil, lock.ErrLocked
			}
			d, err = a.wait(ctx, d)
		}
		if err != nil {
			return nil, err
		}
		if d.granted {
			return a.grant(ctx, d.touch)
		}
	}
}

// decision is what one look at the queue says: granted (and whether a
// touch must come first, see queue.Touches), the records to wait for, or
// neither: look again.
type decision struct {
	granted    bool
	touch      bool
	q          []string        // the lock znodes of the listing, in grant order
	reqs       []queue.Request // their requests, up to this acquisition's
	watched    []int           // indexes in q of the records to wait for (queue.Watched)
	touchWakes bool            // the touch of the first wakes the waiter too (queue.WaitsForTouch)
}

// decide lists the queue (but for a znode created alone) and says, by the
// rules of package queue, whether the request is admitted or which
// records it waits for.
func (a *acquisition) decide(ctx context.Context) (decision, error) {
	if a.fast.alone {
		// Admitted at its create, so no touch is due; a lock-delay still
		// needs the listing, for the markers.
		a.fast.alone = false
		if a.l.o.LockDelay == 0 {
			a.last.checked = true
			return decision{granted: true}, nil
		}
	}
	q, all, touched, err := a.look(ctx)
	if err != nil || q == nil {
		return decision{}, err
	}
	i := slices.Index(q, a.z.own)
	if i < 0 {
		return decision{}, a.deleted()
	}
	for _, k := range q {
		if k != a.z.own && strings.HasPrefix(k, a.z.prefix) {
			// A duplicate from a retried create: not ours to keep.
			a.l.jan.add(cleanup{path: a.parent + "/" + k})
		}
	}
	reqs := all[:i+1]
	if !a.last.checked {
		// The oldest request decides what the name is.
		if why := queue.Incompatible(reqs[0], a.req); why != "" {
			return decision{}, fmt.Errorf("%w: %s", lock.ErrIncompatible, why)
		}
		a.last.checked = true
	}
	if queue.Admitted(reqs, i) {
		touch := !touched && (a.touches.unsure || queue.Touches(all, i))
		return decision{granted: true, touch: touch}, nil
	}
	return decision{q: q, reqs: reqs, watched: queue.Watched(reqs, i), touchWakes: queue.WaitsForTouch(reqs, i)}, nil
}

// look lists the queue, with a touch on a guess for a permit waiter
// woken by a touch (docs/design/queue.md, "Herd-free waits"), and says
// whether it touched. A nil q without an error says: look again.
func (a *acquisition) look(ctx context.Context) (q []string, all []queue.Request, touched bool, err error) {
	var spec *future[*zk.Stat]
	if a.touches.speculate {
		a.touches.speculate = false
		spec = start(a.l.g, setData(a.l.conn, a.z.path, []byte(a.l.o.Identity), a.z.version), nil)
	}
	q, all, err = a.list(ctx)
	if spec != nil {
		st, serr := spec.wait(ctx, a.l.g, a.s)
		switch {
		case serr == nil:
			a.z.version, touched = st.Version, true
		case isStop(serr):
			return nil, nil, false, serr
		default:
			a.touches.unsure = true
		}
	}
	if err != nil {
		return nil, nil, false, a.retry(ctx, err)
	}
	return q, all, touched, nil
}

// grant makes the admitted acquisition's znode a held lease, after its
// touch when one is due (queue.Touches) and its lock-delay (see delay).
func (a *acquisition) grant(ctx context.Context, touch bool) (*Lease, error) {
	if touch {
		if err := a.touch(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.delay(ctx); err != nil {
		return nil, err
	}
	le := &Lease{
		l:       a.l,
		s:       a.s,
		path:    a.z.path,
		czxid:   a.z.czxid,
		version: a.z.version,
		byMark:  a.fast.marked,
	}
	if err := a.l.watch.hold(le); err != nil {
		return nil, err
	}
	a.l.watch.armLater(le)
	return le, nil
}

// create creates the znodes of as in one request (a multi: one zxid) and
// sets their paths and, when the reply carries it, the token. Lost
// replies and cancelled creates: docs/design/zookeeper.md, "Acquisition".
func create(ctx context.Context, as []*acquisition) error {
	// The request and its clean-up may outlive this attempt: copies.
	l, cs := as[0].l, make([]cleanup, len(as))
	for i, a := range as {
		a.z.marker = ""
		if l.o.LockDelay > 0 {
			a.z.marker = markerOf(a.parent, a.z.prefix)
		}
		cs[i] = cleanup{parent: a.parent, prefix: a.z.prefix, marker: a.z.marker}
	}
	abandoned := func(got []created, err error) {
		for i, c := range cs {
			switch {
			case err == nil:
				l.jan.add(cleanup{path: got[i].path, marker: c.marker})
			case isConnErr(err):
				l.jan.add(c)
			}
		}
	}
	for range 8 {
		stamp := !l.stampDenied.Load()
		f := start(l.g, func() ([]created, error) { return l.createZnodes(cs, stamp) }, abandoned)
		r, stop := f.await(ctx, l.g, as[0].s)
		if stop != nil {
			if ctx.Err() != nil {
				l.settle(f, cs, as[0].s)
			} else {
				f.abandon()
			}
			return &stopError{stop}
		}
		if done, err := answeredAll(ctx, as, r, stamp); done {
			return err
		}
	}
	return fmt.Errorf("creating the lock znode under %s keeps failing", as[0].parent)
}

// answeredAll is answered for each of as: done on an error, after which
// it deletes the znodes found, or once all are found; else create again
// (decide gives up a duplicate).
func answeredAll(ctx context.Context, as []*acquisition, r result[[]created], stamp bool) (bool, error) {
	all, first := true, error(nil)
	for i, a := range as {
		ri := result[created]{err: r.err}
		if r.err == nil {
			ri.v = r.v[i]
		}
		var done bool
		var err error
		a.z.path, done, err = a.answered(ctx, ri, stamp)
		all, first = all && done, cmp.Or(first, err)
	}
	for _, a := range as {
		if first != nil && a.z.path != "" {
			a.l.discard(a.z.path, a.z.marker)
		}
	}
	return all || first != nil, first
}

// answered takes the answer r to a create (with the stamp of the parent,
// or not) and returns the znode's path, or an error, and done; or not
// done: create again.
func (a *acquisition) answered(ctx context.Context, r result[created], stamp bool) (string, bool, error) {
	l, c := a.l, r.v
	switch err := r.err; {
	case err == nil:
		// A znode of a later session is given up by the first listing.
		if c.czxid != 0 && l.conn.SessionID() == a.s.id {
			a.z.czxid, a.fast.alone = c.czxid, c.alone
		}
		return c.path, true, nil
	case stamp && errors.Is(err, errStampDenied):
		// From now on the token comes with the first listing.
		l.stampDenied.Store(true)
		l.o.Logger.Debug("zklock: no write permission on a lock's parent; the token is read after the create", "parent", a.parent)
	case errors.Is(err, zk.ErrNoNode): // no parent (or an empty container removed)
		if err := a.ensure(ctx, a.parent); err != nil {
			return "", true, err
		}
	case isConnErr(err), a.z.marker != "" && errors.Is(err, zk.ErrNodeExists):
		// The create may have been applied (our marker exists only if so).
		found, err := a.findOwn(ctx)
		if err != nil {
			l.jan.add(cleanup{parent: a.parent, prefix: a.z.prefix, marker: a.z.marker})
			return "", true, err
		}
		if found != "" {
			return found, true, nil
		}
	default:
		return "", true, fmt.Errorf("create under %s: %w", a.parent, err)
	}
	return "", false, nil
}

// created is the answer to a create: the path and, with a stamp of the
// parent, the czxid and whether it was the parent's only child.
type created struct {
	path  string
	czxid int64
	alone bool
}

// errStampDenied says that the multi of a create was refused for its stamp
// of the parent alone (zk.ErrNoAuth on the SetData).
var errStampDenied = errors.New("no write permission on the lock's parent")

// createZnodes creates the lock znode parent/prefix of each of cs and
// its lock-delay marker (unless ""), in one request. With stamp it also
// sets the data of each parent, so that the answer carries the token
// (docs/design/zookeeper.md, "Tokens"), or fails with errStampDenied.
func (l *Locker) createZnodes(cs []cleanup, stamp bool) ([]created, error) {
	id := []byte(l.o.Identity)
	if len(cs) == 1 && !stamp && cs[0].marker == "" {
		p, err := l.conn.Create(cs[0].parent+"/"+cs[0].prefix, id, zk.FlagEphemeralSequential, l.o.acl)
		return []created{{path: p}}, err
	}
	var ops []any
	for _, c := range cs {
		ops = append(ops, &zk.CreateRequest{Path: c.parent + "/" + c.prefix, Data: id, Acl: l.o.acl, Flags: zk.FlagEphemeralSequential})
		if stamp {
			ops = append(ops, &zk.SetDataRequest{Path: c.parent, Data: nil, Version: -1})
		}
		if c.marker != "" {
			ops = append(ops, &zk.CreateRequest{Path: c.marker, Data: id, Acl: l.o.acl, Flags: zk.FlagPersistent})
		}
	}
	n := len(ops) / len(cs) // the operations of each znode: create, stamp, marker
	res, err := l.conn.Multi(ops...)
	for i := 1; stamp && i < len(res); i += n {
		if errors.Is(res[i].Error, zk.ErrNoAuth) {
			return nil, errStampDenied
		}
	}
	if err := multiErr(res, err); err != nil {
		return nil, err
	}
	cr := make([]created, len(cs))
	for i := range cr {
		cr[i].path = res[i*n].String
		if stamp && res[i*n+1].Stat != nil {
			cr[i].czxid, cr[i].alone = res[i*n+1].Stat.Mzxid, res[i*n+1].Stat.NumChildren == 1
		}
	}
	return cr, nil
}

// settle finishes a create of cs in flight when the caller's context
// ended: it waits for the answer (bounded as discard is) and deletes the
// znodes; the janitor takes over an answer that comes later.
func (l *Locker) settle(f *future[[]created], cs []cleanup, s *session) {
	ctx, cancel := context.WithTimeout(l.g.bg, l.cleanupWait())
	defer cancel()
	r, stop := f.await(ctx, l.g, s)
	if stop != nil {
		f.abandon()
		return
	}
	for i, c := range cs {
		switch {
		case r.err == nil:
			l.discard(r.v[i].path, c.marker)
		case isConnErr(r.err), c.marker != "" && errors.Is(r.err, zk.ErrNodeExists):
			l.jan.add(c)
		}
	}
}

// findOwn returns the path of the znode with this acquisition's prefix,
// or "" if there is none, once the connection is back in its session.
func (a *acquisition) findOwn(ctx context.Context) (string, error) {
	for {
		if err := a.l.ss.awaitConnected(ctx, a.s); err != nil {
			return "", err
		}
		found, err := withPrefix(ctx, a.l.g, a.s, a.l.conn, a.parent, a.z.prefix)
		switch {
		case err == nil && len(found) > 0:
			return found[0], nil
		case err == nil:
			return "", nil
		case !isConnErr(err):
			return "", err
		}
	}
}

// ensure creates path and its missing ancestors: persistent znodes down to
// the root, containers below it, which the server removes once empty.
func (a *acquisition) ensure(ctx context.Context, path string) error {
	l := a.l
	create, flags := l.conn.Create, int32(zk.FlagPersistent)
	if len(path) > len(l.o.root) {
		create, flags = l.conn.CreateContainer, zk.FlagContainer
	}
	for range 8 {
		_, err := call(ctx, l.g, a.s, func() (string, error) { return create(path, nil, flags, l.o.acl) })
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

// touch rewrites the acquisition's znode unchanged (queue.Touches) and
// takes its new data version. A resent touch finds the version raised,
// and reads the znode to confirm it is still ours.
func (a *acquisition) touch(ctx context.Context) error {
	l := a.l
	for {
		st, err := call(ctx, l.g, a.s, setData(l.conn, a.z.path, []byte(l.o.Identity), a.z.version))
		if errors.Is(err, zk.ErrBadVersion) {
			var e exists
			e, err = call(ctx, l.g, a.s, statOf(l.conn, a.z.path))
			switch {
			case err == nil && (!e.ok || e.stat.Czxid != a.z.czxid):
				return a.deleted()
			case err == nil:
				st = e.stat
			}
		}
		switch {
		case err == nil:
			a.z.version, a.touches.unsure = st.Version, false
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return a.deleted()
		}
		if err := a.retry(ctx, err); err != nil {
			return err
		}
	}
}

// list returns the parent's lock znodes in grant order and their
// requests; without the token yet, it reads the own znode's stat in the
// same round trip.
func (a *acquisition) list(ctx context.Context) ([]string, []queue.Request, error) {
	l := a.l
	if a.z.czxid != 0 {
		kids, err := call(ctx, l.g, a.s, childrenOf(l.conn, a.parent))
		if err != nil {
			return nil, nil, err
		}
		a.last.kids, a.last.at = kids.names, time.Now()
		q, reqs := lockQueue(kids.names)
		return q, reqs, nil
	}
	l.watch.track(a.z.path)
	fc := start(l.g, childrenOf(l.conn, a.parent), nil)
	fe := start(l.g, statOf(l.conn, a.z.path), nil)
	kids, errC := fc.wait(ctx, l.g, a.s)
	if errC != nil {
		fe.abandon()
	}
	st, errE := fe.wait(ctx, l.g, a.s)
	if err := errors.Join(errC, errE); err != nil {
		return nil, nil, err
	}
	if !st.ok {
		return nil, nil, a.deleted()
	}
	if st.stat.EphemeralOwner != a.s.id {
		return nil, nil, fmt.Errorf("%w: the queued znode %s belongs to session 0x%x, not 0x%x", lock.ErrLost, a.z.path, st.stat.EphemeralOwner, a.s.id)
	}
	a.last.kids, a.last.at = kids.names, time.Now()
	a.z.czxid, a.z.version = st.stat.Czxid, st.stat.Version
	q, reqs := lockQueue(kids.names)
	return q, reqs, nil
}

func (a *acquisition) deleted() error {
	return fmt.Errorf("%w: the queued znode %s was deleted", lock.ErrLost, a.z.path)
}

// retry returns nil when a failed request may be sent again (retryable)
// and the connection is back in the same session, else the error that
// ends the acquisition.
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
