package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// clientEnv carries a client process's configuration, as JSON. Its presence
// is what makes the test binary run as a client.
const clientEnv = "FENCELOCK_FAULT_CLIENT"

// clientHeader names the client in register requests, so that the
// register's log and hooks can tell clients apart.
const clientHeader = "Fault-Client"

// sharedHeader marks a reader's read, so that the faults, which strike a
// holder between its read and its write, can pass it over.
const sharedHeader = "Fault-Shared"

// clientConfig is what a client process needs to know.
type clientConfig struct {
	ID        int           `json:"id"`
	Backend   cluster.Kind  `json:"backend"`
	Endpoints []string      `json:"endpoints"`
	Namespace string        `json:"namespace"` // etcd prefix or ZooKeeper root
	Lock      string        `json:"lock"`
	TTL       time.Duration `json:"ttl"` // etcd TTL or ZooKeeper session timeout
	Margin    time.Duration `json:"margin"`
	// AcquireTimeout bounds one Acquire; ReleaseTimeout one Release.
	AcquireTimeout time.Duration `json:"acquire_timeout"`
	ReleaseTimeout time.Duration `json:"release_timeout"`
	Register       string        `json:"register"` // the register's URL
	LogPath        string        `json:"log_path"`
	Start          int64         `json:"start"`   // the shared zero of the clock
	OpBase         int64         `json:"op_base"` // ids are OpBase+1, OpBase+2, ...
	RMWs           int           `json:"rmws"`    // read-modify-writes per grant
	// Think is the pause between the read and the write of one
	// read-modify-write; Hold the time the lease is kept after them.
	Think time.Duration `json:"think"`
	Hold  time.Duration `json:"hold"`
	// Workload is "" (the mutex), "rw", "semaphore" or "multi" (see
	// workload).
	Workload string `json:"workload,omitempty"`
	// Names are the multi workload's names, which its sets are drawn
	// from.
	Names []string `json:"names,omitempty"`
	// Limit is the semaphore workload's limit.
	Limit int `json:"limit,omitempty"`
	// LockDelay, when positive, is the Locker's lock-delay
	// (WithLockDelay).
	LockDelay time.Duration `json:"lock_delay,omitempty"`
	// Broken makes the client break the workload's rule on purpose, for
	// the control runs: in "rw" its writers take shared grants (every
	// client is broken there, so that writers overlap at once), in
	// "semaphore" it asks for a limit one higher than Limit (on a name of
	// its own, so that the backend does not refuse it as incompatible).
	Broken bool `json:"broken,omitempty"`
}

// The workloads. In every one but "multi", the register's
// read-modify-writes are done under an exclusive lease of cfg.Lock, so
// the register's checks apply unchanged, and the faults, which pick their
// victims by the register's requests, hit holders of every kind of grant.
//
//   - "" (the mutex): every grant exclusive.
//   - "rw": a client alternates between the write lock of cfg.Lock (with
//     its read-modify-writes) and a read lock of it (cfg.RMWs reads of
//     the register with the read lock's token, then held cfg.Hold): the
//     rw checker requires that a writer never overlaps another writer or
//     a reader, and that where a frozen writer does, the register refused
//     the writer, as a reader's token, once read with, makes it do. The
//     faults pass readers' reads over (see sharedHeader).
//   - "semaphore": a client first takes one of cfg.Limit permits of
//     semName, then the lock and its read-modify-writes, and releases
//     both: the semaphore checker requires that no more than cfg.Limit
//     clients believe they hold a permit at once.
//   - "multi": a client takes a random set of cfg.Names with
//     lock.AcquireAll and read-modify-writes the register's set of each
//     name with that name's lease (see workloadMulti).
const (
	workloadRW        = "rw"
	workloadSemaphore = "semaphore"
	semName           = "permits"
)

// event is one line of a client's log. T is nanoseconds of the system-wide
// monotonic clock since the run's start, shared by every process.
//
// Kinds: "start", "exit"; "acq" then "acq-ok" or "acq-err"; "done" when the
// lease's Done channel closed; for a semaphore permit, "sem" then "sem-ok"
// or "sem-err", "sem-done", "sem-rel" then "sem-rel-ok" or "sem-rel-err"; "read" then "read-ok", "read-stale" or
// "read-err" (Shared for a reader's read, which no write follows); "write"
// then "write-ok", "write-stale", "write-err" (refused, not applied) or
// "write-unknown"; "rel" then "rel-ok" or "rel-err".
type event struct {
	T      int64  `json:"t"`
	Client int    `json:"c"`
	Kind   string `json:"k"`
	Token  uint64 `json:"tok,omitempty"`
	Op     int64  `json:"op,omitempty"`
	// Name is the set a read or write of the multi workload is for;
	// Names and Tokens (in the order of Names) are the names asked for
	// ("acq", "acq-err") or held ("acq-ok", "done", "rel", "rel-ok",
	// "rel-err") by one of its grants, with their tokens.
	Name   string   `json:"name,omitempty"`
	Names  []string `json:"names,omitempty"`
	Tokens []uint64 `json:"toks,omitempty"`
	// Version, N and Sum describe the register: the version read (or, for
	// a write, the version it was based on), its size and its hash.
	Version int    `json:"v,omitempty"`
	N       int    `json:"n,omitempty"`
	Sum     uint64 `json:"sum,omitempty"`
	Class   string `json:"class,omitempty"` // of an error: lost, released, closed, timeout, canceled, other
	Err     string `json:"err,omitempty"`
	// Shared marks an "acq-ok" of a read lock, and its reads.
	Shared bool `json:"sh,omitempty"`
}

// monoNow reads CLOCK_MONOTONIC, which, unlike the monotonic reading in
// time.Time, is the same clock in every process of the machine, so events
// of different processes can be ordered.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime: %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}

// classify names the kind of an error for the log.
func classify(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, lock.ErrLost):
		return "lost"
	case errors.Is(err, lock.ErrReleased):
		return "released"
	case errors.Is(err, lock.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

// eventLog appends events to the client's log file, one write per line,
// so that a line is either wholly there or absent when the process is
// killed.
type eventLog struct {
	mu    sync.Mutex
	f     *os.File
	id    int
	start int64
}

func (l *eventLog) log(e event) {
	e.T = monoNow() - l.start
	e.Client = l.id
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // plain struct: cannot fail
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "client %d: log: %v\n", l.id, err)
	}
}

// clientMain is the body of a client process. It runs until its standard
// input is closed, then releases what it holds, closes its Locker, checks
// that no goroutine is left and returns the exit status.
func clientMain() int {
	var cfg clientConfig
	if err := json.Unmarshal([]byte(os.Getenv(clientEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "client: %s: %v\n", clientEnv, err)
		return 2
	}
	f, err := os.OpenFile(cfg.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client %d: %v\n", cfg.ID, err)
		return 2
	}
	defer f.Close()
	lg := &eventLog{f: f, id: cfg.ID, start: cfg.Start}
	lg.log(event{Kind: "start"})

	ctx, stop := context.WithCancel(context.Background())
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	code := 0
	if err := runClient(ctx, cfg, lg); err != nil {
		fmt.Fprintf(os.Stderr, "client %d: %v\n", cfg.ID, err)
		code = 1
	}
	<-stdinDone
	stop()
	lg.log(event{Kind: "exit"})
	if leaked := leakcheck.Wait(5 * time.Second); leaked != "" {
		fmt.Fprintf(os.Stderr, "client %d: goroutines still running at exit:\n\n%s\n", cfg.ID, leaked)
		code = 3
	}
	return code
}

// openLocker opens the client's Locker, logging to logger, and returns it
// with the function that closes it and everything under it.
func openLocker(ctx context.Context, cfg clientConfig, logger *slog.Logger) (lock.Locker, func(), error) {
	identity := fmt.Sprintf("client-%d", cfg.ID)
	switch cfg.Backend {
	case cluster.Etcd:
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:            cfg.Endpoints,
			DialTimeout:          2 * time.Second,
			DialKeepAliveTime:    cfg.TTL / 2,
			DialKeepAliveTimeout: cfg.TTL,
			Logger:               zap.NewNop(),
		})
		if err != nil {
			return nil, nil, err
		}
		opts := []etcdlock.Option{
			etcdlock.WithPrefix(cfg.Namespace),
			etcdlock.WithTTL(cfg.TTL),
			etcdlock.WithLossMargin(cfg.Margin),
			etcdlock.WithIdentity(identity),
			etcdlock.WithLogger(logger),
		}
		if cfg.LockDelay > 0 {
			opts = append(opts, etcdlock.WithLockDelay(cfg.LockDelay))
		}
		l, err := etcdlock.New(cli, opts...)
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return l, func() { l.Close(); cli.Close() }, nil
	case cluster.ZooKeeper:
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		opts := []zklock.Option{
			zklock.WithRoot(cfg.Namespace),
			zklock.WithSessionTimeout(cfg.TTL),
			zklock.WithLossMargin(cfg.Margin),
			zklock.WithIdentity(identity),
			zklock.WithLogger(logger),
		}
		if cfg.LockDelay > 0 {
			opts = append(opts, zklock.WithLockDelay(cfg.LockDelay))
		}
		l, err := zklock.Dial(dctx, cfg.Endpoints, opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q", cfg.Backend)
}

// runClient is the workload loop: acquire, read-modify-write the register
// cfg.RMWs times, hold, release; until ctx ends. See the workloads for
// what "rw" and "semaphore" add.
func runClient(ctx context.Context, cfg clientConfig, lg *eventLog) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	locker, closeLocker, err := openLocker(ctx, cfg, logger)
	if err != nil {
		return fmt.Errorf("open locker: %w", err)
	}
	defer closeLocker()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	w := &worker{cfg: cfg, lg: lg, base: base, locker: locker,
		rng: rand.New(rand.NewPCG(uint64(cfg.ID), uint64(time.Now().UnixNano())))}
	for round := 0; ctx.Err() == nil; round++ {
		var release func()
		if cfg.Workload == workloadSemaphore {
			var ok bool
			if release, ok = w.permit(ctx); !ok {
				continue
			}
		}
		if cfg.Workload == workloadMulti {
			w.multiGrant(ctx)
			continue
		}
		shared := cfg.Workload == workloadRW && (round+cfg.ID)%2 == 1
		w.grant(ctx, shared)
		if release != nil {
			release()
		}
	}
	return nil
}

// acquire runs one acquisition of the kind the workload asks for.
func (w *worker) acquire(ctx context.Context, shared bool) (lock.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, w.cfg.AcquireTimeout)
	defer cancel()
	if shared || w.cfg.Workload == workloadRW && w.cfg.Broken {
		sl, ok := w.locker.(lock.SharedLocker)
		if !ok {
			return nil, fmt.Errorf("%T is not a lock.SharedLocker", w.locker)
		}
		return sl.AcquireShared(actx, w.cfg.Lock)
	}
	return w.locker.Acquire(actx, w.cfg.Lock)
}

// pause keeps a failing client from spinning while the cluster is
// unreachable.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// watch logs kind when lease ends, and closes the returned channel after.
func (w *worker) watch(lease lock.Lease, kind string) <-chan struct{} {
	tok := uint64(lease.Token())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		<-lease.Done()
		err := lease.Err()
		w.lg.log(event{Kind: kind, Token: tok, Class: classify(err), Err: err.Error()})
	}()
	return watched
}

// release releases lease, logging kind, kind-ok or kind-err.
func (w *worker) release(lease lock.Lease, kind string) {
	tok := uint64(lease.Token())
	w.lg.log(event{Kind: kind, Token: tok})
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.ReleaseTimeout)
	err := lease.Release(rctx)
	cancel()
	if err != nil {
		w.lg.log(event{Kind: kind + "-err", Token: tok, Class: classify(err), Err: err.Error()})
	} else {
		w.lg.log(event{Kind: kind + "-ok", Token: tok})
	}
}

// permit takes one permit of the semaphore workload and returns the
// function that releases it, or false after a failed attempt.
func (w *worker) permit(ctx context.Context) (func(), bool) {
	sem, ok := w.locker.(lock.Semaphore)
	if !ok {
		w.lg.log(event{Kind: "sem-err", Class: "other", Err: fmt.Sprintf("%T is not a lock.Semaphore", w.locker)})
		pause(ctx)
		return nil, false
	}
	name, limit := semName, w.cfg.Limit
	if w.cfg.Broken {
		name, limit = semName+"-broken", limit+1
	}
	w.lg.log(event{Kind: "sem"})
	actx, cancel := context.WithTimeout(ctx, w.cfg.AcquireTimeout)
	lease, err := sem.AcquireSemaphore(actx, name, limit)
	cancel()
	if err != nil {
		w.lg.log(event{Kind: "sem-err", Class: classify(err), Err: err.Error()})
		pause(ctx)
		return nil, false
	}
	w.lg.log(event{Kind: "sem-ok", Token: uint64(lease.Token())})
	watched := w.watch(lease, "sem-done")
	return func() {
		w.release(lease, "sem-rel")
		<-watched
	}, true
}

// grant takes one grant of the lock, does its read-modify-writes (its
// reads if it is shared), holds it and releases it.
func (w *worker) grant(ctx context.Context, shared bool) {
	cfg := w.cfg
	w.lg.log(event{Kind: "acq"})
	lease, err := w.acquire(ctx, shared)
	if err != nil {
		w.lg.log(event{Kind: "acq-err", Class: classify(err), Err: err.Error()})
		pause(ctx)
		return
	}
	w.lg.log(event{Kind: "acq-ok", Token: uint64(lease.Token()), Shared: shared})
	watched := w.watch(lease, "done")
	hold := cfg.Hold
	for range cfg.RMWs {
		// The last check before a request: a real program would stop
		// here once the lease has ended. A pause after this point is
		// the case only the resource's check can handle.
		if lease.Err() != nil || ctx.Err() != nil {
			break
		}
		if shared {
			w.read(lease, 0, true)
			continue
		}
		w.seq++
		if h, _ := w.readModifyWrite(lease, cfg.OpBase+w.seq); h > hold {
			hold = h
		}
	}
	select {
	case <-time.After(hold):
	case <-lease.Done():
	case <-ctx.Done():
	}
	w.release(lease, "rel")
	<-watched
}

// worker sends the register requests of one client.
type worker struct {
	cfg    clientConfig
	lg     *eventLog
	base   *http.Transport
	locker lock.Locker
	seq    int64      // the last op id used, less cfg.OpBase
	rng    *rand.Rand // draws the multi workload's sets
}

// target returns the register's URL for lease, and the name of its set
// in the multi workload ("" in the others, which share one set).
func (w *worker) target(lease lock.Lease) (string, string) {
	if w.cfg.Workload != workloadMulti {
		return w.cfg.Register, ""
	}
	return w.cfg.Register + "/" + lease.Name(), lease.Name()
}

// registerState is the register's answer to a read or a write.
type registerState struct {
	Version int    `json:"v"`
	N       int    `json:"n"`
	Sum     uint64 `json:"sum"`
	// Hold, when set, asks the client to keep its lease this long after
	// its read-modify-writes (see register.holdLonger).
	Hold time.Duration `json:"hold,omitempty"`
}

// requestTimeout bounds one register request. The register is never
// faulted, so only a frozen or dying client sees it expire.
const requestTimeout = 20 * time.Second

// readModifyWrite reads the register, waits cfg.Think, and writes "what was
// read, plus op" with the lease's token. The read goes through
// httpfence.Transport; the write deliberately does not, because the
// transport's own check that the lease is still held would hide the window
// (a pause between that check and the write) that the resource's check
// exists for.
//
// It returns the hold time the register asked for, if any, and whether
// the write was accepted.
func (w *worker) readModifyWrite(lease lock.Lease, op int64) (time.Duration, bool) {
	tok := uint64(lease.Token())
	st, ok := w.read(lease, op, false)
	if !ok {
		return 0, false
	}
	u, name := w.target(lease)

	<-time.After(w.cfg.Think)

	q := url.Values{"base": {strconv.Itoa(st.Version)}, "op": {strconv.FormatInt(op, 10)}}
	req, _ := http.NewRequest(http.MethodPost, u+"?"+q.Encode(), nil)
	req.Header.Set(clientHeader, strconv.Itoa(w.cfg.ID))
	req.Header.Set(httpfence.Header, lease.Token().String())
	w.lg.log(event{Kind: "write", Name: name, Token: tok, Op: op, Version: st.Version, N: st.N, Sum: st.Sum})
	wc := &http.Client{Transport: w.base, Timeout: requestTimeout}
	nst, status, err := do(wc, req)
	switch {
	case err != nil:
		// Sent, perhaps applied: the outcome is unknown.
		w.lg.log(event{Kind: "write-unknown", Name: name, Token: tok, Op: op, Class: classify(err), Err: err.Error()})
	case status == http.StatusOK:
		w.lg.log(event{Kind: "write-ok", Name: name, Token: tok, Op: op, Version: nst.Version, N: nst.N, Sum: nst.Sum})
	case status == http.StatusConflict:
		w.lg.log(event{Kind: "write-stale", Name: name, Token: tok, Op: op})
	default:
		w.lg.log(event{Kind: "write-err", Name: name, Token: tok, Op: op, Err: fmt.Sprintf("status %d", status)})
	}
	return max(st.Hold, nst.Hold), err == nil && status == http.StatusOK
}

// read reads the register through httpfence.Transport, with the lease's
// token, for the read-modify-write op or, if shared, as a reader, and
// logs the outcome. It returns what it read and whether it was answered.
// The register's fencing applies to a reader's read as to a writer's: a
// reader's token, once seen, makes the register refuse every writer
// granted before it, so a frozen writer cannot write while readers hold.
// It also refuses the reads of readers granted before it; readers share,
// which a token check does not fit (see package fencing), and such a
// refusal only costs the older reader its read.
func (w *worker) read(lease lock.Lease, op int64, shared bool) (registerState, bool) {
	tok := uint64(lease.Token())
	u, name := w.target(lease)
	w.lg.log(event{Kind: "read", Name: name, Token: tok, Op: op, Shared: shared})
	rc := &http.Client{Transport: &httpfence.Transport{Lease: lease, Base: w.base}, Timeout: requestTimeout}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set(clientHeader, strconv.Itoa(w.cfg.ID))
	if shared {
		req.Header.Set(sharedHeader, "1")
	}
	st, status, err := do(rc, req)
	switch {
	case err != nil:
		w.lg.log(event{Kind: "read-err", Name: name, Token: tok, Op: op, Class: classify(err), Err: err.Error(), Shared: shared})
		return st, false
	case status == http.StatusConflict:
		w.lg.log(event{Kind: "read-stale", Name: name, Token: tok, Op: op, Shared: shared})
		return st, false
	case status != http.StatusOK:
		w.lg.log(event{Kind: "read-err", Name: name, Token: tok, Op: op, Class: "other", Err: fmt.Sprintf("status %d", status), Shared: shared})
		return st, false
	}
	w.lg.log(event{Kind: "read-ok", Name: name, Token: tok, Op: op, Version: st.Version, N: st.N, Sum: st.Sum, Shared: shared})
	return st, true
}

// do sends req and decodes a 200 answer.
func do(c *http.Client, req *http.Request) (registerState, int, error) {
	var st registerState
	resp, err := c.Do(req)
	if err != nil {
		return st, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, 0, err
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&st); err != nil {
			return st, 0, err
		}
	}
	return st, resp.StatusCode, nil
}
