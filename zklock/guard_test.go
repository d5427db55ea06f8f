package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
	"github.com/fencelock/fencelock/zklock"
)

// idleConn is never used for I/O: the calls under test must reject their
// input (or a done context) before sending anything, and a zero Conn would
// panic if they did not.
func idleConn() *zk.Conn { return &zk.Conn{} }

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

func TestGuardedMultiInvalid(t *testing.T) {
	tests := []struct {
		name  string
		conn  *zk.Conn
		lease lock.Lease
		msg   string
	}{
		{"nil conn", nil, memLease(t), "nil conn"},
		{"nil lease", idleConn(), nil, "nil lease"},
		{"typed nil lease", idleConn(), (*zklock.Lease)(nil), "nil *zklock.Lease"},
		{"other backend", idleConn(), memLease(t), "not a ZooKeeper lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := zklock.GuardedMulti(context.Background(), tt.conn, tt.lease,
				&zk.SetDataRequest{Path: "/x", Data: []byte("v"), Version: -1})
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("GuardedMulti() = %v; want an error wrapping %v saying %q", err, lock.ErrInvalidConfig, tt.msg)
			}
			if res != nil {
				t.Errorf("GuardedMulti() responses = %v; want nil", res)
			}
		})
	}
}

// TestGuardedMultiAllInvalid checks that GuardedMultiAll names the lease
// it refuses, and refuses no leases, before any I/O.
func TestGuardedMultiAllInvalid(t *testing.T) {
	op := &zk.SetDataRequest{Path: "/x", Data: []byte("v"), Version: -1}
	tests := []struct {
		name   string
		leases []lock.Lease
		msg    string
	}{
		{"no leases", nil, "no leases"},
		{"nil second", []lock.Lease{&zklock.Lease{}, nil}, "lease 2 of 2: nil lease"},
		{"other backend second", []lock.Lease{&zklock.Lease{}, memLease(t)}, "lease 2 of 2: lease of type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := zklock.GuardedMultiAll(context.Background(), idleConn(), tt.leases, op)
			if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "zklock: guarded multi all: ") {
				t.Errorf("GuardedMultiAll() = %v; want an error wrapping %v saying %q", err, lock.ErrInvalidConfig, tt.msg)
			}
			if res != nil {
				t.Errorf("GuardedMultiAll() responses = %v; want nil", res)
			}
		})
	}
}

func TestGuardSetFencedInvalid(t *testing.T) {
	tests := []struct {
		name  string
		conn  *zk.Conn
		path  string
		token fencing.Token
		want  error
	}{
		{"nil conn", nil, "/a", 1, lock.ErrInvalidConfig},
		{"empty path", idleConn(), "", 1, lock.ErrInvalidConfig},
		{"relative path", idleConn(), "a/b", 1, lock.ErrInvalidConfig},
		{"root", idleConn(), "/", 1, lock.ErrInvalidConfig},
		{"trailing slash", idleConn(), "/a/", 1, lock.ErrInvalidConfig},
		{"empty segment", idleConn(), "/a//b", 1, lock.ErrInvalidConfig},
		{"dot segment", idleConn(), "/a/./b", 1, lock.ErrInvalidConfig},
		{"dot-dot segment", idleConn(), "/a/..", 1, lock.ErrInvalidConfig},
		{"NUL", idleConn(), "/a\x00b", 1, lock.ErrInvalidConfig},
		{"zero token", idleConn(), "/a", 0, fencing.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stat, err := zklock.SetFenced(context.Background(), tt.conn, tt.path, []byte("v"), tt.token)
			if !errors.Is(err, tt.want) || stat != nil {
				t.Errorf("SetFenced(%q, token %d) = %v, %v; want nil and an error wrapping %v", tt.path, tt.token, stat, err, tt.want)
			}
			if !strings.HasPrefix(fmt.Sprint(err), "zklock: ") {
				t.Errorf("SetFenced() error %q; want the prefix %q", err, "zklock: ")
			}
		})
	}
}

func TestGuardGetFencedInvalid(t *testing.T) {
	for _, tt := range []struct {
		name string
		conn *zk.Conn
		path string
	}{
		{"nil conn", nil, "/a"},
		{"relative path", idleConn(), "a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data, tok, err := zklock.GetFenced(context.Background(), tt.conn, tt.path)
			if !errors.Is(err, lock.ErrInvalidConfig) || data != nil || tok != 0 {
				t.Errorf("GetFenced(%q) = %q, %d, %v; want nil, 0 and an error wrapping %v", tt.path, data, tok, err, lock.ErrInvalidConfig)
			}
		})
	}
}

// A done context stops the calls before their first request.
func TestGuardFencedDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := zklock.SetFenced(ctx, idleConn(), "/a", []byte("v"), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("SetFenced(done ctx) = %v; want an error wrapping %v", err, context.Canceled)
	}
	if _, _, err := zklock.GetFenced(ctx, idleConn(), "/a"); !errors.Is(err, context.Canceled) {
		t.Errorf("GetFenced(done ctx) = %v; want an error wrapping %v", err, context.Canceled)
	}
}

// A guarded write through a connection of the caller's own: a Locker
// keeps its connection to itself, and the check needs none in
// particular. (It needs a ZooKeeper ensemble, so it has no Output and is
// compiled but not run.)
func ExampleGuardedMulti() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	servers := []string{"127.0.0.1:2181"}
	l, err := zklock.Dial(ctx, servers, zklock.WithRoot("/myapp/locks"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "config")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.Background())

	conn, _, err := zk.Connect(servers, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	_, err = zklock.GuardedMulti(ctx, conn, lease,
		&zk.SetDataRequest{Path: "/myapp/config/mode", Data: []byte("maintenance"), Version: -1},
		&zk.SetDataRequest{Path: "/myapp/config/since", Data: []byte("2024-06-01T12:00:00Z"), Version: -1},
	)
	switch {
	case errors.Is(err, lock.ErrLost):
		fmt.Println("the lock was lost; nothing was written")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("both znodes written under token", lease.Token())
	}
}

// A znode that fences itself: it stores the highest token it has accepted
// and refuses lower ones, even from a writer whose lease ended long ago.
func ExampleSetFenced() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	servers := []string{"127.0.0.1:2181"}
	l, err := zklock.Dial(ctx, servers)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "reports/nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.Background())

	conn, _, err := zk.Connect(servers, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	// ... a long pause here: the lease may end and another holder write ...

	_, err = zklock.SetFenced(ctx, conn, "/myapp/reports-nightly", []byte("done"), lease.Token())
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		fmt.Printf("a newer holder (token %d) has written; not overwriting it\n", stale.Highest)
	case err != nil:
		fmt.Println(err)
	}
	data, token, err := zklock.GetFenced(ctx, conn, "/myapp/reports-nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q written with token %d\n", data, token)
}
