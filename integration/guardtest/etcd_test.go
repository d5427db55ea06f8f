package guardtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// etcdTTL is the session TTL of the test Lockers. Sessions here end by
// revocation, never by waiting, so it only needs to be valid.
const etcdTTL = 2 * time.Second

func newEtcdLocker(t *testing.T, client *clientv3.Client, identity string) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(client, etcdlock.WithTTL(etcdTTL), etcdlock.WithIdentity(identity), etcdlock.WithPrefix("guardtest/locks"))
	if err != nil {
		t.Fatalf("etcdlock.New() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// revokeSession ends l's session on the server, as its expiry would, and
// checks that lease's record is gone.
func revokeSession(ctx context.Context, t *testing.T, client *clientv3.Client, l *etcdlock.Locker, lease lock.Lease) {
	t.Helper()
	id, ok := testutil.SessionLeaseID(l)
	if !ok {
		t.Fatalf("SessionLeaseID() = _, false; want the live session of a held lease")
	}
	if _, err := client.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke(%x) = %v", int64(id), err)
	}
	key := lease.(*etcdlock.Lease).Key()
	resp, err := client.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("Get(%q) after revoking the session = %v, %v; want no key", key, resp, err)
	}
}

func TestGuardEtcd(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.Etcd)
	t.Run("GuardedWhileHeld", func(t *testing.T) { testEtcdGuardedHeld(t, c) })
	t.Run("GuardedAfterEnd", func(t *testing.T) { testEtcdGuardedAfterEnd(t, c) })
	for _, k := range grantKinds {
		t.Run("PausedHolder/"+k.name, func(t *testing.T) { testEtcdPausedHolder(t, c, k) })
	}
	t.Run("FencedTokenOrder", func(t *testing.T) { testEtcdFencedOrder(t, c) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testEtcdConcurrent(t, c) })
}

func testEtcdGuardedHeld(t *testing.T, c *cluster.Cluster) {
	cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
	l := newEtcdLocker(t, cli, "holder")
	ctx := testutil.Context(t, 30*time.Second)
	name := testutil.UniqueName(t)
	key := "guardtest/data/" + name

	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	resp, err := etcdlock.GuardedTxn(ctx, cli, lease, clientv3.OpPut(key, "v1"), clientv3.OpGet(key))
	if err != nil {
		t.Fatalf("GuardedTxn(put, get) while held = %v; want nil", err)
	}
	if !resp.Succeeded || len(resp.Responses) != 2 {
		t.Fatalf("GuardedTxn() response: succeeded %v, %d responses; want true, 2", resp.Succeeded, len(resp.Responses))
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "v1" {
		t.Errorf("GuardedTxn() get in the same transaction = %v; want %q", kvs, "v1")
	}
	// No ops: a linearizable "still held" check.
	if _, err := etcdlock.GuardedTxn(ctx, cli, lease); err != nil {
		t.Errorf("GuardedTxn() without ops while held = %v; want nil", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

func testEtcdGuardedAfterEnd(t *testing.T, c *cluster.Cluster) {
	tests := []struct {
		name string
		end  func(ctx context.Context, t *testing.T, cli *clientv3.Client, l *etcdlock.Locker, lease lock.Lease)
		want error
	}{
		{"revoked", func(ctx context.Context, t *testing.T, cli *clientv3.Client, l *etcdlock.Locker, lease lock.Lease) {
			revokeSession(ctx, t, cli, l, lease)
		}, lock.ErrLost},
		{"released", func(ctx context.Context, t *testing.T, _ *clientv3.Client, _ *etcdlock.Locker, lease lock.Lease) {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
		}, lock.ErrReleased},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
			l := newEtcdLocker(t, cli, "holder")
			ctx := testutil.Context(t, 30*time.Second)
			name := testutil.UniqueName(t)
			key := "guardtest/data/" + name
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("Acquire() = %v", err)
			}
			tt.end(ctx, t, cli, l, lease)

			// Right away, whether or not the lease has noticed, and again
			// once it has.
			if _, err := etcdlock.GuardedTxn(ctx, cli, lease, clientv3.OpPut(key, "late")); !errors.Is(err, tt.want) {
				t.Errorf("GuardedTxn() after the lease ended = %v; want an error wrapping %v", err, tt.want)
			}
			testutil.Recv(t, lease.Done(), 10*time.Second, "lease.Done()")
			if _, err := etcdlock.GuardedTxn(ctx, cli, lease, clientv3.OpPut(key, "later")); !errors.Is(err, tt.want) {
				t.Errorf("GuardedTxn() after Done = %v; want an error wrapping %v", err, tt.want)
			}
			if resp, err := cli.Get(ctx, key); err != nil || len(resp.Kvs) != 0 {
				t.Errorf("Get(%q) = %v, %v; want no key: no refused write may land", key, resp.Kvs, err)
			}
		})
	}
}

// etcdWriter is one way of writing a value on behalf of a lease, for the
// paused-holder scenario.
type etcdWriter struct {
	name  string
	write func(ctx context.Context, kv clientv3.KV, lease lock.Lease, key, value string) error
	read  func(ctx context.Context, kv clientv3.KV, key string) (string, error)
	// checkLate checks the outcome of A's late write.
	checkLate func(t *testing.T, err error, a, b lock.Lease, key string)
	lateLands bool
}

func etcdPlainRead(ctx context.Context, kv clientv3.KV, key string) (string, error) {
	resp, err := kv.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

var etcdWriters = []etcdWriter{
	{
		name: "fenced",
		write: func(ctx context.Context, kv clientv3.KV, lease lock.Lease, key, value string) error {
			_, err := etcdlock.PutFenced(ctx, kv, key, value, lease.Token())
			return err
		},
		read: func(ctx context.Context, kv clientv3.KV, key string) (string, error) {
			v, _, err := etcdlock.GetFenced(ctx, kv, key)
			return v, err
		},
		checkLate: func(t *testing.T, err error, a, b lock.Lease, key string) {
			var stale *fencing.StaleTokenError
			if !errors.As(err, &stale) || stale.Resource != key || stale.Token != a.Token() || stale.Highest != b.Token() {
				t.Errorf("A's late PutFenced() = %v; want a *fencing.StaleTokenError{%q, %d, %d}", err, key, a.Token(), b.Token())
			}
		},
	},
	{
		name: "guarded",
		write: func(ctx context.Context, kv clientv3.KV, lease lock.Lease, key, value string) error {
			_, err := etcdlock.GuardedTxn(ctx, kv, lease, clientv3.OpPut(key, value))
			return err
		},
		read: etcdPlainRead,
		checkLate: func(t *testing.T, err error, _, _ lock.Lease, _ string) {
			if !errors.Is(err, lock.ErrLost) {
				t.Errorf("A's late GuardedTxn() = %v; want an error wrapping %v", err, lock.ErrLost)
			}
		},
	},
	{
		name: "unguarded control",
		write: func(ctx context.Context, kv clientv3.KV, _ lock.Lease, key, value string) error {
			_, err := kv.Put(ctx, key, value)
			return err
		},
		read: etcdPlainRead,
		checkLate: func(t *testing.T, err error, _, _ lock.Lease, _ string) {
			if err != nil {
				t.Errorf("A's late plain Put() = %v; want nil", err)
			}
		},
		lateLands: true,
	},
}

// testEtcdPausedHolder: A's write leaves A while A holds the lock and is
// held up in a blackholed proxy; A's session ends on the server, B is
// granted the lock and writes, and only then is A's write delivered.
func testEtcdPausedHolder(t *testing.T, c *cluster.Cluster, k grantKind) {
	for _, w := range etcdWriters {
		if !k.protects(w.name) {
			continue
		}
		t.Run(w.name, func(t *testing.T) {
			cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
			proxies := cluster.NewProxies(t, c)
			cliA := testutil.EtcdClient(t, clientv3.Config{Endpoints: proxies.Endpoints()}) // A's writes go through the proxies
			la := newEtcdLocker(t, cli, "A")
			lb := newEtcdLocker(t, cli, "B")
			ctx := testutil.Context(t, 60*time.Second)
			name := testutil.UniqueName(t)
			key := "guardtest/data/" + name

			var other lock.Lease
			if k.other != nil {
				var err error
				if other, err = k.other(ctx, newEtcdLocker(t, cli, "C"), name); err != nil {
					t.Fatalf("C's grant = %v", err)
				}
			}
			a, err := k.a(ctx, la, name)
			if err != nil {
				t.Fatalf("Acquire(A) = %v", err)
			}
			if err := w.write(ctx, cliA, a, key, "A1"); err != nil {
				t.Fatalf("A's write while holding = %v; want nil", err)
			}

			proxies.Blackhole()
			t.Cleanup(proxies.Heal)
			held := proxies.Stats().HeldWhileBlackholed
			late := make(chan error, 1)
			go func() { late <- w.write(ctx, cliA, a, key, "late by A") }()
			testutil.Eventually(t, 10*time.Second, "A's write held in the proxy", func() bool {
				return proxies.Stats().HeldWhileBlackholed > held
			})

			revokeSession(ctx, t, cli, la, a)
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			b, err := k.b(bctx, lb, name)
			if err != nil {
				t.Fatalf("Acquire(B) after A's session ended = %v", err)
			}
			if b.Token() <= a.Token() {
				t.Fatalf("B's token %d; want above A's %d", b.Token(), a.Token())
			}
			if err := w.write(ctx, cli, b, key, "B"); err != nil {
				t.Fatalf("B's write = %v; want nil", err)
			}
			select {
			case err := <-late:
				t.Fatalf("A's write returned %v before the proxy delivered it", err)
			default:
			}

			proxies.Heal()
			w.checkLate(t, testutil.Recv(t, late, 20*time.Second, "A's late write"), a, b, key)
			want := "B"
			if w.lateLands {
				want = "late by A"
			}
			if got, err := w.read(ctx, cli, key); err != nil || got != want {
				t.Errorf("value after A's late write = %q, %v; want %q", got, err, want)
			}
			if other != nil {
				// The concurrent holder still writes: only A's grant ended.
				if err := w.write(ctx, cli, other, key, "C"); err != nil {
					t.Errorf("C's write after B's = %v; want nil", err)
				}
			}
			if err := b.Release(ctx); err != nil {
				t.Errorf("Release(B) = %v", err)
			}
		})
	}
}

// testEtcdFencedOrder drives one key through tokens whose decimal forms
// differ in length, where a byte-wise comparison without padding would go
// wrong, up to the largest token.
func testEtcdFencedOrder(t *testing.T, c *cluster.Cluster) {
	cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
	ctx := testutil.Context(t, 30*time.Second)
	key := "guardtest/data/" + testutil.UniqueName(t)

	if v, tok, err := etcdlock.GetFenced(ctx, cli, key); v != "" || tok != 0 || err != nil {
		t.Errorf("GetFenced(missing key) = %q, %d, %v; want \"\", 0, nil", v, tok, err)
	}
	steps := []struct {
		token   fencing.Token
		highest fencing.Token // the highest token afterwards
	}{
		{9, 9}, {10, 10}, {9, 10}, {10, 10}, {99, 99}, {100, 100}, {99, 100},
		{1 << 40, 1 << 40}, {math.MaxUint64, math.MaxUint64}, {math.MaxUint64, math.MaxUint64}, {1, math.MaxUint64},
	}
	for i, s := range steps {
		value := fmt.Sprintf("step %d", i)
		rev, err := etcdlock.PutFenced(ctx, cli, key, value, s.token)
		if s.token == s.highest {
			if err != nil || rev == 0 {
				t.Fatalf("step %d: PutFenced(token %d) = %d, %v; want accepted", i, s.token, rev, err)
			}
			if resp, err := cli.Get(ctx, key); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
				t.Errorf("step %d: key's mod revision = %v, %v; want the returned revision %d", i, resp, err, rev)
			}
		} else {
			var stale *fencing.StaleTokenError
			if !errors.As(err, &stale) || *stale != (fencing.StaleTokenError{Resource: key, Token: s.token, Highest: s.highest}) || rev != 0 {
				t.Fatalf("step %d: PutFenced(token %d) = %d, %v; want 0 and a *fencing.StaleTokenError with highest %d", i, s.token, rev, err, s.highest)
			}
		}
		if _, tok, err := etcdlock.GetFenced(ctx, cli, key); tok != s.highest || err != nil {
			t.Fatalf("step %d: GetFenced() token = %d, %v; want %d", i, tok, err, s.highest)
		}
	}

	if _, err := etcdlock.PutFenced(ctx, cli, key, "x", 0); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("PutFenced(token 0) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}

	empty := key + "-empty"
	if _, err := cli.Put(ctx, empty, ""); err != nil {
		t.Fatalf("Put(%q, \"\") = %v", empty, err)
	}
	if _, err := etcdlock.PutFenced(ctx, cli, empty, "first", 1); err != nil {
		t.Errorf("PutFenced(key with an empty value, token 1) = %v; want nil (empty counts as token 0)", err)
	}

	plain := key + "-plain"
	if _, err := cli.Put(ctx, plain, "hello"); err != nil {
		t.Fatalf("Put(%q) = %v", plain, err)
	}
	if _, err := etcdlock.PutFenced(ctx, cli, plain, "x", 5); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("PutFenced(key written without a token) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}
	if _, _, err := etcdlock.GetFenced(ctx, cli, plain); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("GetFenced(key written without a token) = %v; want an error wrapping %v", err, fencing.ErrInvalidToken)
	}
	if v, err := etcdPlainRead(ctx, cli, plain); v != "hello" || err != nil {
		t.Errorf("plain value after the refused PutFenced = %q, %v; want it untouched", v, err)
	}
}

// testEtcdConcurrent has writers with the tokens of several real grants
// write one key at once, and checks the key's own history.
func testEtcdConcurrent(t *testing.T, c *cluster.Cluster) {
	cli := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
	l := newEtcdLocker(t, cli, "writers")
	ctx := testutil.Context(t, 60*time.Second)
	name := testutil.UniqueName(t)
	key := "guardtest/data/" + name

	const writers, writes = 6, 15
	tokens := make([]fencing.Token, writers)
	for i := range tokens {
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		tokens[i] = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	}
	start, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	acc, _ := mixedWriters(t, tokens, writes, func(writer int, token fencing.Token) (int64, error) {
		return etcdlock.PutFenced(ctx, cli, key, fmt.Sprintf("writer %d", writer), token)
	})

	maxToken := tokens[writers-1]
	if v, tok, err := etcdlock.GetFenced(ctx, cli, key); tok != maxToken || err != nil {
		t.Errorf("GetFenced() = %q, %d, %v; want the highest token %d", v, tok, err, maxToken)
	}

	// The key's own history, from the server: exactly the accepted writes,
	// in an order where tokens never fall.
	var lastRev int64
	for _, a := range acc {
		lastRev = max(lastRev, a.order)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var history []accepted
	for resp := range cli.Watch(wctx, key, clientv3.WithRev(start.Header.Revision+1)) {
		if err := resp.Err(); err != nil {
			t.Fatalf("Watch(%q) = %v", key, err)
		}
		for _, ev := range resp.Events {
			tok, err := strconv.ParseUint(string(ev.Kv.Value[:20]), 10, 64)
			if err != nil {
				t.Fatalf("stored value %q: token header: %v", ev.Kv.Value, err)
			}
			history = append(history, accepted{ev.Kv.ModRevision, fencing.Token(tok)})
		}
		if len(history) > 0 && history[len(history)-1].order >= lastRev {
			cancel()
		}
	}
	if len(history) != len(acc) {
		t.Errorf("key history has %d writes; want the %d accepted ones", len(history), len(acc))
	}
	checkMonotonic(t, history)
}
