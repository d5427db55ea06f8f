package zklock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// Authentication and ACLs. go-zookeeper sends the credentials of a
// successful AddAuth again after each reconnect, before any other request,
// so Dial sends them once. A wrong digest password is not refused at
// AddAuth: its requests fail with zk.ErrNoAuth.

// authCred is one credential sent with AddAuth.
type authCred struct {
	scheme string
	secret []byte
}

// digest is the user and password of WithDigest.
type digest struct {
	user, password string
}

// WithDigest authenticates every connection of the Locker with
// ZooKeeper's digest scheme as user with password (AddAuth("digest",
// "user:password"), re-sent after every reconnect), and, unless [WithACL]
// says otherwise, makes everything the Locker creates owned by that user:
// see [WithACL] for the default ACL. The user must be non-empty without
// ':'; the password non-empty. A later WithDigest replaces an earlier one.
//
// Neither the password nor its digest appears in an error or log line of
// the Locker.
func WithDigest(user, password string) Option {
	return func(o *options) {
		switch {
		case user == "":
			o.Fail("digest: empty user")
			return
		case strings.ContainsRune(user, ':'):
			o.Fail("digest: user %q contains ':'", user)
			return
		case password == "":
			o.Fail("digest: empty password for user %q", user)
			return
		}
		o.digest = &digest{user: user, password: password}
	}
}

// WithAuth adds a credential of another scheme, sent with AddAuth on
// every connection as WithDigest's is (for digest itself prefer
// WithDigest, which also sets the default ACL). Unless WithDigest or
// [WithACL] is given, the default ACL becomes zk.AuthACL(zk.PermAll),
// which the server turns into every identity the creating connection has
// authenticated, plus zk.PermRead for anyone. The scheme must be
// non-empty and the secret non-empty; WithAuth may be given several
// times.
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
		s = append(s, o.digest.password, o.digest.user+":"+o.digest.password)
	}
	for _, c := range o.auth {
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

// addAuth sends the Locker's credentials on its connection, again while
// the connection fails under the request, until the server has them, ctx
// ends or the server refuses the connection.
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
			// awaitConnected sees the state; wait a little for a
			// connection that flaps between connected and refused.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}
	return nil
}

// isRefusal reports whether err is the server refusing the client (see
// secure.Refusal): zk.ErrNoAuth (an ACL does not let this identity do
// it), zk.ErrAuthFailed (the server refused the credentials), or a TLS
// handshake the server or the client refused.
func isRefusal(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || isTLSRefusal(err)
}

// WithTLS makes [Dial] speak TLS to the servers, which must be their
// secure client ports (secureClientPort, with
// serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory).
// cfg is copied; when its ServerName is empty, each connection verifies
// the host of the address it dials (an IP address is checked against the
// certificate's IP SANs). Give cfg.Certificates for servers with
// ssl.clientAuth=need. With [WithDialer], TLS runs over the connections
// that dialer opens. cfg must not be nil.
//
// A handshake the server refuses (an untrusted, expired or missing client
// certificate) or the client refuses (a server certificate it cannot
// verify) makes Dial and the calls waiting for a connection return an
// error wrapping [lock.ErrPermission] at once, instead of trying again
// until their context ends.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			o.Fail("nil TLS config")
			return
		}
		o.tls = cfg.Clone()
	}
}

// refusals records why the servers last refused the Locker's connection
// (a TLS handshake refused, on either side), until a connection gets
// through. Calls that wait for a connection give up with that error
// instead of waiting for the next attempt, which would be refused too.
type refusals struct {
	mu     sync.Mutex
	err    error // wraps lock.ErrPermission; nil once a connection got through
	notify func()
}

// refuse records a refusal.
func (r *refusals) refuse(err error) {
	r.mu.Lock()
	r.err = fmt.Errorf("%w: %w", lock.ErrPermission, err)
	f := r.notify
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// accept records that a connection got through.
func (r *refusals) accept() {
	r.mu.Lock()
	r.err = nil
	r.mu.Unlock()
}

// last returns the latest refusal, or nil.
func (r *refusals) last() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// tlsDialer returns a dialer that opens a connection with base and runs
// a TLS handshake on it, within the dial's timeout.
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
			if isTLSRefusal(err) {
				r.refuse(err)
			}
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		return &watchedConn{Conn: tc, r: r}, nil
	}
}

// watchedConn reports what the first read says: under TLS 1.3 the server
// checks the client's certificate after the client has finished its half
// of the handshake, so its refusal arrives as an alert on the first read.
type watchedConn struct {
	net.Conn
	r    *refusals
	seen atomic.Bool // a read has returned data
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.seen.Swap(true) {
		c.r.accept()
	}
	if err != nil && isTLSRefusal(err) {
		c.r.refuse(err)
	}
	return n, err
}

// isTLSRefusal reports whether err is a TLS handshake refused for want of
// trust: the client could not verify the server's certificate, or the
// server sent an alert that refuses the client's (or its missing)
// certificate.
func isTLSRefusal(err error) bool {
	if secure.Unverified(err) {
		return true
	}
	var aerr tls.AlertError
	if errors.As(err, &aerr) {
		return refusingAlert(uint8(aerr))
	}
	// A received alert is a *net.OpError with Op "remote error" around
	// crypto/tls's unexported alert type (a uint8).
	var oerr *net.OpError
	for e := err; errors.As(e, &oerr); e = oerr.Err {
		if oerr.Op == "remote error" && oerr.Err != nil {
			if v := reflect.ValueOf(oerr.Err); v.Kind() == reflect.Uint8 {
				return refusingAlert(uint8(v.Uint()))
			}
		}
		if oerr.Err == nil {
			break
		}
	}
	return false
}

// refusingAlert reports whether a TLS alert code refuses trust (RFC 8446
// section 6.2): handshake_failure, bad_certificate,
// unsupported_certificate, certificate_revoked, certificate_expired,
// certificate_unknown, unknown_ca, access_denied, certificate_required.
func refusingAlert(code uint8) bool {
	switch code {
	case 40, 42, 43, 44, 45, 46, 48, 49, 116:
		return true
	}
	return false
}
