package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/integration/cluster"
)

// backend is a running cluster shared by the runs of one backend, with a
// raw client to list what the Lockers left behind.
type backend struct {
	kind cluster.Kind
	c    *cluster.Cluster
	etcd *clientv3.Client
	zk   *zk.Conn
}

// nopLogger silences go-zookeeper.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// startBackend starts a cluster of kind with opts and its raw client;
// both are stopped in t.Cleanup.
func startBackend(t *testing.T, kind cluster.Kind, opts ...cluster.Option) *backend {
	t.Helper()
	b := &backend{kind: kind, c: cluster.FromEnv(t).Start(t, kind, opts...)}
	switch kind {
	case cluster.Etcd:
		cli, err := clientv3.New(clientv3.Config{Endpoints: b.c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("clientv3.New() = %v", err)
		}
		t.Cleanup(func() { cli.Close() })
		b.etcd = cli
	case cluster.ZooKeeper:
		conn, _, err := zk.Connect(b.c.Endpoints(), 10*time.Second, zk.WithLogger(nopLogger{}))
		if err != nil {
			t.Fatalf("zk.Connect() = %v", err)
		}
		t.Cleanup(conn.Close)
		b.zk = conn
	}
	return b
}

// record is a lock record found under a run's namespace.
type record struct {
	key, identity, detail string
}

// records lists the lock records under namespace: etcd keys, or ZooKeeper
// ephemeral znodes (the persistent root and the container parents of the
// locks are not records). Lock-delay markers are not records either: they
// have no lease, and the marker of a grant that did not end by a clean
// Release stays, by design, until the next grant of its name (etcd keys
// under "<namespace>/#delay/"; ZooKeeper's are persistent znodes).
func (b *backend) records(ctx context.Context, namespace string) ([]record, error) {
	var out []record
	switch b.kind {
	case cluster.Etcd:
		resp, err := b.etcd.Get(ctx, namespace+"/", clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			if strings.HasPrefix(string(kv.Key), namespace+"/#delay/") {
				continue
			}
			out = append(out, record{key: string(kv.Key), identity: string(kv.Value),
				detail: fmt.Sprintf("create revision %d, mod revision %d, version %d", kv.CreateRevision, kv.ModRevision, kv.Version)})
		}
	case cluster.ZooKeeper:
		var walk func(p string) error
		walk = func(p string) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			data, st, err := b.zk.Get(p)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			if st.EphemeralOwner != 0 {
				out = append(out, record{key: p, identity: string(data),
					detail: fmt.Sprintf("czxid %d, session %#x", st.Czxid, st.EphemeralOwner)})
			}
			kids, _, err := b.zk.Children(p)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, k := range kids {
				if err := walk(path.Join(p, k)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk("/" + namespace); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runConfig describes one run of the workload.
type runConfig struct {
	clients        int
	fenced         bool
	singleEndpoint bool // client i talks to member i only
	ttl, margin    time.Duration
	warmup, after  int // accepted writes wanted before and after the fault
	rmws           int
	think, hold    time.Duration
	// rounds is how often a repeated fault (the leader kill) recurs;
	// jitter the most a fault is prolonged at random; seed seeds it.
	rounds int
	jitter time.Duration
	seed   int64
	// workload is the clients' workload ("", "rw", "semaphore", "multi"), limit
	// the semaphore's; broken makes client 1 (in "rw", every client)
	// break the workload's rule (the control runs).
	workload string
	limit    int
	broken   bool
	// lockDelay is the clients' lock-delay (0: none); checkDelay the
	// lock-delay the checker requires after a crashed holder's record
	// vanished (see checkLockDelay). They differ only in the control
	// run, whose clients have none.
	lockDelay, checkDelay time.Duration
}

// defaultRun is the short pass: three clients, 2s TTL, fenced.
func defaultRun() runConfig {
	return runConfig{
		clients: 3, fenced: true,
		ttl: 2 * time.Second, margin: 500 * time.Millisecond,
		warmup: 10, after: 10,
		rmws: 2, think: 10 * time.Millisecond, hold: 20 * time.Millisecond,
		rounds: 2,
	}
}

// run is one run of the workload against a backend.
type run struct {
	t     testing.TB
	b     *backend
	cfg   runConfig
	name  string
	start int64
	ns    string // the Lockers' prefix / root
	reg   *register
	dir   string

	mu      sync.Mutex
	rng     *rand.Rand
	clients []*clientProc
	frozen  map[int][]window
	// serverFreezes are the servers frozen so far, with whether each
	// was the leader when frozen.
	serverFreezes []serverFreeze
	// revoked are the grants the faults revoked, by token.
	revoked map[uint64]revocation
	// vanished are the records of crashed holders seen to disappear
	// (see watchVanish).
	vanished []vanish
	healed   int64
	faults   int
	missed   []string
	bad      []string // violations found while running
}

var runSeq atomic.Int64

// newRun prepares a run: a fresh register, namespace and log directory.
func newRun(t testing.TB, b *backend, cfg runConfig) *run {
	t.Helper()
	start := monoNow()
	id := fmt.Sprintf("%d-%d", time.Now().UnixNano(), runSeq.Add(1))
	return &run{
		t: t, b: b, cfg: cfg, name: t.Name(), start: start,
		ns:     "faulttest/" + id,
		reg:    newRegister(t, start, cfg.fenced),
		dir:    t.TempDir(),
		frozen: map[int][]window{},
		rng:    rand.New(rand.NewPCG(uint64(cfg.seed), 1)),
	}
}

// jitter returns a random duration up to the run's jitter.
func (r *run) jitter() time.Duration {
	if r.cfg.jitter <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.rng.Int64N(int64(r.cfg.jitter)))
}

// rounds returns how often a repeated fault recurs.
func (r *run) rounds() int { return max(r.cfg.rounds, 1) }

// now is the time on the run's clock.
func (r *run) now() int64 { return monoNow() - r.start }

// timeout scales with the TTL: long enough for any expiry and election.
func (r *run) timeout() time.Duration { return 15*r.cfg.ttl + 10*time.Second }

// addClient starts one more client process, talking to the cluster
// through proxies of its own.
func (r *run) addClient() (*clientProc, error) {
	r.mu.Lock()
	id := len(r.clients) + 1
	r.mu.Unlock()
	ps := cluster.NewProxies(r.t, r.b.c)
	var eps []string
	var proxies []*cluster.Proxy
	member := -1
	if r.cfg.singleEndpoint {
		member = (id - 1) % ps.Len()
		proxies = []*cluster.Proxy{ps.Proxy(member)}
		eps = []string{ps.Proxy(member).Addr()}
	} else {
		for i := range ps.Len() {
			proxies = append(proxies, ps.Proxy(i))
		}
		eps = ps.Endpoints()
	}
	ns := r.ns
	if r.b.kind == cluster.ZooKeeper {
		ns = "/" + ns
	}
	var names []string
	if r.cfg.workload == workloadMulti {
		names = multiNames
	}
	cfg := clientConfig{
		ID: id, Backend: r.b.kind, Endpoints: eps, Namespace: ns, Lock: "register",
		TTL: r.cfg.ttl, Margin: r.cfg.margin,
		AcquireTimeout: 4 * r.cfg.ttl, ReleaseTimeout: 3 * r.cfg.ttl,
		Register: r.reg.URL(), LogPath: filepath.Join(r.dir, fmt.Sprintf("client-%d.jsonl", id)),
		Start: r.start, OpBase: int64(id) * 1_000_000_000,
		RMWs: r.cfg.rmws, Think: r.cfg.think, Hold: r.cfg.hold,
		Workload: r.cfg.workload, Limit: r.cfg.limit, Names: names, Broken: r.cfg.broken && (id == 1 || r.cfg.workload == workloadRW),
		LockDelay: r.cfg.lockDelay,
	}
	p, err := startClient(cfg, proxies, member)
	if err != nil {
		return nil, fmt.Errorf("start client %d: %w", id, err)
	}
	r.mu.Lock()
	r.clients = append(r.clients, p)
	r.mu.Unlock()
	r.t.Cleanup(p.abort)
	return p, nil
}

// client returns the client with id.
func (r *run) client(id int) *clientProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.clients) {
		return nil
	}
	return r.clients[id-1]
}

// all returns every client started so far.
func (r *run) all() []*clientProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*clientProc(nil), r.clients...)
}

// freeze and thaw pause and resume a client, recording the window.
func (r *run) freeze(p *clientProc) error {
	if err := p.freeze(); err != nil {
		return err
	}
	r.mu.Lock()
	r.frozen[p.id] = append(r.frozen[p.id], window{from: r.now(), to: never})
	r.mu.Unlock()
	return nil
}

func (r *run) thaw(p *clientProc) error {
	if err := p.thaw(); err != nil {
		return err
	}
	r.mu.Lock()
	ws := r.frozen[p.id]
	if n := len(ws); n > 0 && ws[n-1].to == never {
		ws[n-1].to = r.now()
	}
	r.mu.Unlock()
	return nil
}

// faultDone records that a fault was injected and has ended now.
func (r *run) faultDone() {
	r.mu.Lock()
	r.faults++
	r.healed = r.now()
	r.mu.Unlock()
}

// violation records a problem found while the run was going on.
func (r *run) violation(format string, args ...any) {
	r.mu.Lock()
	r.bad = append(r.bad, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// poll calls cond every few milliseconds until it holds or timeout
// passes.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
	return true
}

// acceptedWrites returns the register's accepted writes from since on.
func (r *run) acceptedWrites(since int64) []serverEvent {
	var out []serverEvent
	for _, e := range r.reg.events() {
		if e.Write && e.Status == http.StatusOK && e.T >= since {
			out = append(out, e)
		}
	}
	return out
}

// waitWrites waits for n accepted writes from since on, by at least
// writers distinct clients.
func (r *run) waitWrites(since int64, n, writers int) error {
	ok := poll(r.timeout(), func() bool {
		ws := r.acceptedWrites(since)
		who := map[int]bool{}
		for _, w := range ws {
			who[w.Client] = true
		}
		return len(ws) >= n && len(who) >= writers
	})
	if !ok {
		return fmt.Errorf("%d accepted writes since %v after %v; want %d by %d clients (is the lock stuck?)",
			len(r.acceptedWrites(since)), ms(since), r.timeout(), n, writers)
	}
	return nil
}

// waitHigherWrite waits until the register accepted a write to the set of
// name with a token above tok, which shows that the lock of name moved on
// to a newer grant. name is "" but in the multi workload, whose clients
// hold disjoint sets at once.
func (r *run) waitHigherWrite(name string, tok uint64) error {
	ok := poll(r.timeout(), func() bool {
		for _, e := range r.acceptedWrites(0) {
			if e.Name == name && e.Token > tok {
				return true
			}
		}
		return false
	})
	if !ok {
		return fmt.Errorf("no write to %q with a token above %d was accepted within %v (is the lock stuck?)", name, tok, r.timeout())
	}
	return nil
}

// nextAccepted calls fn, inside the register's critical section, with the
// next accepted request that match accepts, and returns that request. A
// reader's read is never one: the faults strike a holder between its read
// and its write, and await that write, which a reader never sends.
func (r *run) nextAccepted(match func(serverEvent) bool, fn func(serverEvent)) (serverEvent, error) {
	got := make(chan serverEvent, 1)
	var fired atomic.Bool
	r.reg.onAccepted(func(e serverEvent) bool {
		if e.Shared || !match(e) || !fired.CompareAndSwap(false, true) {
			return fired.Load()
		}
		fn(e)
		got <- e
		return true
	})
	select {
	case e := <-got:
		return e, nil
	case <-time.After(r.timeout()):
		// Disarm the hook.
		fired.Store(true)
		return serverEvent{}, fmt.Errorf("no matching request reached the register within %v", r.timeout())
	}
}

// lastEvent returns the client's latest event of one of kinds after since.
func lastEvent(p *clientProc, since int64, kinds ...string) (event, bool) {
	evs := p.events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].T < since {
			break
		}
		for _, k := range kinds {
			if evs[i].Kind == k {
				return evs[i], true
			}
		}
	}
	return event{}, false
}

// recordsText lists the run's lock records for messages.
func (r *run) recordsText() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := r.b.records(ctx, r.ns)
	if err != nil {
		return "records: " + err.Error()
	}
	var parts []string
	for _, rec := range recs {
		parts = append(parts, rec.key+" ("+rec.identity+"; "+rec.detail+")")
	}
	return fmt.Sprintf("%d records: %s", len(recs), strings.Join(parts, ", "))
}

// tailLines is how much of each client's log a failed run prints;
// FENCELOCK_FAULT_TAIL changes it.
var tailLines = func() int {
	if n, err := strconv.Atoi(os.Getenv("FENCELOCK_FAULT_TAIL")); err == nil && n > 0 {
		return n
	}
	return 15
}()

// finish waits for progress after the last fault, stops the clients,
// waits for their records to go, and runs the checkers.
func (r *run) finish() (stats, []string) {
	t := r.t
	t.Helper()
	r.mu.Lock()
	healed := r.healed
	r.mu.Unlock()

	live := map[int]bool{}
	for _, p := range r.all() {
		if p.killedAt() == 0 {
			live[p.id] = true
		}
	}
	// Progress after the fault: enough writes, and every live client
	// served again.
	if err := r.waitWrites(healed, r.cfg.after, 1); err != nil {
		r.violation("after the fault: %v; %s", err, r.recordsText())
	} else {
		poll(r.timeout(), func() bool {
			for id := range live {
				if _, ok := lastEvent(r.client(id), healed, "acq-ok"); !ok {
					return false
				}
			}
			return true
		})
	}

	// Stop every client, all at once.
	var wg sync.WaitGroup
	errs := make([]error, len(r.all()))
	for i, p := range r.all() {
		if p.exited() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.stop(6*r.cfg.ttl + 20*time.Second)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("stopping clients: %v\n%s", err, r.all()[i].tail(30))
		}
	}

	// No records left once every session has ended or expired.
	var left []record
	ok := poll(3*r.cfg.ttl+10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		recs, err := r.b.records(ctx, r.ns)
		left = recs
		return err == nil && len(recs) == 0
	})
	if !ok {
		var keys []string
		for _, rec := range left {
			keys = append(keys, rec.key+" ("+rec.identity+"; "+rec.detail+")")
		}
		r.violation("%d lock records left %v after every client ended: %s", len(left), 3*r.cfg.ttl+10*time.Second, strings.Join(keys, ", "))
	}

	h := &history{
		name: r.name, backend: r.b.kind, ttl: r.cfg.ttl, clients: map[int][]event{}, server: r.reg.events(),
		end: r.now(), frozen: r.frozen, serverFreezes: r.serverFreezes, killed: map[int]int64{}, healed: healed,
		live: live, fenced: r.cfg.fenced, limit: r.cfg.limit, revoked: r.revoked,
		lockDelay: r.cfg.checkDelay, vanished: r.vanished,
	}
	if r.cfg.workload == workloadMulti {
		h.multi = r.multiFinals()
	} else {
		h.final, h.finalN, h.finalS = r.reg.state("")
	}
	for _, p := range r.all() {
		h.clients[p.id] = p.events()
		if k := p.killedAt(); k != 0 {
			h.killed[p.id] = k
		}
	}
	st, bad := h.check()
	r.mu.Lock()
	bad = append(r.bad, bad...)
	st.Faults = r.faults
	st.Missed = len(r.missed)
	r.mu.Unlock()
	st.Violations = len(bad)
	if len(bad) > 0 || os.Getenv("FENCELOCK_FAULT_VERBOSE") == "1" {
		var b strings.Builder
		for _, p := range r.all() {
			b.WriteString(p.tail(tailLines))
		}
		t.Logf("run %s: %d violations; client tails:\n%s", r.name, len(bad), b.String())
	}
	if len(bad) > 0 && r.cfg.fenced {
		t.Logf("run %s: full logs kept in %s", r.name, r.keepLogs())
	}
	return st, bad
}

// keepLogs copies the clients' logs, their output and the register's log
// out of the test's temporary directory, for a failed run to be studied.
func (r *run) keepLogs() string {
	dir, err := os.MkdirTemp("", "faulttest-"+strings.NewReplacer("/", "-").Replace(r.name)+"-")
	if err != nil {
		return "(not kept: " + err.Error() + ")"
	}
	for _, p := range r.all() {
		if b, err := os.ReadFile(p.cfg.LogPath); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(p.cfg.LogPath)), b, 0o644)
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("client-%d.out", p.id)), []byte(p.out.String()), 0o644)
	}
	var b strings.Builder
	for _, e := range r.reg.events() {
		fmt.Fprintf(&b, "%+v\n", e)
	}
	os.WriteFile(filepath.Join(dir, "register.log"), []byte(b.String()), 0o644)
	return dir
}

// sortedIDs returns the ids of clients in order.
func sortedIDs(m map[int]bool) []int {
	var ids []int
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}
