package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// In the default layout a lock znode is named "~<32 hex digits>~" (the
// protection prefix), a kind's tag and '~' (queue.Request.Tag), then the
// sequence number; other recipes' records end in one of recipeKinds'
// names and the sequence number (docs/design/zookeeper.md, "Layouts").
const (
	marker    = '~'
	randLen   = 1 + 32 + 1
	seqLen    = 10
	minChild  = randLen + seqLen
	maxTagLen = 11 // "s" and a limit of up to 10 digits
)

// recipeKinds are the names before the sequence number of the other
// recipes' records, with their kind and the layout that writes them:
// Curator's locks (and go-zookeeper's), latches and read-write locks, and
// Kazoo's locks.
var recipeKinds = []struct {
	name   string
	req    queue.Request
	layout Layout
}{
	{"-lock-", queue.ExclusiveRequest, LayoutCurator}, {"-latch-", queue.ExclusiveRequest, LayoutCuratorLatch},
	{"__WRIT__", queue.ExclusiveRequest, LayoutCuratorReadWrite}, {"__READ__", queue.SharedRequest, LayoutCuratorReadWrite},
	{"__lock__", queue.ExclusiveRequest, ""}, {"__rlock__", queue.SharedRequest, ""},
}

// recipeName returns the name that layout y writes after the UUID of the
// record of req, and whether y has a record for req.
func recipeName(y Layout, req queue.Request) (string, bool) {
	for _, k := range recipeKinds {
		if k.layout == y && k.req == req {
			return strings.TrimPrefix(k.name, "-"), true
		}
	}
	return "", y == LayoutFencelock
}

// newPrefix returns a fresh protection prefix for a request in layout y
// (which has a record for it): in a Curator layout, "_c_", a random UUID,
// '-' and the recipe's name.
func newPrefix(y Layout, req queue.Request) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	if y != LayoutFencelock {
		b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80 // a version 4 UUID
		name, _ := recipeName(y, req)
		return fmt.Sprintf("_c_%x-%x-%x-%x-%x-%s", b[:4], b[4:6], b[6:8], b[8:10], b[10:], name)
	}
	p := string(marker) + hex.EncodeToString(b) + string(marker)
	if tag := req.Tag(); tag != "" {
		p += tag + string(marker)
	}
	return p
}

// parseChild reports whether a child name is a lock znode and, if so, the
// request it stands for.
func parseChild(s string) (queue.Request, bool) {
	if len(s) <= seqLen || strings.Trim(seqOf(s), "0123456789") != "" {
		return queue.Request{}, false
	}
	if s[0] != marker {
		for _, k := range recipeKinds {
			if strings.HasSuffix(prefixOf(s), k.name) {
				return k.req, true
			}
		}
		return queue.Request{}, false
	}
	if len(s) < minChild || len(s) > minChild+maxTagLen+1 || s[randLen-1] != marker || strings.Trim(s[1:randLen-1], "0123456789abcdef") != "" {
		return queue.Request{}, false
	}
	// An empty tag, or a non-empty one followed by the marker.
	raw := s[randLen : len(s)-seqLen]
	tag, ok := strings.CutSuffix(raw, string(marker))
	if raw != "" && (!ok || tag == "") {
		return queue.Request{}, false
	}
	return queue.ParseTag(tag)
}

// marksRelease reports whether path is the znode of an exclusive request
// in the default layout, whose release is marked (acquisition.waitFor;
// docs/design/zookeeper.md, "Layouts").
func marksRelease(path string) bool {
	child := path[strings.LastIndexByte(path, '/')+1:]
	r, ok := parseChild(child)
	return ok && child[0] == marker && r.Kind == queue.Exclusive
}

// seqOf returns a lock znode's sequence number.
func seqOf(child string) string { return child[len(child)-seqLen:] }

func seqNum(child string) int64 {
	n, _ := strconv.ParseInt(seqOf(child), 10, 64)
	return n
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

var _ lock.QueueLister = (*Locker)(nil)

// Queue implements [lock.QueueLister], read as [Locker.Holders] reads.
// Each entry's Since is its znode's ctime, on the leader's clock, to the
// millisecond.
func (l *Locker) Queue(ctx context.Context, name string) ([]lock.QueueEntry, error) {
	zs, err := l.read(ctx, "queue", name, func([]queue.Request, int) bool { return true })
	if err != nil {
		return nil, err
	}
	es := make([]lock.QueueEntry, len(zs))
	for i, z := range zs {
		es[i] = lock.QueueEntry{Holder: z.holder(), Held: z.held, Position: i, Since: time.UnixMilli(z.stat.Ctime)}
	}
	return es, nil
}

// read is the read of a public call op: the znodes of name that queue
// reads with pick.
func (l *Locker) read(ctx context.Context, op, name string, pick func([]queue.Request, int) bool) ([]readZnode, error) {
	if err := l.enterName(ctx, op, name); err != nil {
		return nil, err
	}
	defer l.leave()
	var zs []readZnode
	err := l.reread(ctx, func() (err error) {
		zs, err = l.queue(ctx, l.parent(name), pick)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("zklock: %s %q: %w", op, name, secure.Refusal(err, isRefusal))
	}
	return zs, nil
}

// syncWith makes the connection's server catch up with the leader.
func (l *Locker) syncWith(ctx context.Context, parent string) error {
	_, err := call(ctx, l.g, nil, func() (string, error) { return l.conn.Sync(parent) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// readZnode is a lock znode as queue read it.
type readZnode struct {
	child string
	held  bool
	got
}

func (z readZnode) holder() lock.Holder { return holderOf(z.child, z.data, z.stat) }

// queue syncs, lists the lock znodes under parent and reads those of the
// prefix of the queue that pick selects, in one pipelined round trip. It
// returns errGone if one of them went meanwhile.
func (l *Locker) queue(ctx context.Context, parent string, pick func(reqs []queue.Request, i int) bool) ([]readZnode, error) {
	if err := l.syncWith(ctx, parent); err != nil {
		return nil, err
	}
	kids, err := call(ctx, l.g, nil, childrenOf(l.conn, parent))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	q, reqs := lockQueue(kids.names)
	futures := make([]*future[got], 0, len(q))
	for i, k := range q {
		if !pick(reqs, i) {
			break
		}
		futures = append(futures, start(l.g, getOf(l.conn, parent+"/"+k), nil))
	}
	zs := make([]readZnode, len(futures))
	var errs []error
	for i, f := range futures {
		r, err := f.wait(ctx, l.g, nil)
		if errors.Is(err, zk.ErrNoNode) {
			err = errGone
		}
		errs = append(errs, err)
		zs[i] = readZnode{q[i], queue.Admitted(reqs, i), r}
	}
	return zs, errors.Join(errs...)
}
