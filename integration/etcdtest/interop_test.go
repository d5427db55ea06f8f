package etcdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// The interop tests run Lockers with etcdlock.LayoutConcurrency against
// the real recipes of etcd's concurrency package, and etcdctl lock, on one
// lock name (issue 33).

const (
	interopGrants = 500
	interopHold   = 200 * time.Microsecond
	recipeTTL     = 2 // seconds: the recipes' session TTL
)

// lockerClient is a Locker of a mixed fleet.
type lockerClient struct {
	name, lock string
	l          *etcdlock.Locker
	le         lock.Lease
}

func (c *lockerClient) Name() string { return c.name }

func (c *lockerClient) Lock(ctx context.Context) (int64, error) {
	le, err := c.l.Acquire(ctx, c.lock)
	if err != nil {
		return 0, err
	}
	c.le = le
	return int64(le.Token()), nil
}

func (c *lockerClient) Unlock(ctx context.Context) error { return c.le.Release(ctx) }

// mutexClient is a concurrency.Mutex on a session of its own.
type mutexClient struct {
	name   string
	client *clientv3.Client
	m      *concurrency.Mutex
}

func (c *mutexClient) Name() string { return c.name }

func (c *mutexClient) Lock(ctx context.Context) (int64, error) {
	if err := c.m.Lock(ctx); err != nil {
		return 0, err
	}
	return createRevision(ctx, c.client, c.m.Key())
}

func (c *mutexClient) Unlock(ctx context.Context) error { return c.m.Unlock(ctx) }

// electionClient campaigns with concurrency.Election and resigns.
type electionClient struct {
	name string
	e    *concurrency.Election
}

func (c *electionClient) Name() string { return c.name }

func (c *electionClient) Lock(ctx context.Context) (int64, error) {
	if err := c.e.Campaign(ctx, c.name); err != nil {
		return 0, err
	}
	return c.e.Rev(), nil // the create revision of its key
}

func (c *electionClient) Unlock(ctx context.Context) error { return c.e.Resign(ctx) }

// etcdctlClient runs "etcdctl lock" once per grant: it holds from the
// key's printing until it is sent SIGTERM, on which it unlocks and exits.
type etcdctlClient struct {
	name, bin, lock string
	endpoints       []string
	cmd             *exec.Cmd
	stderr          bytes.Buffer
	key             string // of its grant
}

func (c *etcdctlClient) Name() string { return c.name }

func (c *etcdctlClient) Lock(ctx context.Context) (int64, error) {
	c.stderr.Reset()
	c.cmd = exec.CommandContext(ctx, c.bin, "--endpoints="+strings.Join(c.endpoints, ","), "-w", "json",
		"lock", fmt.Sprintf("--ttl=%d", recipeTTL), c.lock)
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := c.cmd.Start(); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	var got struct {
		Kvs []struct {
			Key            []byte `json:"key"`
			CreateRevision int64  `json:"create_revision"`
		} `json:"kvs"`
	}
	if err == nil {
		err = json.Unmarshal(line, &got)
	}
	if err != nil || len(got.Kvs) != 1 || !strings.HasPrefix(string(got.Kvs[0].Key), c.lock+"/") {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return 0, fmt.Errorf("etcdctl lock printed %q (%v), stderr %q", line, err, c.stderr.String())
	}
	c.key = string(got.Kvs[0].Key)
	return got.Kvs[0].CreateRevision, nil
}

func (c *etcdctlClient) Unlock(ctx context.Context) error {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("etcdctl lock: %w, stderr %q", err, c.stderr.String())
	}
	return nil
}

// createRevision reads the create revision of key, which must exist.
func createRevision(ctx context.Context, client *clientv3.Client, key string) (int64, error) {
	resp, err := client.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("key %q is gone", key)
	}
	return resp.Kvs[0].CreateRevision, nil
}

// gatedClient returns a client of endpoints that connects through g.
func gatedClient(t *testing.T, endpoints []string, g *testutil.Gate) *clientv3.Client {
	return testutil.EtcdClient(t, clientv3.Config{
		Endpoints:            endpoints,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return g.Dial(ctx, "tcp", addr)
		})},
	})
}

// recipeSession returns a concurrency session on its own client, closed
// (its lease revoked) in t.Cleanup.
func recipeSession(t *testing.T, client *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(client, concurrency.WithTTL(recipeTTL))
	if err != nil {
		t.Fatalf("concurrency.NewSession() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// interopLockers returns n Lockers of name under prefix, each on a client
// of its own, with LayoutConcurrency unless opts say otherwise.
func interopLockers(t *testing.T, endpoints []string, prefix, name string, n int, opts ...etcdlock.Option) []fleet.Contender {
	var cs []fleet.Contender
	for i := range n {
		o := append([]etcdlock.Option{etcdlock.WithPrefix(prefix), etcdlock.WithLayout(etcdlock.LayoutConcurrency),
			etcdlock.WithIdentity(fmt.Sprint("locker-", i))}, opts...)
		l := newLocker(t, newClient(t, endpoints), o...)
		cs = append(cs, &lockerClient{name: fmt.Sprint("locker-", i), lock: name, l: l})
	}
	return cs
}

// closeAll closes the Lockers and recipe sessions of cs now, so that the
// records they leave, if any, can be looked for.
func closeAll(t *testing.T, cs []fleet.Contender, sessions []*concurrency.Session) {
	for _, c := range cs {
		if lc, ok := c.(*lockerClient); ok {
			if err := lc.l.Close(); err != nil {
				t.Errorf("Close() of %s = %v", lc.name, err)
			}
		}
	}
	for _, s := range sessions {
		if err := s.Close(); err != nil {
			t.Errorf("closing a concurrency session = %v", err)
		}
	}
}

// noKeysLeft fails t if any key starts with pfx.
func noKeysLeft(t *testing.T, admin *clientv3.Client, pfx string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("key %q left behind after every client closed", kv.Key)
	}
}

// runRecipeFleet runs 4 Lockers and the 4 recipe clients of newRecipe,
// each on a session of its own, on /interop/<name>, checks the run, and
// that no key is left once everyone closed.
func runRecipeFleet(t *testing.T, name string, newRecipe func(s *concurrency.Session, pfx string, i int) fleet.Contender) {
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	cs := interopLockers(t, c.Endpoints(), "/interop", name, 4)
	var sessions []*concurrency.Session
	for i := range 4 {
		s := recipeSession(t, newClient(t, c.Endpoints()))
		sessions = append(sessions, s)
		cs = append(cs, newRecipe(s, "/interop/"+name, i))
	}
	r := fleet.Run(t, cs, fleet.Config{Grants: interopGrants, Hold: interopHold, Timeout: time.Minute})
	fleet.Check(t, r, interopGrants)
	closeAll(t, cs, sessions)
	noKeysLeft(t, admin, "/interop/")
}

func TestInteropMutex(t *testing.T) {
	runRecipeFleet(t, "jobs", func(s *concurrency.Session, pfx string, i int) fleet.Contender {
		return &mutexClient{name: fmt.Sprint("mutex-", i), client: s.Client(), m: concurrency.NewMutex(s, pfx)}
	})
}

func TestInteropElection(t *testing.T) {
	runRecipeFleet(t, "leader", func(s *concurrency.Session, pfx string, i int) fleet.Contender {
		return &electionClient{name: fmt.Sprint("election-", i), e: concurrency.NewElection(s, pfx)}
	})
}

// etcdctlBinary returns the etcdctl "make deps" builds; without it the
// test fails under CI=true and is skipped otherwise.
func etcdctlBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", ".cache", "bin", "etcdctl"))
	if p := os.Getenv("FENCELOCK_ETCDCTL_BIN"); p != "" {
		bin, err = p, nil
	}
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		cluster.Unavailable(t, "etcdctl not found (run \"make deps\" or set FENCELOCK_ETCDCTL_BIN): %v", err)
	}
	return bin
}

// TestInteropEtcdctl contends with "etcdctl lock jobs", whose keys are
// "jobs/<lease>": the Lockers' prefix is empty.
func TestInteropEtcdctl(t *testing.T) {
	bin := etcdctlBinary(t)
	c := startCluster(t)
	admin := newClient(t, c.Endpoints())
	cs := interopLockers(t, c.Endpoints(), "", "jobs", 4)
	for i := range 4 {
		cs = append(cs, &etcdctlClient{name: fmt.Sprint("etcdctl-", i), bin: bin, lock: "jobs", endpoints: c.Endpoints()})
	}
	r := fleet.Run(t, cs, fleet.Config{Grants: interopGrants, Hold: interopHold, Timeout: time.Minute})
	fleet.Check(t, r, interopGrants)
	closeAll(t, cs, nil)
	noKeysLeft(t, admin, "jobs/")
	noKeysLeft(t, admin, "#")
}

// TestInteropControl is the control run: Lockers with the default layout
// do not see Mutex's records, and the fleet overlaps.
func TestInteropControl(t *testing.T) {
	c := startCluster(t)
	cs := interopLockers(t, c.Endpoints(), "/interop", "jobs", 4, etcdlock.WithLayout(etcdlock.LayoutFencelock))
	for i := range 4 {
		s := recipeSession(t, newClient(t, c.Endpoints()))
		cs = append(cs, &mutexClient{name: fmt.Sprint("mutex-", i), client: s.Client(), m: concurrency.NewMutex(s, "/interop/jobs")})
	}
	r := fleet.Run(t, cs, fleet.Config{Grants: 200, Hold: time.Millisecond, Timeout: time.Minute})
	t.Logf("control fleet, layout off: %v", r)
	if r.Overlaps == 0 || len(r.Errors) > 0 {
		t.Errorf("control fleet with the default layout: %d overlaps, errors %v; want overlaps and no error", r.Overlaps, r.Errors)
	}
}

// TestInteropForeignHolder checks what a Locker sees of the recipes'
// records: Holder, Queue and Observe report them (the identity is the
// key's value: empty for a Mutex, the proposal for an Election), tokens
// are their keys' create revisions, and Revoke deletes a Mutex's key.
func TestInteropForeignHolder(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ls := interopLockers(t, c.Endpoints(), "/interop", "jobs", 2)
	l, waiter := ls[0].(*lockerClient).l, ls[1].(*lockerClient)
	mutex := concurrency.NewMutex(recipeSession(t, newClient(t, c.Endpoints())), "/interop/jobs")
	if err := mutex.Lock(ctx); err != nil {
		t.Fatalf("Mutex.Lock() = %v", err)
	}
	admin := newClient(t, c.Endpoints())
	rev, err := createRevision(ctx, admin, mutex.Key())
	if err != nil {
		t.Fatal(err)
	}
	observed, _, err := l.Observe(ctx, "jobs")
	if err != nil {
		t.Fatalf("Observe() = %v", err)
	}
	wantHolder(t, <-observed, lock.Holder{Token: fencingToken(rev)}, "observed first")
	h, err := l.Holder(ctx, "jobs")
	wantHolder(t, h, lock.Holder{Token: fencingToken(rev)}, fmt.Sprintf("Holder() (err %v)", err))

	granted := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx)
		granted <- err
	}()
	election := concurrency.NewElection(recipeSession(t, newClient(t, c.Endpoints())), "/interop/jobs")
	leader := make(chan error, 1)
	waitQueue(t, ctx, l, "jobs", 2)
	go func() { leader <- election.Campaign(ctx, "candidate") }()
	q := waitQueue(t, ctx, l, "jobs", 3)
	if !q[0].Held || q[1].Held || q[2].Held || q[0].Holder.Token != fencingToken(rev) ||
		q[1].Holder.Identity != "locker-1" || q[2].Holder.Identity != "candidate" {
		t.Errorf("Queue() = %+v; want the Mutex holding, then locker-1 and the candidate waiting", q)
	}

	if err := l.Revoke(ctx, "jobs", fencingToken(rev)); err != nil {
		t.Fatalf("Revoke(the Mutex's token %d) = %v", rev, err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiting Locker after the Revoke: %v", err)
	}
	if _, err := createRevision(ctx, admin, mutex.Key()); err == nil {
		t.Errorf("the Mutex's key %q is still there after its Revoke", mutex.Key())
	}
	wantHolder(t, <-observed, lock.Holder{Identity: "locker-1", Token: waiter.le.Token()}, "observed after the Revoke")
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-leader; err != nil {
		t.Fatalf("Campaign() = %v", err)
	}
	wantHolder(t, <-observed, lock.Holder{Identity: "candidate", Token: fencingToken(election.Rev())}, "observed after the release")
	h, err = l.Holder(ctx, "jobs")
	wantHolder(t, h, lock.Holder{Identity: "candidate", Token: fencingToken(election.Rev())}, fmt.Sprintf("Holder() (err %v)", err))
	if err := election.Resign(ctx); err != nil {
		t.Fatalf("Resign() = %v", err)
	}
}

func fencingToken(rev int64) fencing.Token { return fencing.Token(rev) }

func wantHolder(t *testing.T, got, want lock.Holder, what string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %+v; want %+v", what, got, want)
	}
}

// waitQueue waits until l's Queue of name has n entries, and returns it.
func waitQueue(t *testing.T, ctx context.Context, l *etcdlock.Locker, name string, n int) []lock.QueueEntry {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		q, err := l.Queue(ctx, name)
		if err == nil && len(q) == n {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("Queue(%q) = %+v, %v after 10s; want %d entries", name, q, err, n)
		}
	}
}

// deletions returns the keys under pfx that the server deletes from now
// on, each with the revision of its deletion, as a watch of another
// client sees them.
func deletions(t *testing.T, ctx context.Context, admin *clientv3.Client, pfx string) <-chan *clientv3.Event {
	t.Helper()
	wch := admin.Watch(ctx, pfx, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch of %q not created: %v", pfx, wr.Err())
	}
	ch := make(chan *clientv3.Event, 16)
	go func() {
		defer close(ch)
		for wr := range wch {
			for _, ev := range wr.Events {
				ch <- ev
			}
		}
	}()
	return ch
}

// deletedBy waits for the server's deletion of key among dels.
func deletedBy(t *testing.T, dels <-chan *clientv3.Event, key string) int64 {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-dels:
			if string(ev.Kv.Key) == key {
				return ev.Kv.ModRevision
			}
		case <-timeout:
			t.Fatalf("the watch saw no deletion of %q", key)
		}
	}
}

// TestInteropPartition cuts a holder off from the cluster, or kills it:
// the lock goes to a waiter of the other kind only once the server
// deleted the holder's key, when its session lease expired, and a
// Locker's lease ends (Done) before that.
func TestInteropPartition(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := newClient(t, c.Endpoints())
	dels := deletions(t, ctx, admin, "/interop/")
	t.Run("mutex-holder-cut", func(t *testing.T) {
		g := new(testutil.Gate)
		s := recipeSession(t, gatedClient(t, c.Endpoints(), g))
		t.Cleanup(g.Heal)
		mutex := concurrency.NewMutex(s, "/interop/a")
		if err := mutex.Lock(ctx); err != nil {
			t.Fatalf("Mutex.Lock() = %v", err)
		}
		waiter := interopLockers(t, c.Endpoints(), "/interop", "a", 1)[0].(*lockerClient)
		granted := make(chan error, 1)
		go func() {
			_, err := waiter.Lock(ctx)
			granted <- err
		}()
		waitQueue(t, ctx, waiter.l, "a", 2)
		g.Cut()
		cut := time.Now()
		if err := <-granted; err != nil {
			t.Fatalf("the waiting Locker = %v", err)
		}
		t.Logf("the Locker was granted %v after the Mutex holder was cut off", time.Since(cut).Round(time.Millisecond))
		if _, err := createRevision(ctx, admin, mutex.Key()); err == nil {
			t.Fatalf("the Locker was granted while the cut-off Mutex's key %q still existed", mutex.Key())
		}
		deletedBy(t, dels, mutex.Key())
		if ttl, err := admin.TimeToLive(ctx, s.Lease()); err != nil || ttl.TTL != -1 {
			t.Errorf("TimeToLive of the Mutex's lease = %v, %v; want it expired (-1): the fault did not happen", ttl, err)
		}
		mustReleaseLease(t, ctx, waiter.le)
	})
	t.Run("etcdctl-holder-killed", func(t *testing.T) {
		holder := &etcdctlClient{name: "etcdctl", bin: etcdctlBinary(t), lock: "/interop/c", endpoints: c.Endpoints()}
		tok, err := holder.Lock(ctx)
		if err != nil {
			t.Fatalf("etcdctl lock: %v", err)
		}
		key := holder.key
		waiter := interopLockers(t, c.Endpoints(), "/interop", "c", 1)[0].(*lockerClient)
		granted := make(chan error, 1)
		go func() {
			_, err := waiter.Lock(ctx)
			granted <- err
		}()
		if q := waitQueue(t, ctx, waiter.l, "c", 2); q[0].Holder != (lock.Holder{Token: fencingToken(tok)}) {
			t.Errorf("Queue()[0] = %+v; want the etcdctl holder, no identity, token %d", q[0], tok)
		}
		if err := holder.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := holder.cmd.Wait(); err == nil {
			t.Errorf("etcdctl lock exited cleanly; want it killed")
		}
		killed := time.Now()
		if err := <-granted; err != nil {
			t.Fatalf("the waiting Locker = %v", err)
		}
		t.Logf("the Locker was granted %v after the etcdctl holder was killed", time.Since(killed).Round(time.Millisecond))
		if _, err := createRevision(ctx, admin, key); err == nil {
			t.Fatalf("the Locker was granted while the killed etcdctl's key %q still existed", key)
		}
		deletedBy(t, dels, key)
		mustReleaseLease(t, ctx, waiter.le)
	})
	t.Run("locker-holder-cut", func(t *testing.T) {
		g := new(testutil.Gate)
		l := newLocker(t, gatedClient(t, c.Endpoints(), g), etcdlock.WithPrefix("/interop"), etcdlock.WithLayout(etcdlock.LayoutConcurrency))
		t.Cleanup(g.Heal)
		le, err := l.Acquire(ctx, "b")
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		key := le.(*etcdlock.Lease).Key()
		mutex := concurrency.NewMutex(recipeSession(t, newClient(t, c.Endpoints())), "/interop/b")
		granted := make(chan error, 1)
		go func() { granted <- mutex.Lock(ctx) }()
		waitQueue(t, ctx, l, "b", 2)
		g.Cut()
		cut := time.Now()
		if err := <-granted; err != nil {
			t.Fatalf("Mutex.Lock() = %v", err)
		}
		t.Logf("the Mutex was granted %v after the Locker holder was cut off", time.Since(cut).Round(time.Millisecond))
		select {
		case <-le.Done():
		default:
			t.Errorf("the Mutex was granted while the cut-off Locker's lease was not yet Done")
		}
		if _, err := createRevision(ctx, admin, key); err == nil {
			t.Errorf("the Mutex was granted while the cut-off Locker's key %q still existed", key)
		}
		deletedBy(t, dels, key)
		if !errors.Is(le.Err(), lock.ErrLost) {
			t.Errorf("Err() of the cut-off lease = %v; want lock.ErrLost", le.Err())
		}
		if err := mutex.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInteropExample runs the calls of etcdlock's
// Example_fromConcurrencyMutex against a cluster, and checks what it
// prints.
func TestInteropExample(t *testing.T) {
	c := startCluster(t)
	client := newClient(t, c.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder

	session, err := concurrency.NewSession(client)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	old := concurrency.NewMutex(session, "/myapp/locks/jobs/nightly")
	if err := old.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	locker, err := etcdlock.New(client, etcdlock.WithPrefix("/myapp/locks"), etcdlock.WithLayout(etcdlock.LayoutConcurrency))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	h, err := locker.Holder(ctx, "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "held by a Mutex (identity %q)\n", h.Identity)
	if _, err := locker.TryAcquire(ctx, "jobs/nightly"); errors.Is(err, lock.ErrLocked) {
		fmt.Fprintln(&out, "TryAcquire: locked")
	}
	if err := old.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := locker.Acquire(ctx, "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Fprintln(&out, "acquired after the Mutex, with a greater token:", l.Token() > h.Token)

	want := "held by a Mutex (identity \"\")\nTryAcquire: locked\nacquired after the Mutex, with a greater token: true\n"
	if out.String() != want {
		t.Errorf("the example printed\n%s\nwant\n%s", out.String(), want)
	}
}
