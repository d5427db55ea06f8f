package benchtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// role says what a recipe stands for in the comparison.
type role string

const (
	roleFencelock role = "fencelock"
	roleReference role = "reference"
	roleFloor     role = "floor"
	roleNaive     role = "naive herd"
)

// recipe is one way to build a lock on a backend.
type recipe struct {
	name string
	role role
	// dial opens one connection to endpoints with its own session; ctr,
	// when not nil, counts its traffic; ttl is the session TTL or timeout.
	dial func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error)
	// records counts the records queued on name, the holder's included.
	// It is nil for recipes whose waiters write nothing.
	records func(ctx context.Context, name string) (int, error)
	// mixed is set on a fleet of two recipes on one lock, only one of
	// which has tokens (interop_test.go).
	mixed bool
}

// conn is one connection of a recipe.
type conn interface {
	// client returns a lock client on the connection. The leases of two
	// clients exclude each other, whether or not they share a connection.
	client() (client, error)
	close() error
}

type client interface {
	// acquire blocks until name is held (zk.Lock ignores ctx: it has no
	// way to stop waiting) and returns the function that releases it.
	acquire(ctx context.Context, name string) (release func(context.Context) error, err error)
}

// Where each recipe keeps its records, so that they never meet.
const (
	fencelockPrefix = "bench/fencelock/"
	mutexPrefix     = "bench/mutex/"
	floorPrefix     = "bench/floor/"
	naivePrefix     = "bench/naive/"
	fencelockRoot   = "/bench-fencelock"
	zkLockRoot      = "/bench-zklock"
	floorRoot       = "/bench-floor"
	naiveRoot       = "/bench-naive"
)

// fencedClient is a client whose grants carry a fencing token: the
// fencelock recipes'. The reference recipes, the floor and the herd
// baseline have none.
type fencedClient interface {
	client
	// acquireFenced is acquire that also returns the grant's token.
	acquireFenced(ctx context.Context, name string) (fencing.Token, func(context.Context) error, error)
}

// acquireGrant acquires name through cl and returns the grant's token (0
// when the recipe has none) and its release.
func acquireGrant(ctx context.Context, cl client, name string) (fencing.Token, func(context.Context) error, error) {
	if fc, ok := cl.(fencedClient); ok {
		return fc.acquireFenced(ctx, name)
	}
	rel, err := cl.acquire(ctx, name)
	return 0, rel, err
}

// lockerClient adapts a lock.Locker.
type lockerClient struct{ l lock.Locker }

func (c lockerClient) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	_, rel, err := c.acquireFenced(ctx, name)
	return rel, err
}

func (c lockerClient) acquireFenced(ctx context.Context, name string) (fencing.Token, func(context.Context) error, error) {
	le, err := c.l.Acquire(ctx, name)
	if err != nil {
		return 0, nil, err
	}
	return le.Token(), le.Release, nil
}

// ---- etcd ----

// etcdRecipes returns the etcd recipes. admin serves their records
// functions; it may be nil when those are not called.
// etcdlockDial returns the dial of the etcdlock recipe, whose Lockers get
// opts after the recipe's own options.
func etcdlockDial(opts ...etcdlock.Option) func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
	return func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
		cli, err := etcdClient(endpoints, ctr)
		if err != nil {
			return nil, err
		}
		l, err := etcdlock.New(cli, append([]etcdlock.Option{etcdlock.WithPrefix(fencelockPrefix), etcdlock.WithTTL(ttl)}, opts...)...)
		if err != nil {
			cli.Close()
			return nil, err
		}
		return etcdlockConn{cli, l}, nil
	}
}

func etcdRecipes(admin *clientv3.Client) []recipe {
	countPrefix := func(pfx func(name string) (string, error)) func(ctx context.Context, name string) (int, error) {
		return func(ctx context.Context, name string) (int, error) {
			p, err := pfx(name)
			if err != nil {
				return 0, err
			}
			resp, err := admin.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(resp.Count), nil
		}
	}
	// A Locker does no I/O until it is used; this one only names records.
	recordPrefix := func(name string) (string, error) {
		namer, err := etcdlock.New(admin, etcdlock.WithPrefix(fencelockPrefix))
		if err != nil {
			return "", err
		}
		defer namer.Close()
		return testutil.RecordPrefix(namer, name)
	}
	return []recipe{
		{
			name:    "etcdlock",
			role:    roleFencelock,
			dial:    etcdlockDial(),
			records: countPrefix(recordPrefix),
		},
		{
			name: "concurrency.Mutex",
			role: roleReference,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				cli, err := etcdClient(endpoints, ctr)
				if err != nil {
					return nil, err
				}
				return &mutexConn{cli: cli, ttl: ttl}, nil
			},
			records: countPrefix(func(name string) (string, error) { return mutexPrefix + name + "/", nil }),
		},
		{
			name: "put+delete",
			role: roleFloor,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				cli, err := etcdClient(endpoints, ctr)
				if err != nil {
					return nil, err
				}
				return etcdFloorConn{cli}, nil
			},
		},
		{
			name: "watch-the-holder",
			role: roleNaive,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				cli, err := etcdClient(endpoints, ctr)
				if err != nil {
					return nil, err
				}
				return etcdNaiveConn{cli}, nil
			},
		},
	}
}

func etcdClient(endpoints []string, ctr *counters) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: etcdDialOptions(ctr),
	})
}

type etcdlockConn struct {
	cli *clientv3.Client
	l   *etcdlock.Locker
}

func (c etcdlockConn) client() (client, error) { return lockerClient{c.l}, nil }
func (c etcdlockConn) close() error            { return errors.Join(c.l.Close(), c.cli.Close()) }

// mutexConn gives every client its own session: two concurrency.Mutex on
// one session would both hold the lock.
type mutexConn struct {
	cli *clientv3.Client
	ttl time.Duration

	mu       sync.Mutex
	sessions []*concurrency.Session
}

func (c *mutexConn) client() (client, error) {
	s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(int(c.ttl/time.Second)))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.sessions = append(c.sessions, s)
	c.mu.Unlock()
	return mutexClient{s}, nil
}

func (c *mutexConn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.sessions {
		errs = append(errs, s.Close())
	}
	c.sessions = nil
	return errors.Join(append(errs, c.cli.Close())...)
}

type mutexClient struct{ s *concurrency.Session }

func (c mutexClient) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(c.s, mutexPrefix+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// etcdFloorConn is the least any lock on etcd costs: one write to take it,
// one to give it back. It does not exclude anyone.
type etcdFloorConn struct{ cli *clientv3.Client }

func (c etcdFloorConn) client() (client, error) { return c, nil }
func (c etcdFloorConn) close() error            { return c.cli.Close() }

func (c etcdFloorConn) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	key := floorPrefix + name
	if _, err := c.cli.Put(ctx, key, "x"); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := c.cli.Delete(ctx, key)
		return err
	}, nil
}

// etcdNaiveConn is the herd design: one key per lock, created if absent;
// every waiter watches that key and, when it is deleted, all of them try
// again. It has no session (a crashed holder blocks the lock): it is only
// a baseline for the herd check.
type etcdNaiveConn struct{ cli *clientv3.Client }

func (c etcdNaiveConn) client() (client, error) { return c, nil }
func (c etcdNaiveConn) close() error            { return c.cli.Close() }

func (c etcdNaiveConn) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	key := naivePrefix + name
	for {
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "x")).
			Commit()
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			rev := resp.Header.Revision
			return func(ctx context.Context) error {
				_, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
				return err
			}, nil
		}
		if err := c.waitDelete(ctx, key, resp.Header.Revision+1); err != nil {
			return nil, err
		}
	}
}

func (c etcdNaiveConn) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range c.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	return ctx.Err()
}

// ---- ZooKeeper ----

var zkACL = zk.WorldACL(zk.PermAll)

// zkRecipes returns the ZooKeeper recipes. admin serves their records
// functions; it may be nil when those are not called.
// zklockDial returns the dial of the zklock recipe, whose Lockers get opts
// after the recipe's own options.
func zklockDial(opts ...zklock.Option) func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
	return func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := zklock.Dial(ctx, endpoints, append([]zklock.Option{zklock.WithRoot(fencelockRoot), zklock.WithSessionTimeout(ttl), zklock.WithDialer(zkDialer(ctr))}, opts...)...)
		if err != nil {
			return nil, err
		}
		return zklockConn{l}, nil
	}
}

func zkRecipes(admin *zk.Conn) []recipe {
	countChildren := func(root string) func(ctx context.Context, name string) (int, error) {
		return func(ctx context.Context, name string) (int, error) {
			kids, _, err := admin.Children(root + "/" + name)
			if errors.Is(err, zk.ErrNoNode) {
				return 0, nil
			}
			return len(kids), err
		}
	}
	return []recipe{
		{
			name:    "zklock",
			role:    roleFencelock,
			dial:    zklockDial(),
			records: countChildren(fencelockRoot),
		},
		{
			name: "zk.Lock",
			role: roleReference,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				c, err := zkConnect(endpoints, ttl, ctr)
				if err != nil {
					return nil, err
				}
				return zkLockConn{c}, nil
			},
			records: countChildren(zkLockRoot),
		},
		{
			name: "create+delete",
			role: roleFloor,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				c, err := zkConnect(endpoints, ttl, ctr)
				if err != nil {
					return nil, err
				}
				return zkFloorConn{c}, nil
			},
		},
		{
			name: "watch-the-holder",
			role: roleNaive,
			dial: func(endpoints []string, ctr *counters, ttl time.Duration) (conn, error) {
				c, err := zkConnect(endpoints, ttl, ctr)
				if err != nil {
					return nil, err
				}
				return zkNaiveConn{c}, nil
			},
		},
	}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// zkConnect opens a go-zookeeper connection and waits for its session.
func zkConnect(servers []string, ttl time.Duration, ctr *counters) (*zk.Conn, error) {
	c, _, err := zk.Connect(servers, ttl, zk.WithDialer(zkDialer(ctr)), zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("zk.Connect(%v): no session after 30s", servers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, nil
}

// zkCreateParents creates path and its ancestors as persistent znodes.
func zkCreateParents(c *zk.Conn, path string) error {
	p := ""
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + seg
		if _, err := c.Create(p, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

type zklockConn struct{ l *zklock.Locker }

func (c zklockConn) client() (client, error) { return lockerClient{c.l}, nil }
func (c zklockConn) close() error            { return c.l.Close() }

type zkLockConn struct{ c *zk.Conn }

func (c zkLockConn) client() (client, error) { return c, nil }
func (c zkLockConn) close() error            { c.c.Close(); return nil }

func (c zkLockConn) acquire(_ context.Context, name string) (func(context.Context) error, error) {
	lk := zk.NewLock(c.c, zkLockRoot+"/"+name, zkACL)
	if err := lk.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return lk.Unlock() }, nil
}

// zkFloorConn is the least any lock on ZooKeeper costs: create an
// ephemeral sequential znode, delete it. It does not exclude anyone.
type zkFloorConn struct{ c *zk.Conn }

func (c zkFloorConn) client() (client, error) { return c, nil }
func (c zkFloorConn) close() error            { c.c.Close(); return nil }

func (c zkFloorConn) acquire(_ context.Context, name string) (func(context.Context) error, error) {
	parent := floorRoot + "/" + name
	p, err := c.c.Create(parent+"/n-", nil, zk.FlagEphemeralSequential, zkACL)
	if errors.Is(err, zk.ErrNoNode) {
		if err := zkCreateParents(c.c, parent); err != nil {
			return nil, err
		}
		p, err = c.c.Create(parent+"/n-", nil, zk.FlagEphemeralSequential, zkACL)
	}
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return c.c.Delete(p, -1) }, nil
}

// zkNaiveConn is the herd design on ZooKeeper: one ephemeral znode per
// lock; every waiter watches it and all of them try again when it goes.
type zkNaiveConn struct{ c *zk.Conn }

func (c zkNaiveConn) client() (client, error) { return c, nil }
func (c zkNaiveConn) close() error            { c.c.Close(); return nil }

func (c zkNaiveConn) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	parent := naiveRoot + "/" + name
	path := parent + "/lock"
	for {
		_, err := c.c.Create(path, nil, zk.FlagEphemeral, zkACL)
		switch {
		case err == nil:
			return func(context.Context) error { return c.c.Delete(path, -1) }, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := zkCreateParents(c.c, parent); err != nil {
				return nil, err
			}
			continue
		case !errors.Is(err, zk.ErrNodeExists):
			return nil, err
		}
		ok, _, ch, err := c.c.ExistsW(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		select {
		case ev := <-ch:
			if ev.Err != nil {
				return nil, ev.Err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
