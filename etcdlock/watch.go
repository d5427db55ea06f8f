package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// recordWatcher watches the records of every lease of one session on one
// watch stream, owned by run; the stream's reader only queues what it
// receives. Watch IDs are chosen here, unique within the session
// (docs/design/etcd.md, "Records and the queue").
type recordWatcher struct {
	s      *session
	ctx    context.Context // ends with the session or the Locker
	cancel context.CancelFunc

	wake chan struct{} // capacity 1: something to do for run

	mu      sync.Mutex
	nextID  int64
	entries map[int64]*recordWatch // live (not stopped) watches by ID
	creates []*recordWatch         // armed, not yet sent on the current stream
	cancels []int64                // IDs to cancel on the current stream
	resps   []recvd                // received, not yet handled
}

// recordWatch is the watch on one lease's record.
type recordWatch struct {
	le      *Lease
	id      int64
	fromRev int64       // the record existed at this revision: watch from the next one
	arm     *time.Timer // until it fires (the watch is armed) or stop; then nil
	gen     int         // stream generation it was last sent on (0: none)
}

// recvd is one answer from the stream of generation gen, or its failure.
type recvd struct {
	gen  int
	resp *pb.WatchResponse
	err  error
}

func (w *recordWatcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add registers the watch of le's record, known to exist at fromRev, armed
// recordWatchDelay later, and returns it for stop.
func (w *recordWatcher) add(le *Lease, fromRev int64) *recordWatch {
	w.mu.Lock()
	w.nextID++
	rw := &recordWatch{le: le, id: w.nextID, fromRev: fromRev}
	w.entries[rw.id] = rw
	rw.arm = time.AfterFunc(recordWatchDelay, func() { w.arm(rw) })
	w.mu.Unlock()
	return rw
}

func (w *recordWatcher) arm(rw *recordWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rw.arm = nil
	if w.entries[rw.id] == rw {
		w.creates = append(w.creates, rw)
		w.signal()
	}
}

func (w *recordWatcher) stop(rw *recordWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.entries[rw.id] != rw {
		return
	}
	if rw.arm != nil {
		rw.arm.Stop()
	}
	delete(w.entries, rw.id)
	if rw.gen != 0 {
		w.cancels = append(w.cancels, rw.id)
		w.signal()
	}
}

// rewatch creates rw's watch again from fromRev, where a read found it.
func (w *recordWatcher) rewatch(rw *recordWatch, fromRev int64) {
	w.mu.Lock()
	rw.fromRev = fromRev
	rw.gen = 0
	w.mu.Unlock()
	w.arm(rw)
}

// streamState is what run keeps about the current watch stream.
type streamState struct {
	gen       int // generation of the current stream; 0 before the first
	stream    pb.Watch_WatchClient
	cancelStr context.CancelFunc
	recvWG    sync.WaitGroup
	backoff   time.Duration
	retryAt   <-chan time.Time // set while waiting out a backoff
}

// run owns the watch stream until the session ends.
func (w *recordWatcher) run() {
	defer w.cancel()
	st := &streamState{backoff: retryDelay}
	defer w.closeStream(st)
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.wake:
		case <-st.retryAt:
			st.retryAt = nil
		}
		if st.retryAt != nil {
			continue // waiting out the backoff
		}
		if !w.handleReceived(st) || !w.pending() {
			continue
		}
		if st.stream == nil && !w.openStream(st) {
			continue
		}
		w.sendPending(st)
	}
}

// closeStream ends the current stream and waits for its reader.
func (w *recordWatcher) closeStream(st *streamState) {
	if st.cancelStr != nil {
		st.cancelStr()
		st.recvWG.Wait()
	}
	st.stream, st.cancelStr = nil, nil
}

// fail drops the stream after err, and with it every watch and pending
// cancel sent on it, and backs off before the next one.
func (w *recordWatcher) fail(st *streamState, err error) {
	if err != nil && w.ctx.Err() == nil && !w.s.ended() {
		w.s.l.opts.Logger.Debug("etcdlock: record watch stream failed", "session", fmt.Sprintf("%x", int64(w.s.id)), "err", err)
	}
	w.closeStream(st)
	w.mu.Lock()
	w.creates = w.creates[:0]
	w.cancels = w.cancels[:0]
	w.resps = w.resps[:0]
	for _, rw := range w.entries {
		if rw.arm == nil {
			rw.gen = 0
			w.creates = append(w.creates, rw)
		}
	}
	w.mu.Unlock()
	st.retryAt = time.After(st.backoff)
	st.backoff = min(2*st.backoff, time.Second)
}

// handleReceived handles what the current stream has received, and
// reports false if the stream failed.
func (w *recordWatcher) handleReceived(st *streamState) bool {
	w.mu.Lock()
	resps := w.resps
	w.resps = nil
	w.mu.Unlock()
	for _, r := range resps {
		if r.gen != st.gen {
			continue
		}
		if r.err != nil {
			w.fail(st, r.err)
			return false
		}
		w.handle(r.resp, st.gen)
		st.backoff = retryDelay
	}
	return true
}

func (w *recordWatcher) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.creates)+len(w.cancels) > 0
}

// openStream opens a new stream, failing rather than silent on a member
// cut off from the leader, and starts its reader.
func (w *recordWatcher) openStream(st *streamState) bool {
	sctx, scancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	wc := pb.NewWatchClient(w.s.l.client.ActiveConnection())
	stream, err := wc.Watch(sctx)
	if err != nil {
		scancel()
		w.fail(st, err)
		return false
	}
	st.gen++
	st.stream, st.cancelStr = stream, scancel
	st.recvWG.Add(1)
	go w.recv(stream, st.gen, &st.recvWG) // joined by closeStream
	return true
}

func (w *recordWatcher) sendPending(st *streamState) {
	w.mu.Lock()
	creates, cancels := w.creates, w.cancels
	w.creates, w.cancels = nil, nil
	var reqs []*pb.WatchRequest
	for _, rw := range creates {
		if w.entries[rw.id] != rw || rw.gen == st.gen {
			continue
		}
		rw.gen = st.gen
		reqs = append(reqs, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key:           []byte(rw.le.key),
			StartRevision: rw.fromRev + 1,
			WatchId:       rw.id,
		}}})
	}
	for _, id := range cancels {
		reqs = append(reqs, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
	}
	w.mu.Unlock()
	for _, req := range reqs {
		if err := st.stream.Send(req); err != nil {
			w.fail(st, err)
			return
		}
	}
}

// recv reads the stream of generation gen and queues what it reads for run.
func (w *recordWatcher) recv(st pb.Watch_WatchClient, gen int, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		resp, err := st.Recv()
		if err == nil && resp.Canceled && resp.WatchId == clientv3.InvalidWatchID {
			err = fmt.Errorf("watch create refused: %s", resp.CancelReason)
		}
		w.mu.Lock()
		w.resps = append(w.resps, recvd{gen: gen, resp: resp, err: err})
		w.mu.Unlock()
		w.signal()
		if err != nil {
			return
		}
	}
}

// handle routes one response of the current stream to its watch.
func (w *recordWatcher) handle(resp *pb.WatchResponse, gen int) {
	w.mu.Lock()
	rw := w.entries[resp.WatchId]
	if rw != nil && rw.gen != gen {
		rw = nil // a re-created watch: this answer is for its old one
	}
	if rw != nil && resp.Canceled {
		// The server keeps a cancelled watch's ID taken until the
		// client cancels it too: do, and watch again under a new ID.
		w.cancels = append(w.cancels, rw.id)
		delete(w.entries, rw.id)
		w.nextID++
		rw.id = w.nextID
		w.entries[rw.id] = rw
		rw.gen = 0
		w.signal()
	}
	w.mu.Unlock()
	if rw == nil {
		return
	}
	for _, ev := range resp.Events {
		switch {
		case string(ev.Kv.Key) != rw.le.key:
		case ev.Type == mvccpb.DELETE:
			rw.le.lose(recordDeletedCause(rw.le.key, ev.Kv.ModRevision), true)
			return
		case ev.Kv.Lease != int64(w.s.id):
			// Moved to another session: Locker.Resume took it over.
			rw.le.lose(telemetry.WithReason(telemetry.Revoked, fmt.Errorf("%w: record %q was resumed by another Locker", lock.ErrLost, rw.le.key)), false)
			return
		}
	}
	if resp.Canceled {
		rw.le.l.opts.Logger.Debug("etcdlock: record watch cancelled by the server; re-reading the record",
			"key", rw.le.key, "compact_revision", resp.CompactRevision, "reason", resp.CancelReason)
		rw.le.l.spawn(func() { w.reread(rw) })
	}
}

// reread reads rw's record after the server cancelled its watch (a
// compaction, say): gone, the lease is lost; else rw watches again from
// the read.
func (w *recordWatcher) reread(rw *recordWatch) {
	le, l := rw.le, rw.le.l
	if le.st.Err() != nil || w.s.ended() {
		return
	}
	resp, err := l.get(l.g.life, w.s, le.key)
	if err != nil {
		if !errors.Is(err, lock.ErrClosed) && l.g.life.Err() == nil && !w.s.ended() {
			// A silent lease would be worse than a lost one.
			le.lose(telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: record %q could not be read after its watch was cancelled: %w", lock.ErrLost, le.key, err)), false)
		}
		return
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != le.rev {
		le.lose(telemetry.WithReason(telemetry.Deleted, fmt.Errorf("%w: record %q is gone", lock.ErrLost, le.key)), true)
		return
	}
	l.opts.Logger.Debug("etcdlock: record watch created again", "key", le.key, "from_revision", resp.Header.Revision+1)
	w.rewatch(rw, resp.Header.Revision)
}

// wait blocks until one of the records d watches changes, and reads the
// queue again, unless the change admits it: grant's touch then confirms it.
func (a *acquisition) wait(ctx context.Context, d decision, rev int64) (view, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		changed bool
		err     error
	}
	results := make(chan result, len(d.watch))
	for _, key := range d.watch {
		go func() {
			changed, err := a.waitChange(wctx, key, rev, d.puts)
			results <- result{changed, err}
		}()
	}
	first := <-results
	cancel()
	for range len(d.watch) - 1 {
		<-results
	}
	switch {
	case first.err != nil:
		return view{}, first.err
	case first.changed && d.byDeletion:
		return view{admitted: true}, nil
	}
	return a.read(ctx)
}

// waitChange watches key until it is deleted or, with puts, written since
// fromRev, and reports whether it was; false and a nil error mean look
// again (docs/design/etcd.md, "Waiting for a change").
func (a *acquisition) waitChange(ctx context.Context, key string, fromRev int64, puts bool) (changed bool, err error) {
	// A watch through a member cut off from the leader fails rather than
	// stay silent, and the caller looks again.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(a.l.g.life))
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if !puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	// Watch blocks until the server confirms the watch, which a member
	// that stopped answering never does: create it aside.
	ready := make(chan clientv3.WatchChan, 1)
	go func() { ready <- a.l.client.Watch(wctx, key, opts...) }()
	var wch clientv3.WatchChan
	defer func() {
		cancel()
		if wch == nil {
			<-ready
		}
	}()
	// A silent watch may be on a member that stopped answering: a TTL of
	// silence makes the caller read again.
	silence := time.NewTimer(a.l.opts.ttl)
	defer silence.Stop()
	for {
		select {
		case wch = <-ready:
		case <-silence.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-a.l.g.closing.Done():
			return false, lock.ErrClosed
		case <-a.s.done:
			return false, a.s.lostErr()
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return false, nil
			}
			silence.Reset(a.l.opts.ttl)
			if changed, err := a.changeIn(ctx, wr, key, fromRev, puts); changed || err != nil {
				return changed, err
			}
		}
	}
}

// changeIn reports whether the watch response wr shows the change that
// waitChange waits for.
func (a *acquisition) changeIn(ctx context.Context, wr clientv3.WatchResponse, key string, fromRev int64, puts bool) (bool, error) {
	if wr.Created {
		if wr.Header.Revision <= fromRev {
			return false, nil
		}
		// The watch reports what comes after its revision: read what
		// came between fromRev and it. A record created since is
		// another request under the same key (see Lease.Key).
		resp, err := a.l.get(ctx, a.s, key, clientv3.WithKeysOnly())
		if err != nil || len(resp.Kvs) == 0 {
			return err == nil, err
		}
		kv := resp.Kvs[0]
		return kv.CreateRevision > fromRev || puts && kv.ModRevision > fromRev, nil
	}
	for _, ev := range wr.Events {
		// A member behind the one read reports what the read saw already.
		if string(ev.Kv.Key) == key && ev.Kv.ModRevision > fromRev && (ev.Type == clientv3.EventTypeDelete || puts) {
			return true, nil
		}
	}
	return false, nil
}
