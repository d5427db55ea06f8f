package zktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/zklock"
)

// BenchmarkZK compares zklock with go-zookeeper's own lock recipe
// (zk.NewLock) and with the floor of any such lock, a bare create and
// delete of an ephemeral sequential znode, on one ensemble:
//
//	cd integration && go test -run '^$' -bench ZK ./zktest
func BenchmarkZK(b *testing.B) {
	c := cluster0(b)
	servers := c.Endpoints()
	ctx := context.Background()
	dial := func(b *testing.B) *zklock.Locker {
		b.Helper()
		l, err := zklock.Dial(ctx, servers, zklock.WithRoot("/bench-"+randHex(3)), zklock.WithSessionTimeout(10*time.Second))
		if err != nil {
			b.Fatalf("Dial() = %v", err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	conn := func(b *testing.B) *zk.Conn {
		b.Helper()
		return testutil.ZKConn(b, servers, 10*time.Second, nil)
	}
	acl := zk.WorldACL(zk.PermAll)

	b.Run("uncontended/zklock", func(b *testing.B) {
		l := dial(b)
		name := "u-" + randHex(3)
		for b.Loop() {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			if err := le.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncontended/zk.Lock", func(b *testing.B) {
		cn := conn(b)
		lk := zk.NewLock(cn, "/benchzk-"+randHex(3), acl)
		for b.Loop() {
			if err := lk.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncontended/create+delete", func(b *testing.B) {
		cn := conn(b)
		parent := "/benchfloor-" + randHex(3)
		if _, err := cn.Create(parent, nil, 0, acl); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			p, err := cn.Create(parent+"/n-", nil, zk.FlagEphemeralSequential, acl)
			if err != nil {
				b.Fatal(err)
			}
			if err := cn.Delete(p, -1); err != nil {
				b.Fatal(err)
			}
		}
	})

	handoff := func(b *testing.B, lockUnlock [2]func() error) {
		var wg sync.WaitGroup
		per := b.N / 2
		start := time.Now()
		errs := make(chan error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					if err := lockUnlock[i](); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.ReportMetric(float64(2*per)/time.Since(start).Seconds(), "grants/s")
	}
	b.Run("handoff/zklock", func(b *testing.B) {
		name := "h-" + randHex(3)
		var fs [2]func() error
		for i := range 2 {
			l := dial(b)
			fs[i] = func() error {
				le, err := l.Acquire(ctx, name)
				if err != nil {
					return err
				}
				return le.Release(ctx)
			}
		}
		handoff(b, fs)
	})
	b.Run("handoff/zk.Lock", func(b *testing.B) {
		path := "/benchzkh-" + randHex(3)
		var fs [2]func() error
		for i := range 2 {
			lk := zk.NewLock(conn(b), path, acl)
			fs[i] = func() error {
				if err := lk.Lock(); err != nil {
					return err
				}
				return lk.Unlock()
			}
		}
		handoff(b, fs)
	})
}
