package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// embeddedTTL is the lease TTL used with the embedded etcd, whose short
// heartbeat allows it. External clusters get defaultTTL, which a server
// with default settings accepts.
const (
	embeddedTTL = time.Second
	defaultTTL  = 2 * time.Second
)

// run parses args, picks the backend and plays the scenario twice: with and
// without fencing.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	etcdFlag := fs.String("etcd", "", "use the etcd cluster at `host:port[,host:port...]` instead of an embedded one")
	zkFlag := fs.String("zk", "", "use the ZooKeeper ensemble at `host:port[,host:port...]` instead of etcd")
	ttl := fs.Duration("ttl", 0, "lease TTL (etcd, whole seconds) or session timeout (ZooKeeper); default 1s with the embedded etcd, 2s otherwise")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *etcdFlag != "" && *zkFlag != "" {
		return errors.New("give --etcd or --zk, not both")
	}
	if *ttl < 0 {
		return fmt.Errorf("--ttl %v: must be positive", *ttl)
	}

	var b backend
	switch {
	case *zkFlag != "":
		b = &zkBackend{servers: splitHosts(*zkFlag), ttl: orDefault(*ttl, defaultTTL)}
	case *etcdFlag != "":
		b = &etcdBackend{endpoints: splitHosts(*etcdFlag), ttl: orDefault(*ttl, defaultTTL)}
	default:
		fmt.Fprintln(stdout, "Starting an embedded etcd server (a real one, in this process)...")
		srv, err := startEmbeddedEtcd(ctx)
		if err != nil {
			return err
		}
		defer srv.Close()
		b = &etcdBackend{endpoints: []string{srv.Addr()}, ttl: orDefault(*ttl, embeddedTTL), embedded: true}
	}

	fmt.Fprintf(stdout, "Lock server: %s. %s: %v.\n", b.describe(), b.ttlName(), b.leaseTTL())
	fmt.Fprintln(stdout, "Workers A and B both want to write the shared record \"report\", one at a time.")

	id := randomID()
	if err := scenario(ctx, stdout, b, true, "demo/"+id+"/fenced"); err != nil {
		return err
	}
	if err := scenario(ctx, stdout, b, false, "demo/"+id+"/unfenced"); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "A's lease had ended before B got the lock, and A's write went out anyway:")
	fmt.Fprintln(stdout, "a lock cannot recall a write already past its check. The fencing token lets the resource stop it.")
	return nil
}

// scenario plays the story once.
func scenario(ctx context.Context, out io.Writer, b backend, fenced bool, name string) error {
	if fenced {
		fmt.Fprintln(out, "\n== 1. The store checks fencing tokens ==")
	} else {
		fmt.Fprintln(out, "\n== 2. The same story, but the store ignores tokens ==")
	}
	say := func(who, format string, args ...any) {
		fmt.Fprintf(out, "  %-2s %s\n", who, fmt.Sprintf(format, args...))
	}

	proxy, err := newPauseProxy(b.serverAddrs())
	if err != nil {
		return err
	}
	defer proxy.Close()
	lockerA, err := b.locker(ctx, "worker-A", proxy)
	if err != nil {
		return err
	}
	defer lockerA.Close()
	lockerB, err := b.locker(ctx, "worker-B", nil)
	if err != nil {
		return err
	}
	defer lockerB.Close()

	st := newStore(fenced)

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	leaseA, err := lockerA.Acquire(actx, name)
	if err != nil {
		return fmt.Errorf("worker A: %w", err)
	}
	tokenA := leaseA.Token()
	say("A", "acquires the lock: token %d", tokenA)
	// A checks its lease, starts its write and stalls before the write
	// goes out. A real stall (a GC pause) would freeze A's whole process;
	// here A's connection to the lock server is cut instead, so that A's
	// Locker keeps running and we can watch it notice the loss.
	if leaseA.Err() != nil {
		return fmt.Errorf("worker A lost its lease at once: %w", leaseA.Err())
	}
	say("A", "checks its lease (held), starts its write... and stalls before sending it.")
	say("", "(A real stall would be a long GC pause; here A's network is cut, so its keepalives stop.)")
	lostA := make(chan time.Time, 1)
	go func() {
		<-leaseA.Done()
		lostA <- time.Now()
	}()
	proxy.Pause()
	paused := time.Now()

	leaseB, err := lockerB.Acquire(actx, name)
	if err != nil {
		return fmt.Errorf("worker B: %w", err)
	}
	grantedB := time.Now()
	tokenB := leaseB.Token()
	var lostAt time.Time // when A's lease ended locally; zero while it has not
	select {
	case <-leaseA.Done():
		lostAt = <-lostA
		why := "Err wraps lock.ErrLost"
		if !errors.Is(leaseA.Err(), lock.ErrLost) {
			why = fmt.Sprintf("Err: %v", leaseA.Err())
		}
		say("A", "(its Locker, still running) declared the lease lost %.1fs into the stall, before the grant: Done closed, %s",
			lostAt.Sub(paused).Seconds(), why)
	default:
	}
	say("B", "acquires the lock: token %d (granted %.1fs into the stall, once the server expired A's lease)", tokenB, grantedB.Sub(paused).Seconds())
	if err := st.write("report", "B's report", tokenB); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}
	say("B", "writes report = %q with token %d: accepted", "B's report", tokenB)

	proxy.Resume()
	if lostAt.IsZero() {
		select {
		case <-leaseA.Done():
			lostAt = <-lostA
		default:
		}
	}
	if lostAt.IsZero() {
		say("A", "resumes. Its lease has not even ended locally yet, and its write was already past the check,")
	} else {
		say("A", "resumes. Its lease ended %.1fs ago, but its write was already past the check,", time.Since(lostAt).Seconds())
	}
	say("", "so it goes out anyway: report = %q with token %d", "A's stale report", tokenA)
	werr := st.write("report", "A's stale report", tokenA)
	final := st.read("report")
	switch {
	case fenced && errors.Is(werr, fencing.ErrStaleToken):
		var stale *fencing.StaleTokenError
		errors.As(werr, &stale)
		say("", "REJECTED: %v", stale)
		say("", "result: report = %q. B's write is safe.", final)
	case fenced:
		return fmt.Errorf("the fenced store accepted A's stale write (error %v)", werr)
	case werr != nil:
		return fmt.Errorf("the unfenced store refused A's write: %w", werr)
	default:
		say("", "accepted: nothing checks the token.")
		say("", "result: report = %q. B's write is lost: the data is corrupt.", final)
	}

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if err := leaseB.Release(rctx); err != nil && !errors.Is(err, lock.ErrLost) {
		return fmt.Errorf("worker B: %w", err)
	}
	return nil
}

// store is the shared resource the workers write: a map, behind a
// fencing.Guard when fenced.
type store struct {
	guard *fencing.Guard // nil when the store ignores tokens
	mu    sync.Mutex
	data  map[string]string
}

func newStore(fenced bool) *store {
	s := &store{data: map[string]string{}}
	if fenced {
		s.guard = new(fencing.Guard)
	}
	return s
}

func (s *store) write(key, value string, token fencing.Token) error {
	set := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.data[key] = value
		return nil
	}
	if s.guard == nil {
		return set()
	}
	return s.guard.Apply(key, token, set)
}

func (s *store) read(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[key]
}

// backend opens Lockers on one lock service.
type backend interface {
	describe() string
	// ttlName is what the backend calls how long a silent client keeps
	// its locks.
	ttlName() string
	leaseTTL() time.Duration
	serverAddrs() []string
	// locker returns a Locker for a worker. Its traffic goes through
	// proxy, when not nil.
	locker(ctx context.Context, identity string, proxy *pauseProxy) (lock.Locker, error)
}

type etcdBackend struct {
	endpoints []string
	ttl       time.Duration
	embedded  bool
}

func (b *etcdBackend) describe() string {
	if b.embedded {
		return "embedded etcd at " + b.endpoints[0]
	}
	return "etcd at " + strings.Join(b.endpoints, ",")
}

func (b *etcdBackend) ttlName() string         { return "Lease TTL" }
func (b *etcdBackend) leaseTTL() time.Duration { return b.ttl }
func (b *etcdBackend) serverAddrs() []string   { return b.endpoints }

func (b *etcdBackend) locker(ctx context.Context, identity string, proxy *pauseProxy) (lock.Locker, error) {
	eps := b.endpoints
	if proxy != nil {
		eps = proxy.Addrs(eps)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	l, err := etcdlock.New(client,
		etcdlock.WithTTL(b.ttl),
		etcdlock.WithIdentity(identity),
		etcdlock.WithPrefix("fencelock-demo"),
		etcdlock.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &etcdLocker{Locker: l, client: client}, nil
}

// etcdLocker closes its client after its Locker.
type etcdLocker struct {
	*etcdlock.Locker
	client *clientv3.Client
}

func (l *etcdLocker) Close() error {
	err := l.Locker.Close()
	l.client.Close()
	return err
}

type zkBackend struct {
	servers []string
	ttl     time.Duration
}

func (b *zkBackend) describe() string        { return "ZooKeeper at " + strings.Join(b.servers, ",") }
func (b *zkBackend) ttlName() string         { return "Session timeout" }
func (b *zkBackend) leaseTTL() time.Duration { return b.ttl }
func (b *zkBackend) serverAddrs() []string   { return b.servers }

func (b *zkBackend) locker(ctx context.Context, identity string, proxy *pauseProxy) (lock.Locker, error) {
	opts := []zklock.Option{
		zklock.WithSessionTimeout(b.ttl),
		zklock.WithIdentity(identity),
		zklock.WithRoot("/fencelock-demo"),
	}
	if proxy != nil {
		opts = append(opts, zklock.WithDialer(proxy.Dial))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return zklock.Dial(dctx, b.servers, opts...)
}

func splitHosts(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
