// Command guarded fences writes into the lock service itself: a value
// stored in etcd or ZooKeeper is changed only while the writer's lease still
// holds the lock, in one atomic request.
//
//	guarded --url etcd://127.0.0.1:2379/myapp
//	guarded --url zk://127.0.0.1:2181/myapp
//
// On etcd the write is [etcdlock.GuardedTxn]: a transaction whose condition
// is [etcdlock.Lease.IsHeld], "the lease's record still exists with its own
// create revision". On ZooKeeper it is [zklock.GuardedMulti]: a multi whose
// first operation is [zklock.Lease.CheckOp], "the lease's znode still exists
// with its version". Either way, once the lease has ended the whole write is
// refused, by the writer itself if it already knows, and otherwise by the
// server, whatever the writer believes.
//
// The program plays it out with two workers: A holds the lock and writes;
// A's session then ends on the server (it is revoked, or its znode removed,
// as happens when a paused holder's session expires); B takes the lock and
// writes; A, unaware, writes again and is refused. It exits with status 0
// when the story went that way and 1 otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/examples/internal/exutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "guarded:", err)
		os.Exit(1)
	}
}

// store is a lock service whose own data is written with guarded writes.
type store interface {
	// locker returns a Locker for a worker.
	locker(ctx context.Context, identity string) (lock.Locker, error)
	// write sets the value if lease still holds its lock. When it does
	// not, the error wraps lock.ErrLost or lock.ErrReleased.
	write(ctx context.Context, lease lock.Lease, value string) error
	read(ctx context.Context) (string, error)
	// expire ends lease's session on the server.
	expire(ctx context.Context, lease lock.Lease) error
	close()
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("guarded", flag.ContinueOnError)
	urlFlag := fs.String("url", "", "lock backend URL, etcd://... or zk://... (default $FENCELOCK_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raw, err := exutil.URL(*urlFlag)
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	hosts, err := lock.URLHosts(u)
	if err != nil {
		return err
	}
	prefix, err := lock.URLPath(u)
	if err != nil {
		return err
	}
	if prefix == "" {
		prefix = "fencelock-examples"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	var s store
	switch u.Scheme {
	case "etcd":
		s, err = newEtcdStore(hosts, prefix)
	case "zk":
		s, err = newZKStore(ctx, hosts, prefix)
	default:
		return fmt.Errorf("scheme %q: want etcd or zk", u.Scheme)
	}
	if err != nil {
		return err
	}
	defer s.close()

	lockerA, err := s.locker(ctx, "worker-A")
	if err != nil {
		return err
	}
	defer lockerA.Close()
	lockerB, err := s.locker(ctx, "worker-B")
	if err != nil {
		return err
	}
	defer lockerB.Close()

	const name = "guarded/config"
	leaseA, err := lockerA.Acquire(ctx, name)
	if err != nil {
		return err
	}
	if err := guardedWrite(ctx, out, s, "A", leaseA, "set by A", true); err != nil {
		return err
	}

	if err := s.expire(ctx, leaseA); err != nil {
		return err
	}
	fmt.Fprintln(out, "A's session ends on the server (as when a paused holder's session expires)")

	leaseB, err := lockerB.Acquire(ctx, name)
	if err != nil {
		return err
	}
	if err := guardedWrite(ctx, out, s, "B", leaseB, "set by B", true); err != nil {
		return err
	}
	if err := guardedWrite(ctx, out, s, "A", leaseA, "late write by A", false); err != nil {
		return err
	}
	v, err := s.read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "value = %q\n", v)
	if v != "set by B" {
		return fmt.Errorf("value = %q; want %q", v, "set by B")
	}
	return leaseB.Release(ctx)
}

// guardedWrite writes value under lease and checks the outcome is want.
func guardedWrite(ctx context.Context, out io.Writer, s store, who string, lease lock.Lease, value string, want bool) error {
	err := s.write(ctx, lease, value)
	refused := errors.Is(err, lock.ErrLost) || errors.Is(err, lock.ErrReleased)
	switch {
	case err == nil:
		fmt.Fprintf(out, "%s (token %d) writes %q: applied\n", who, lease.Token(), value)
	case refused:
		fmt.Fprintf(out, "%s (token %d) writes %q: refused: %v\n", who, lease.Token(), value, err)
	default:
		return fmt.Errorf("%s's write: %w", who, err)
	}
	if applied := err == nil; applied != want {
		return fmt.Errorf("%s's write applied = %v; want %v", who, applied, want)
	}
	return nil
}

type etcdStore struct {
	client *clientv3.Client
	prefix string
	key    string
}

func newEtcdStore(endpoints []string, prefix string) (*etcdStore, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdStore{client: client, prefix: prefix, key: prefix + "/data/config"}, nil
}

func (s *etcdStore) locker(_ context.Context, identity string) (lock.Locker, error) {
	return etcdlock.New(s.client, etcdlock.WithPrefix(s.prefix+"/locks"), etcdlock.WithIdentity(identity), etcdlock.WithTTL(5*time.Second))
}

func (s *etcdStore) write(ctx context.Context, lease lock.Lease, value string) error {
	_, err := etcdlock.GuardedTxn(ctx, s.client, lease, clientv3.OpPut(s.key, value))
	return err
}

func (s *etcdStore) read(ctx context.Context) (string, error) {
	resp, err := s.client.Get(ctx, s.key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

// expire revokes the etcd lease behind the lock's session, which is what
// the server does when the session's keepalives stop for a TTL.
func (s *etcdStore) expire(ctx context.Context, lease lock.Lease) error {
	// Find the session lease through the record's key: the lease ID is
	// not on the lock.Lease interface, but the record is attached to it.
	resp, err := s.client.Get(ctx, lease.(*etcdlock.Lease).Key())
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return errors.New("the lease's record is already gone")
	}
	_, err = s.client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

func (s *etcdStore) close() { s.client.Close() }

type zkStore struct {
	conn    *zk.Conn
	servers []string
	root    string
	path    string
}

func newZKStore(ctx context.Context, servers []string, prefix string) (*zkStore, error) {
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	s := &zkStore{conn: conn, servers: servers, root: "/" + prefix}
	for ev := range events {
		if ev.State == zk.StateHasSession {
			break
		}
		if ctx.Err() != nil {
			conn.Close()
			return nil, ctx.Err()
		}
	}
	go func() {
		for range events { // drain, so go-zookeeper never blocks on it
		}
	}()
	s.path = s.root + "/data-config"
	// Create the root and the data znode (persistent) if missing.
	for _, p := range []string{s.root, s.path} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			conn.Close()
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
	}
	return s, nil
}

func (s *zkStore) locker(ctx context.Context, identity string) (lock.Locker, error) {
	return zklock.Dial(ctx, s.servers, zklock.WithRoot(s.root+"/locks"), zklock.WithIdentity(identity), zklock.WithSessionTimeout(5*time.Second))
}

func (s *zkStore) write(ctx context.Context, lease lock.Lease, value string) error {
	_, err := zklock.GuardedMulti(ctx, s.conn, lease, &zk.SetDataRequest{Path: s.path, Data: []byte(value), Version: -1})
	return err
}

func (s *zkStore) read(context.Context) (string, error) {
	b, _, err := s.conn.Get(s.path)
	return string(b), err
}

// expire removes the lease's ephemeral znode, which is what the server does
// when the session that owns it expires.
func (s *zkStore) expire(_ context.Context, lease lock.Lease) error {
	return s.conn.Delete(lease.(*zklock.Lease).Path(), -1)
}

func (s *zkStore) close() { s.conn.Close() }
