package etcdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// isRefusal reports whether err is the cluster refusing the client (see
// secure.Refusal): etcd's auth errors, gRPC's PermissionDenied and
// Unauthenticated, or a certificate a TLS handshake rejected.
func isRefusal(err error) bool {
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty,
		rpctypes.ErrInvalidAuthToken, rpctypes.ErrUserNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ee rpctypes.EtcdError
	if !errors.As(err, &ee) {
		if s, ok := status.FromError(err); ok {
			switch s.Code() {
			case codes.PermissionDenied, codes.Unauthenticated:
				return true
			}
		}
	}
	return secure.CertRefusal(err)
}

// refusals sees the TLS connections of a client that lock.Open made: while
// every member's last handshake was refused over a certificate, calls fail
// at once with an error wrapping lock.ErrPermission.
type refusals struct {
	endpoints int

	mu      sync.Mutex
	refused map[string]error // by address: the certificate error
	waiters map[*refusalWaiter]struct{}
}

type refusalWaiter struct{ cancel func() }

func newRefusals(endpoints int) *refusals {
	return &refusals{endpoints: max(endpoints, 1), refused: map[string]error{}, waiters: map[*refusalWaiter]struct{}{}}
}

// err returns an error wrapping lock.ErrPermission while every endpoint
// refuses the client, and nil otherwise.
func (w *refusals) err() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errLocked()
}

func (w *refusals) errLocked() error {
	if len(w.refused) < w.endpoints {
		return nil
	}
	addr := slices.Min(slices.Collect(maps.Keys(w.refused)))
	return fmt.Errorf("%w: TLS handshake with %s: %w", lock.ErrPermission, addr, w.refused[addr])
}

// note records the outcome of a connection to addr (nil: it worked).
func (w *refusals) note(addr string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.refused, addr)
		return
	}
	w.refused[addr] = err
	if w.errLocked() != nil {
		for rw := range w.waiters {
			rw.cancel()
		}
		clear(w.waiters)
	}
}

// context returns ctx, also cancelled once every endpoint refuses.
func (w *refusals) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if w == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := w.onRefusal(cancel)
	return ctx, func() { stop(); cancel() }
}

// onRefusal calls f once every endpoint refuses the client (at once if
// they already do), unless stop was called first.
func (w *refusals) onRefusal(f func()) (stop func()) {
	if w == nil {
		return func() {}
	}
	rw := &refusalWaiter{cancel: f}
	w.mu.Lock()
	if w.errLocked() != nil {
		w.mu.Unlock()
		f()
		return func() {}
	}
	w.waiters[rw] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.waiters, rw)
		w.mu.Unlock()
	}
}

// credentials wraps the client's TLS credentials for w to see.
func (w *refusals) credentials(cfg *tls.Config) credentials.TransportCredentials {
	return &watchedCreds{TransportCredentials: credentials.NewTLS(cfg), w: w}
}

type watchedCreds struct {
	credentials.TransportCredentials
	w *refusals
}

func (c *watchedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if secure.CertRefusal(err) {
			c.w.note(authority, err)
		}
		return nil, nil, err
	}
	return &watchedConn{Conn: conn, w: c.w, addr: authority}, info, nil
}

func (c *watchedCreds) Clone() credentials.TransportCredentials {
	return &watchedCreds{TransportCredentials: c.TransportCredentials.Clone(), w: c.w}
}

// watchedConn reports the first read of a connection, where TLS 1.3 brings
// the server's verdict on the client's certificate; a failed write or a
// close before then reads the alert the server may have sent.
type watchedConn struct {
	net.Conn
	w     *refusals
	addr  string
	heard atomic.Bool // the first read has returned
	first sync.Once
}

// lastWordsWait bounds the read of a connection's last words.
const lastWordsWait = 100 * time.Millisecond

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.saw(n, err)
	return n, err
}

func (c *watchedConn) saw(n int, err error) {
	switch {
	case n > 0:
		c.heard.Store(true)
		c.first.Do(func() { c.w.note(c.addr, nil) })
	case err != nil && secure.CertRefusal(err):
		c.heard.Store(true)
		c.first.Do(func() { c.w.note(c.addr, err) })
	}
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.lastWords()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.lastWords()
	return c.Conn.Close()
}

// lastWords briefly reads what a server not heard from yet sent.
func (c *watchedConn) lastWords() {
	if c.heard.Load() {
		return
	}
	if c.Conn.SetReadDeadline(time.Now().Add(lastWordsWait)) != nil {
		return
	}
	n, err := c.Conn.Read(make([]byte, 1))
	c.saw(n, err)
}
