package guardtest

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// revokeEnv is what TestRevokeFencedWrites needs of a backend: Lockers
// (the holder's through proxies that can cut it off), and a guarded
// write of the backend's own kind, sent on the test's direct connection
// so that it reaches the servers while the holder's Locker is cut off.
type revokeEnv struct {
	holder, waiter, admin lock.Locker
	proxies               *cluster.Proxies
	// guarded writes value to the backend's data item under lease's
	// guard; read returns the item's value.
	guarded func(ctx context.Context, lease lock.Lease, value string) error
	read    func(ctx context.Context) string
}

// TestRevokeFencedWrites revokes a holder whose Locker is cut off from
// the cluster (so it cannot hear of the revocation, as a frozen process
// could not) and checks that its later writes are refused by the
// backend's guarded write (etcdlock.GuardedTxn, zklock.GuardedMulti),
// refused by the servers while its lease still looks held locally, and
// by sqlfence on SQLite once the next holder has written; the next
// holder's writes land, and the holder's lease ends with ErrLost once it
// is reconnected.
func TestRevokeFencedWrites(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		c := cluster.FromEnv(t).Start(t, cluster.Etcd)
		cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
		proxies := cluster.NewProxies(t, c)
		cliH := testutil.EtcdClient(t, clientv3.Config{Endpoints: proxies.Endpoints()})
		key := "guardtest/data/" + testutil.UniqueName(t)
		testRevokeFencedWrites(t, revokeEnv{
			holder: newEtcdLocker(t, cliH, "holder"), waiter: newEtcdLocker(t, cli, "waiter"), admin: newEtcdLocker(t, cli, "admin"),
			proxies: proxies,
			guarded: func(ctx context.Context, lease lock.Lease, value string) error {
				_, err := etcdlock.GuardedTxn(ctx, cli, lease, clientv3.OpPut(key, value))
				return err
			},
			read: func(ctx context.Context) string {
				resp, err := cli.Get(ctx, key)
				if err != nil {
					t.Fatalf("Get(%s) = %v", key, err)
				}
				if len(resp.Kvs) == 0 {
					return ""
				}
				return string(resp.Kvs[0].Value)
			},
		})
	})
	t.Run("zookeeper", func(t *testing.T) {
		c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
		conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
		root := zkRoot(t, conn)
		data := root + "/data"
		if _, err := conn.Create(data, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("Create(%s) = %v", data, err)
		}
		proxies := cluster.NewProxies(t, c)
		testRevokeFencedWrites(t, revokeEnv{
			holder:  newZKLocker(t, proxies.Endpoints(), root+"/locks", "holder"),
			waiter:  newZKLocker(t, c.Endpoints(), root+"/locks", "waiter"),
			admin:   newZKLocker(t, c.Endpoints(), root+"/locks", "admin"),
			proxies: proxies,
			guarded: func(ctx context.Context, lease lock.Lease, value string) error {
				_, err := zklock.GuardedMulti(ctx, conn, lease, &zk.SetDataRequest{Path: data, Data: []byte(value), Version: -1})
				return err
			},
			read: func(ctx context.Context) string {
				b, _, err := conn.Get(data)
				if err != nil {
					t.Fatalf("Get(%s) = %v", data, err)
				}
				return string(b)
			},
		})
	})
}

func testRevokeFencedWrites(t *testing.T, env revokeEnv) {
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	rv, ok := env.admin.(lock.Revoker)
	if !ok {
		t.Fatalf("%T is not a lock.Revoker", env.admin)
	}
	store, db := newSQLiteStore(t)
	sqlWrite := func(tok fencing.Token, value string) error {
		return store.Apply(ctx, name, tok, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO data (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", name, value)
			return err
		})
	}
	sqlRead := func() string {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT v FROM data WHERE k = ?", name).Scan(&v); err != nil {
			t.Fatalf("reading the SQLite row: %v", err)
		}
		return v
	}

	old, err := env.holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("holder's Acquire() = %v", err)
	}
	if err := env.guarded(ctx, old, "holder"); err != nil {
		t.Fatalf("holder's guarded write while it holds = %v; want nil", err)
	}
	if err := sqlWrite(old.Token(), "holder"); err != nil {
		t.Fatalf("holder's sqlfence write while it holds = %v; want nil", err)
	}
	got := make(chan lock.Lease, 1)
	go func() {
		le, err := env.waiter.Acquire(ctx, name)
		if err != nil {
			t.Errorf("waiter's Acquire() = %v", err)
		}
		got <- le
	}()
	waitQueued(t, env.admin, name, 2)

	// The holder's Locker cannot hear of what follows.
	env.proxies.Blackhole()
	t.Cleanup(env.proxies.Heal)
	if err := rv.Revoke(ctx, name, old.Token()); err != nil {
		t.Fatalf("Revoke(%d) = %v; want nil", old.Token(), err)
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}

	// Still believing it holds, the holder writes: the servers refuse.
	if err := old.Err(); err != nil {
		t.Fatalf("cut-off holder's Err() right after the revocation = %v; want nil (the refusal below must come from the servers)", err)
	}
	if err := env.guarded(ctx, old, "holder, late"); !errors.Is(err, lock.ErrLost) {
		t.Errorf("revoked holder's guarded write (lease not yet ended locally) = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if v := env.read(ctx); v != "holder" {
		t.Errorf("data after the revoked holder's guarded write = %q; want %q (unchanged)", v, "holder")
	}

	// The next holder writes; then the revoked holder's writes come.
	if err := env.guarded(ctx, next, "waiter"); err != nil {
		t.Fatalf("next holder's guarded write = %v; want nil", err)
	}
	if err := sqlWrite(next.Token(), "waiter"); err != nil {
		t.Fatalf("next holder's sqlfence write = %v; want nil", err)
	}
	err = sqlWrite(old.Token(), "holder, late")
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, fencing.ErrStaleToken) || stale.Token != old.Token() || stale.Highest != next.Token() {
		t.Errorf("revoked holder's sqlfence write = %v; want a *StaleTokenError with Token %d and Highest %d", err, old.Token(), next.Token())
	}
	if err := env.guarded(ctx, old, "holder, later"); !errors.Is(err, lock.ErrLost) {
		t.Errorf("revoked holder's guarded write after the next holder's = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if v := sqlRead(); v != "waiter" {
		t.Errorf("SQLite row = %q; want the next holder's %q", v, "waiter")
	}
	if v := env.read(ctx); v != "waiter" {
		t.Errorf("data = %q; want the next holder's %q", v, "waiter")
	}

	// Reconnected, the holder hears of it; its writes are then refused
	// before they are sent.
	env.proxies.Heal()
	select {
	case <-old.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("revoked lease's Done() not closed within 30s of reconnecting")
	}
	if err := old.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("revoked lease's Err() = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	t.Logf("revoked lease ended: %v", old.Err())
	if err := env.guarded(ctx, old, "holder, after Done"); !errors.Is(err, lock.ErrLost) {
		t.Errorf("revoked holder's guarded write after Done = %v; want an error wrapping %v", err, lock.ErrLost)
	}
	if v := env.read(ctx); v != "waiter" {
		t.Errorf("data at the end = %q; want the next holder's %q", v, "waiter")
	}
	if err := next.Release(ctx); err != nil {
		t.Errorf("Release() of the next holder = %v", err)
	}
}

// newSQLiteStore opens a fresh SQLite database with a sqlfence token
// table and a data table (k, v).
func newSQLiteStore(t *testing.T) (*sqlfence.Store, *sql.DB) {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "guard.db") + "?_pragma=busy_timeout(20000)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("sql.Open(sqlite) = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := sqlfence.New(db, sqlfence.SQLite)
	if err != nil {
		t.Fatalf("sqlfence.New() = %v", err)
	}
	ctx := testutil.Context(t, 10*time.Second)
	if err := store.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE data (k TEXT PRIMARY KEY, v TEXT NOT NULL)"); err != nil {
		t.Fatalf("creating the data table: %v", err)
	}
	return store, db
}
