package zklock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// authCred is one credential sent with AddAuth.
type authCred struct {
	scheme string
	secret []byte
}

// digest is the user and password of WithDigest.
type digest struct {
	user, password string
}

// WithDigest authenticates every connection of the Locker with the digest
// scheme as user with password, and makes what the Locker creates that
// user's (see [WithACL]). The user must be non-empty without ':'; the
// password non-empty. A later WithDigest replaces an earlier one.
func WithDigest(user, password string) Option {
	return func(o *options) {
		switch {
		case user == "":
			o.Fail("digest: empty user")
		case strings.ContainsRune(user, ':'):
			o.Fail("digest: user %q contains ':'", user)
		case password == "":
			o.Fail("digest: empty password for user %q", user)
		default:
			o.digest = &digest{user: user, password: password}
		}
	}
}

// WithAuth adds a credential of another scheme, sent on every connection as
// WithDigest's is; it changes the default ACL (see [WithACL]). The scheme
// and the secret must be non-empty; WithAuth may be given several times.
func WithAuth(scheme string, secret []byte) Option {
	return func(o *options) {
		if scheme == "" || len(secret) == 0 {
			o.Fail("auth: empty scheme or secret")
			return
		}
		o.auth = append(o.auth, authCred{scheme: scheme, secret: append([]byte(nil), secret...)})
	}
}

// creds returns every credential to send, digest first.
func (o *options) creds() []authCred {
	var cs []authCred
	if o.digest != nil {
		cs = append(cs, authCred{scheme: "digest", secret: []byte(o.digest.user + ":" + o.digest.password)})
	}
	return append(cs, o.auth...)
}

// secrets returns the strings that must never be printed.
func (o *options) secrets() []string {
	var s []string
	if o.digest != nil {
		s = append(s, o.digest.password)
	}
	for _, c := range o.creds() { // the digest's is user:password
		s = append(s, string(c.secret))
	}
	return s
}

// defaultACL is the ACL of what the Locker creates when WithACL is not
// given. See WithACL.
func (o *options) defaultACL() []zk.ACL {
	switch {
	case o.digest != nil:
		return append(zk.DigestACL(zk.PermAll, o.digest.user, o.digest.password), zk.WorldACL(zk.PermRead)...)
	case len(o.auth) > 0:
		return append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)
	default:
		return zk.WorldACL(zk.PermAll)
	}
}

// addAuth sends the Locker's credentials once (go-zookeeper sends them
// again after each reconnect), retrying while the connection fails.
func (l *Locker) addAuth(ctx context.Context) error {
	for _, c := range l.o.creds() {
		for {
			_, err := call(ctx, l.g, nil, func() (struct{}, error) {
				return struct{}{}, l.conn.AddAuth(c.scheme, c.secret)
			})
			if err == nil {
				break
			}
			if isStop(err) || !isConnErr(err) {
				return fmt.Errorf("add %s credentials: %w", c.scheme, secure.Refusal(err, isRefusal))
			}
			if err := l.ss.awaitConnected(ctx, nil); err != nil {
				return fmt.Errorf("add %s credentials: %w", c.scheme, err)
			}
			// Do not spin on a connection that flaps.
			if err := clock.Sleep(ctx, 10*time.Millisecond, nil, nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// isRefusal reports whether err is the server refusing the client (see
// secure.Refusal): an ACL, the credentials or a TLS handshake.
func isRefusal(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || secure.CertRefusal(err)
}

// WithTLS makes [Dial] speak TLS to the servers' secure client ports.
// cfg, not nil, is copied; with an empty ServerName each connection
// verifies the host it dials. A handshake refused on either side makes
// Dial and the calls waiting for a connection return an error wrapping
// [lock.ErrPermission] at once.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			o.Fail("nil TLS config")
			return
		}
		o.tls = cfg.Clone()
	}
}

// refusals records why the servers last refused the Locker's connection,
// until a connection gets through, for the calls that wait for one.
type refusals struct {
	err    atomic.Pointer[error] // wraps lock.ErrPermission; nil once a connection got through
	notify func()
}

func (r *refusals) refuse(err error) {
	err = fmt.Errorf("%w: %w", lock.ErrPermission, err)
	r.err.Store(&err)
	if r.notify != nil {
		r.notify()
	}
}

func (r *refusals) last() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

// tlsDialer returns a dialer that runs a TLS handshake over base's
// connections, within the dial's timeout.
func tlsDialer(base zk.Dialer, cfg *tls.Config, r *refusals) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		deadline := time.Now().Add(timeout)
		raw, err := base(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		tc := tls.Client(raw, c)
		_ = tc.SetDeadline(deadline)
		if err := tc.Handshake(); err != nil {
			raw.Close()
			if secure.CertRefusal(err) {
				r.refuse(err)
			}
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		return &watchedConn{Conn: tc, r: r}, nil
	}
}

// watchedConn reports what the first read says: under TLS 1.3 a refusal
// of the client's certificate arrives as an alert on the first read.
type watchedConn struct {
	net.Conn
	r    *refusals
	seen atomic.Bool // a read has returned data
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.seen.Swap(true) {
		c.r.err.Store(nil)
	}
	if err != nil && secure.CertRefusal(err) {
		c.r.refuse(err)
	}
	return n, err
}
