package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/config"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// A session is one etcd lease, kept alive by its own loop (keepalive.go),
// to which every record the Locker creates while it lives is attached.
type session struct {
	l     *Locker
	id    clientv3.LeaseID
	keys  recordKeys
	guard guard
	watch *recordWatcher // the watches on the records of its leases

	done    chan struct{} // closed by end, after err (why) and lost are set
	endOnce sync.Once
	err     error
	lost    bool // ended by a loss rather than by Close

	mu       sync.Mutex
	deadline time.Time // local loss deadline
	leases   map[*Lease]struct{}
}

// recordKeys numbers a session's record keys, and keeps for the next
// acquisition of a name the number of the key a clean Release deleted
// (docs/design/etcd.md, "Record keys").
type recordKeys struct {
	mu    sync.Mutex
	seq   uint64                   // the last number given
	spare map[string]uint64        // by name prefix, a number to reuse
	busy  map[string]chan struct{} // reserved keys (reserve)
}

// maxSpare bounds recordKeys.spare, for a Locker that locks ever new names.
const maxSpare = 4096

// number returns the number of a new record key under pfx: one given up
// under pfx (see reuse), else one never given before.
func (k *recordKeys) number(pfx string) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, ok := k.spare[pfx]; ok {
		delete(k.spare, pfx)
		return n
	}
	k.seq++
	return k.seq
}

// reuse offers seq, the number of a key under pfx that nothing can write
// any more, to the next acquisition of its name.
func (k *recordKeys) reuse(pfx string, seq uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.spare[pfx]; !ok && len(k.spare) < maxSpare {
		k.spare[pfx] = seq
	}
}

// reserve reserves the record's key with LayoutConcurrency: it waits until
// no earlier record of the session may still be written at the key
// (docs/design/etcd.md, "Layouts"), or fails with lock.ErrLocked in a try.
func (a *acquisition) reserve(ctx context.Context) error {
	k := &a.s.keys
	for a.l.opts.layout == LayoutConcurrency {
		k.mu.Lock()
		held, busy := k.busy[a.key]
		if !busy {
			a.slot = make(chan struct{})
			k.busy[a.key] = a.slot
		}
		k.mu.Unlock()
		switch {
		case !busy:
			return nil
		case a.try:
			return lock.ErrLocked
		}
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		case <-a.s.done:
			return a.s.lostErr()
		}
	}
	return nil
}

// free ends r's reservation of its key, if it holds one: nothing of r
// can be written any more.
func (r *record) free() {
	k := &r.s.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if r.slot != nil && k.busy[r.key] == r.slot {
		delete(k.busy, r.key)
		close(r.slot)
	}
}

// session returns the live session, granting a new lease if there is none.
func (l *Locker) session(ctx context.Context) (*session, error) {
	if s, err := l.currentSession(); s != nil || err != nil {
		return s, err
	}
	select {
	case l.sessSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.g.closing.Done():
		return nil, lock.ErrClosed
	}
	defer func() { <-l.sessSem }()
	if s, err := l.currentSession(); s != nil || err != nil {
		return s, err
	}
	sent := l.clk.Now()
	gctx, release := l.tls.context(ctx)
	resp, err := l.client.Grant(gctx, int64(l.opts.ttl/time.Second))
	release()
	if err != nil {
		if rerr := l.tls.err(); rerr != nil {
			err = rerr
		}
		return nil, fmt.Errorf("grant session lease: %w", secure.Refusal(err, isRefusal))
	}
	s := newSession(l, resp.ID, sent)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		s.watch.cancel()
		rctx, cancel := context.WithTimeout(context.Background(), l.closeWait())
		_, _ = l.client.Revoke(rctx, resp.ID)
		cancel()
		return nil, lock.ErrClosed
	}
	l.sess = s
	l.g.wg.Go(s.run)
	l.g.wg.Go(s.watch.run)
	l.mu.Unlock()
	l.tel.SessionStarted()
	l.opts.Logger.Debug("etcdlock: session started", "session", fmt.Sprintf("%x", int64(resp.ID)), "ttl", l.opts.ttl)
	return s, nil
}

func (l *Locker) currentSession() (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, lock.ErrClosed
	}
	if l.sess != nil && !l.sess.ended() {
		return l.sess, nil
	}
	return nil, nil
}

// dropSession forgets s if it is still the current session, so that the
// next call grants a new one.
func (l *Locker) dropSession(s *session, cause error) {
	s.end(cause, true)
	l.mu.Lock()
	if l.sess == s {
		l.sess = nil
	}
	l.mu.Unlock()
}

func newSession(l *Locker, id clientv3.LeaseID, grantSent time.Time) *session {
	s := &session{
		l:        l,
		id:       id,
		done:     make(chan struct{}),
		deadline: grantSent.Add(l.opts.ttl - l.opts.LossMargin),
		leases:   make(map[*Lease]struct{}),
		keys:     recordKeys{spare: make(map[string]uint64), busy: make(map[string]chan struct{})},
	}
	s.guard.key = fmt.Sprintf("%s#guard/%016x", l.opts.prefix, int64(id))
	s.watch = &recordWatcher{s: s, wake: make(chan struct{}, 1), entries: make(map[int64]*recordWatch)}
	s.watch.ctx, s.watch.cancel = context.WithCancel(l.g.life)
	return s
}

func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// end ends the session once and every lease granted through it, with
// cause: lost, or closed by the Locker.
func (s *session) end(cause error, lost bool) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.err = cause
		s.lost = lost
		leases := s.leases
		s.leases = nil
		s.mu.Unlock()
		close(s.done)
		s.watch.cancel()
		for le := range leases {
			le.end(cause)
		}
		if lost {
			s.l.tel.SessionEnded(config.EndReason(cause))
			s.l.opts.Logger.Warn("etcdlock: session lost", "session", fmt.Sprintf("%x", int64(s.id)), "cause", cause)
		} else {
			s.l.tel.SessionEnded(telemetry.Closed)
		}
	})
}

func (s *session) add(le *Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		return s.lostErr() // end has set err and lost, and closes done next
	}
	s.leases[le] = struct{}{}
	return nil
}

func (s *session) remove(le *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, le) // nil once the session ended: a no-op
}

// guard is a session's guard key: every create compares its mod revision,
// and ending an acquisition whose create was ambiguous writes it
// (docs/design/etcd.md, "Late creates").
type guard struct {
	key string
	rev atomic.Int64 // as last seen from the server; 0: never written
}

// raise records a write of the guard at rev by this session.
func (g *guard) raise(rev int64) {
	for {
		cur := g.rev.Load()
		if rev <= cur || g.rev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// lostErr returns the error a waiter reports when its session ended:
// the loss, or lock.ErrClosed when Close ended the session.
func (s *session) lostErr() error {
	<-s.done
	if !s.lost {
		return lock.ErrClosed
	}
	return s.err
}

// run keeps the session's lease alive until the session ends.
func (s *session) run() {
	newKeepalive(s, s.l.clk, s.l.client.KeepAliveOnce, s.revokeLost).run()
}

// revokeLost revokes a lease the session gave up on, retrying until the
// server must have expired it anyway or the Locker closes.
func (s *session) revokeLost() {
	ctx, cancel := context.WithTimeout(s.l.g.life, s.l.opts.ttl+s.l.opts.LossMargin)
	defer cancel()
	for {
		_, err := s.l.client.Revoke(ctx, s.id)
		if err == nil || isLeaseNotFound(err) || clock.Sleep(ctx, 100*time.Millisecond, nil, nil, nil) != nil {
			return
		}
	}
}
