package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// unreachableClient returns a client that is never used for I/O: the calls
// under test must reject their input before sending anything.
func unreachableClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatalf("clientv3.New() = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memLease returns a lease of the in-memory Locker: a valid lock.Lease
// of the wrong backend.
func memLease(t *testing.T) lock.Lease {
	t.Helper()
	l := locktest.NewMemory().NewLocker("mem")
	t.Cleanup(func() { l.Close() })
	lease, err := l.Acquire(context.Background(), "guard/mem")
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	return lease
}

func TestGuardedTxnInvalid(t *testing.T) {
	c := unreachableClient(t)
	tests := []struct {
		name  string
		kv    clientv3.KV
		lease lock.Lease
		msg   string
	}{
		{"nil kv", nil, memLease(t), "nil kv"},
		{"nil lease", c, nil, "nil lease"},
		{"typed nil lease", c, (*etcdlock.Lease)(nil), "nil *etcdlock.Lease"},
		{"other backend", c, memLease(t), "not an etcd lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := etcdlock.GuardedTxn(context.Background(), tt.kv, tt.lease, clientv3.OpPut("k", "v"))
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("GuardedTxn() = %v; want an error wrapping %v saying %q", err, lock.ErrInvalidConfig, tt.msg)
			}
			if resp != nil {
				t.Errorf("GuardedTxn() response = %v; want nil", resp)
			}
			two := []lock.Lease{tt.lease, tt.lease}
			resp, err = etcdlock.GuardedTxnAll(context.Background(), tt.kv, two, clientv3.OpPut("k", "v"))
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.msg) || resp != nil {
				t.Errorf("GuardedTxnAll() = %v, %v; want nil and an error wrapping %v saying %q", resp, err, lock.ErrInvalidConfig, tt.msg)
			}
		})
	}
}

func TestGuardPutFencedInvalid(t *testing.T) {
	c := unreachableClient(t)
	tests := []struct {
		name  string
		kv    clientv3.KV
		key   string
		token fencing.Token
		want  error
	}{
		{"nil kv", nil, "k", 1, lock.ErrInvalidConfig},
		{"empty key", c, "", 1, lock.ErrInvalidConfig},
		{"zero token", c, "k", 0, fencing.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := etcdlock.PutFenced(context.Background(), tt.kv, tt.key, "v", tt.token)
			if !errors.Is(err, tt.want) || rev != 0 {
				t.Errorf("PutFenced(%q, token %d) = %d, %v; want 0 and an error wrapping %v", tt.key, tt.token, rev, err, tt.want)
			}
			if !strings.HasPrefix(fmt.Sprint(err), "etcdlock: ") {
				t.Errorf("PutFenced() error %q; want the prefix %q", err, "etcdlock: ")
			}
		})
	}
}

func TestGuardGetFencedInvalid(t *testing.T) {
	c := unreachableClient(t)
	tests := []struct {
		name string
		kv   clientv3.KV
		key  string
	}{
		{"nil kv", nil, "k"},
		{"empty key", c, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, tok, err := etcdlock.GetFenced(context.Background(), tt.kv, tt.key)
			if !errors.Is(err, lock.ErrInvalidConfig) || v != "" || tok != 0 {
				t.Errorf("GetFenced(%q) = %q, %d, %v; want \"\", 0 and an error wrapping %v", tt.key, v, tok, err, lock.ErrInvalidConfig)
			}
		})
	}
}

// A write to etcd that lands only while the lease holds the lock. Unlike a
// hand-built transaction on Lease.IsHeld, GuardedTxn takes the lock.Lease
// as Acquire returned it and reports a refused write as lock.ErrLost.
func ExampleGuardedTxn() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	_, err = etcdlock.GuardedTxn(ctx, client, lease,
		clientv3.OpPut("myapp/config/mode", "maintenance"),
		clientv3.OpPut("myapp/config/since", "2024-06-01T12:00:00Z"))
	switch {
	case errors.Is(err, lock.ErrLost):
		fmt.Println("the lock was lost; nothing was written")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("both keys written under token", lease.Token())
	}
}

// A key that fences itself: it stores the highest token it has accepted
// and refuses lower ones, even from a writer whose lease ended long ago.
func ExamplePutFenced() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := etcdlock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// ... a long pause here: the lease may end and another holder write ...

	_, err = etcdlock.PutFenced(ctx, client, "myapp/reports/nightly", "done", lease.Token())
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		fmt.Printf("a newer holder (token %d) has written; not overwriting it\n", stale.Highest)
	case err != nil:
		log.Fatal(err)
	}
	value, token, err := etcdlock.GetFenced(ctx, client, "myapp/reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q written with token %d\n", value, token)
}
