package zktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/certs"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
	"github.com/fencelock/fencelock/zklock"
)

// The secrets of TestSecurity: none may appear in any error, log line or
// panic the test sees.
const (
	appUser      = "app"
	appPassword  = "app-Secret-7f3a9c"
	otherUser    = "other"
	otherPass    = "other-Secret-b41d2e"
	wrongPass    = "wrong-Secret-99e0aa"
	passwordEnv  = "FENCELOCK_ZKTEST_PASSWORD"
	securityName = "orders/nightly"
)

// secured is one secured ensemble and what its tests share.
type secured struct {
	c                  *cluster.Cluster
	secure             []string // TLS client addresses
	ca                 *certs.Authority
	client             certs.Pair // trusted by the servers
	rogue              certs.Pair // signed by another authority
	expired            certs.Pair
	rogueCA            *certs.Authority
	logs               *syncBuffer
	logger             *slog.Logger
	mu                 sync.Mutex
	seen               []string // every error text the test saw
	keyPEMs, passwords []string
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// saw records the text of an error for the final check, and returns it.
func (s *secured) saw(err error) error {
	if err != nil {
		s.mu.Lock()
		s.seen = append(s.seen, err.Error())
		s.mu.Unlock()
	}
	return err
}

// tlsConfig returns a client TLS configuration trusting roots and
// presenting pair (none when pair is zero).
func tlsConfig(t *testing.T, rootsFile string, pair certs.Pair) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(rootsFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", rootsFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if pair.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// startSecured starts a secured ensemble: a secure client port per server
// requiring a client certificate signed by the test authority.
func startSecured(t *testing.T) *secured {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewAuthority(dir, "zk-ca")
	if err != nil {
		t.Fatal(err)
	}
	rogueCA, err := certs.NewAuthority(filepath.Join(dir, "rogue"), "rogue-ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("zk-server")
	if err != nil {
		t.Fatal(err)
	}
	s := &secured{ca: ca, rogueCA: rogueCA, logs: new(syncBuffer)}
	if s.client, err = ca.Issue("app-client"); err != nil {
		t.Fatal(err)
	}
	if s.rogue, err = rogueCA.Issue("rogue-client"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if s.expired, err = ca.IssueValid("expired-client", now.Add(-2*time.Hour), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []certs.Pair{server, s.client, s.rogue, s.expired} {
		b, err := os.ReadFile(p.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		s.keyPEMs = append(s.keyPEMs, string(b))
	}
	s.passwords = []string{appPassword, otherPass, wrongPass}
	s.logger = slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Lockers from lock.Open log to the default logger.
	prev := slog.Default()
	slog.SetDefault(s.logger)
	t.Cleanup(func() { slog.SetDefault(prev) })
	s.c = cluster.FromEnv(t).Start(t, cluster.ZooKeeper, cluster.WithZKSecurity(cluster.ZKSecurity{
		KeyStore:   server.BundleFile,
		TrustStore: ca.CAFile,
	}))
	s.secure = s.c.SecureEndpoints()
	if len(s.secure) != len(s.c.Members) {
		t.Fatalf("SecureEndpoints() = %v; want one per member", s.secure)
	}
	return s
}

// dial dials the secure ports with opts (and the captured logger).
func (s *secured) dial(t *testing.T, servers []string, opts ...zklock.Option) (*zklock.Locker, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []zklock.Option{zklock.WithSessionTimeout(sessionTimeout), zklock.WithLogger(s.logger)}
	l, err := zklock.Dial(ctx, servers, append(base, opts...)...)
	if err != nil {
		return nil, s.saw(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, nil
}

// mustDial is dial that fails the test on error.
func (s *secured) mustDial(t *testing.T, opts ...zklock.Option) *zklock.Locker {
	t.Helper()
	l, err := s.dial(t, s.secure, opts...)
	if err != nil {
		t.Fatalf("zklock.Dial() = %v", err)
	}
	return l
}

// rawConn returns a plain go-zookeeper connection to the plain client
// ports, authenticated with the given digest ("" for none).
func (s *secured) rawConn(t *testing.T, user, password string) *zk.Conn {
	t.Helper()
	conn := testutil.ZKConn(t, s.c.Endpoints(), 10*time.Second, nil)
	if user != "" {
		if err := conn.AddAuth("digest", []byte(user+":"+password)); err != nil {
			t.Fatalf("AddAuth() = %v", err)
		}
	}
	return conn
}

// wantPermission checks that err wraps ErrPermission, and that it came
// back well before the call's deadline.
func (s *secured) wantPermission(t *testing.T, call string, err error, took time.Duration) {
	t.Helper()
	s.saw(err)
	if !errors.Is(err, lock.ErrPermission) {
		t.Errorf("%s = %v; want an error wrapping %v", call, err, lock.ErrPermission)
		return
	}
	if took > 5*time.Second {
		t.Errorf("%s took %v; want a prompt refusal", call, took)
	}
	t.Logf("refused: %s after %v: %v", call, took.Round(time.Millisecond), err)
}

// TestSecurity runs zklock against an ensemble with a secure client port
// (client certificates required) and digest ACLs: the allowed client
// passes the conformance suite over TLS and digest; clients without the
// certificate, without credentials, with a wrong password or of another
// application are refused with lock.ErrPermission and change nothing;
// credentials survive a reconnect; no secret appears in any error or log.
func TestSecurity(t *testing.T) {
	s := startSecured(t)
	root := uniqueRoot(t)
	appTLS := tlsConfig(t, s.ca.CAFile, s.client)
	app := []zklock.Option{zklock.WithRoot(root), zklock.WithTLS(appTLS), zklock.WithDigest(appUser, appPassword)}

	t.Run("conformance", func(t *testing.T) {
		h := newSecureHarness(t, s, appTLS)
		locktest.TestLockerWith(t, h, locktest.Options{ObserveMaySkip: true, RequireOptional: true})
	})

	// The holder every refused client then tries to disturb, opened the
	// way a user would: credentials from the environment, files by path.
	t.Setenv(passwordEnv, appPassword)
	u := fmt.Sprintf("zk://%s@%s%s?password_env=%s&ca_file=%s&cert_file=%s&key_file=%s&identity=owner",
		appUser, strings.Join(s.secure, ","), root, passwordEnv,
		url.QueryEscape(s.ca.CAFile), url.QueryEscape(s.client.CertFile), url.QueryEscape(s.client.KeyFile))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owner, err := lock.Open(ctx, u)
	if err != nil {
		t.Fatalf("lock.Open(secured URL) = %v", s.saw(err))
	}
	t.Cleanup(func() { owner.Close() })
	held, err := owner.Acquire(ctx, securityName)
	if err != nil {
		t.Fatalf("Acquire() = %v", s.saw(err))
	}
	zl := held.(*zklock.Lease)
	parent := zl.Path()[:strings.LastIndexByte(zl.Path(), '/')]
	untouched := func(t *testing.T) {
		t.Helper()
		if err := held.Err(); err != nil {
			t.Fatalf("the owner's lease ended: %v", err)
		}
		conn := s.rawConn(t, "", "")
		_, st, err := conn.Get(zl.Path())
		if err != nil || st.Version != 0 || st.Czxid != int64(held.Token()) {
			t.Fatalf("the owner's record: stat %+v, %v; want it unchanged", st, err)
		}
		kids, _, err := conn.Children(parent)
		if err != nil || len(kids) != 1 {
			t.Fatalf("records of %q = %v, %v; want only the owner's", securityName, kids, err)
		}
	}

	// refusedLocker tries every call of a Locker that is not allowed to
	// write in root.
	refusedLocker := func(t *testing.T, l *zklock.Locker) {
		t.Helper()
		h, err := l.Holder(ctx, securityName)
		if err != nil || h.Identity != "owner" {
			t.Errorf("Holder() = %+v, %v; want the owner (the root is world-readable)", h, s.saw(err))
		}
		if hs, err := l.Holders(ctx, securityName); err != nil || len(hs) != 1 {
			t.Errorf("Holders() = %v, %v; want the owner", hs, s.saw(err))
		}
		calls := []struct {
			name string
			f    func(context.Context) (lock.Lease, error)
		}{
			{"Acquire", func(ctx context.Context) (lock.Lease, error) { return l.Acquire(ctx, securityName) }},
			{"TryAcquire", func(ctx context.Context) (lock.Lease, error) { return l.TryAcquire(ctx, securityName) }},
			{"AcquireShared", func(ctx context.Context) (lock.Lease, error) { return l.AcquireShared(ctx, securityName) }},
			{"TryAcquireSemaphore", func(ctx context.Context) (lock.Lease, error) {
				return l.TryAcquireSemaphore(ctx, "pool", 2)
			}},
			{"Acquire(new name)", func(ctx context.Context) (lock.Lease, error) { return l.Acquire(ctx, "fresh/name") }},
		}
		for _, c := range calls {
			cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
			begin := time.Now()
			le, err := c.f(cctx)
			ccancel()
			if err == nil {
				_ = le.Release(ctx)
			}
			s.wantPermission(t, c.name, err, time.Since(begin))
		}
		untouched(t)
	}

	t.Run("no credentials", func(t *testing.T) {
		l := s.mustDial(t, zklock.WithRoot(root), zklock.WithTLS(appTLS))
		refusedLocker(t, l)
		conn := s.rawConn(t, "", "")
		tamper(t, s, conn, zl.Path(), parent)
		untouched(t)
	})

	t.Run("wrong password", func(t *testing.T) {
		l := s.mustDial(t, zklock.WithRoot(root), zklock.WithTLS(appTLS), zklock.WithDigest(appUser, wrongPass))
		refusedLocker(t, l)
		conn := s.rawConn(t, appUser, wrongPass)
		tamper(t, s, conn, zl.Path(), parent)
		untouched(t)
	})

	t.Run("other application", func(t *testing.T) {
		// Allowed in its own root...
		l := s.mustDial(t, zklock.WithRoot(root+"-other"), zklock.WithTLS(appTLS), zklock.WithDigest(otherUser, otherPass))
		le, err := l.Acquire(ctx, securityName)
		if err != nil {
			t.Fatalf("Acquire() in its own root = %v", s.saw(err))
		}
		if err := le.Release(ctx); err != nil {
			t.Errorf("Release() = %v", s.saw(err))
		}
		// ...refused in ours.
		ours := s.mustDial(t, zklock.WithRoot(root), zklock.WithTLS(appTLS), zklock.WithDigest(otherUser, otherPass))
		refusedLocker(t, ours)
		conn := s.rawConn(t, otherUser, otherPass)
		tamper(t, s, conn, zl.Path(), parent)
		untouched(t)
	})

	t.Run("untrusted client certificate", func(t *testing.T) {
		begin := time.Now()
		_, err := s.dial(t, s.secure, append(app[:1:1], zklock.WithTLS(tlsConfig(t, s.ca.CAFile, s.rogue)), zklock.WithDigest(appUser, appPassword))...)
		s.wantPermission(t, "Dial(untrusted certificate)", err, time.Since(begin))
		begin = time.Now()
		rogueURL := fmt.Sprintf("zk://%s:%s@%s%s?ca_file=%s&cert_file=%s&key_file=%s", appUser, appPassword, strings.Join(s.secure, ","), root,
			url.QueryEscape(s.ca.CAFile), url.QueryEscape(s.rogue.CertFile), url.QueryEscape(s.rogue.KeyFile))
		l, err := lock.Open(ctx, rogueURL)
		if err == nil {
			l.Close()
		}
		s.wantPermission(t, "lock.Open(untrusted certificate)", err, time.Since(begin))
	})

	t.Run("no client certificate", func(t *testing.T) {
		begin := time.Now()
		_, err := s.dial(t, s.secure, zklock.WithRoot(root), zklock.WithTLS(tlsConfig(t, s.ca.CAFile, certs.Pair{})))
		s.wantPermission(t, "Dial(no client certificate)", err, time.Since(begin))
	})

	t.Run("expired client certificate", func(t *testing.T) {
		begin := time.Now()
		_, err := s.dial(t, s.secure, zklock.WithRoot(root), zklock.WithTLS(tlsConfig(t, s.ca.CAFile, s.expired)), zklock.WithDigest(appUser, appPassword))
		s.wantPermission(t, "Dial(expired certificate)", err, time.Since(begin))
	})

	t.Run("untrusted server", func(t *testing.T) {
		begin := time.Now()
		_, err := s.dial(t, s.secure, zklock.WithRoot(root), zklock.WithTLS(tlsConfig(t, s.rogueCA.CAFile, s.client)), zklock.WithDigest(appUser, appPassword))
		s.wantPermission(t, "Dial(untrusted server)", err, time.Since(begin))
	})

	t.Run("bad configuration", func(t *testing.T) {
		hosts := strings.Join(s.secure, ",")
		for _, raw := range []string{
			fmt.Sprintf("zk://%s:%s@%s%s?ca_file=%s", appUser, appPassword, hosts, root, url.QueryEscape(filepath.Join(t.TempDir(), "missing.pem"))),
			fmt.Sprintf("zk://%s:%s@%s%s?ca_file=%s&cert_file=%s", appUser, appPassword, hosts, root, url.QueryEscape(s.ca.CAFile), url.QueryEscape(s.client.CertFile)),
			fmt.Sprintf("zk://%s:%s@%s%s?cert_file=%s&key_file=%s", appUser, appPassword, hosts, root, url.QueryEscape(s.client.CertFile), url.QueryEscape(s.rogue.KeyFile)),
			fmt.Sprintf("zk://%s@%s%s?password_env=FENCELOCK_ZKTEST_UNSET", appUser, hosts, root),
			fmt.Sprintf("zk://%s@%s%s", appUser, hosts, root),
			fmt.Sprintf("zk://:%s@%s%s", appPassword, hosts, root),
		} {
			l, err := lock.Open(ctx, raw)
			if err == nil {
				l.Close()
			}
			s.saw(err)
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Errorf("lock.Open(%s) = %v; want an error wrapping %v", secure.Redact(raw, appPassword), err, lock.ErrInvalidConfig)
				continue
			}
			t.Logf("invalid: %v", err)
		}
	})

	t.Run("reconnect keeps the credentials", func(t *testing.T) {
		var g testutil.Gate
		var dials atomic.Int32
		dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
			dials.Add(1)
			return g.ZKDialer()(network, addr, timeout)
		}
		l := s.mustDial(t, append(app, zklock.WithDialer(dial))...)
		le, err := l.Acquire(ctx, "reconnect/a")
		if err != nil {
			t.Fatalf("Acquire() = %v", s.saw(err))
		}
		before := dials.Load()
		g.Cut()
		g.Heal()
		// A name never used needs CREATE on the root, which only the
		// digest identity has: it must have been sent on the new
		// connection.
		le2, err := l.Acquire(ctx, "reconnect/b")
		if err != nil {
			t.Fatalf("Acquire() after the reconnect = %v", s.saw(err))
		}
		if dials.Load() == before {
			t.Fatalf("no new connection was made after the cut")
		}
		if err := le.Err(); err != nil {
			t.Errorf("the lease from before the reconnect ended: %v", err)
		}
		for _, x := range []lock.Lease{le, le2} {
			if err := x.Release(ctx); err != nil {
				t.Errorf("Release() after the reconnect = %v", s.saw(err))
			}
		}
	})

	t.Run("restart of the member keeps the credentials", func(t *testing.T) {
		// One server only, so the Locker reconnects to the same one.
		l, err := s.dial(t, s.secure[2:], append(app, zklock.WithSessionTimeout(20*time.Second))...)
		if err != nil {
			t.Fatalf("Dial() = %v", err)
		}
		le, err := l.Acquire(ctx, "restart/a")
		if err != nil {
			t.Fatalf("Acquire() = %v", s.saw(err))
		}
		m := s.c.Members[2]
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := m.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		le2, err := l.Acquire(ctx, "restart/b")
		if err != nil {
			t.Fatalf("Acquire() after the restart = %v", s.saw(err))
		}
		if err := le.Err(); err != nil {
			t.Errorf("the lease from before the restart ended: %v", err)
		}
		for _, x := range []lock.Lease{le, le2} {
			if err := x.Release(ctx); err != nil {
				t.Errorf("Release() after the restart = %v", s.saw(err))
			}
		}
	})

	if err := held.Release(ctx); err != nil {
		t.Errorf("owner Release() = %v", s.saw(err))
	}

	// Last: no secret in anything the test saw.
	s.mu.Lock()
	texts := append([]string{s.logs.String()}, s.seen...)
	s.mu.Unlock()
	secrets := append(append([]string{}, s.passwords...), s.keyPEMs...)
	for _, k := range s.keyPEMs {
		// The base64 body of each key, line by line.
		for _, line := range strings.Split(k, "\n") {
			if len(line) > 20 && !strings.HasPrefix(line, "-----") {
				secrets = append(secrets, line)
			}
		}
	}
	for _, text := range texts {
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("a secret appears in the output: %q", secure.Redact(text, secrets...))
			}
		}
	}
	t.Logf("checked %d errors and %d bytes of log for %d secrets", len(s.seen), len(s.logs.String()), len(secrets))
}

// tamper tries, on conn, everything that would change or fake the owner's
// record, and checks that the server refuses each one.
func tamper(t *testing.T, s *secured, conn *zk.Conn, path, parent string) {
	t.Helper()
	fake := parent + "/~00000000000000000000000000000000~"
	attempts := []struct {
		name string
		f    func() error
	}{
		{"Delete(record)", func() error { return conn.Delete(path, -1) }},
		{"SetData(record)", func() error { _, err := conn.Set(path, []byte("mallory"), -1); return err }},
		{"SetACL(record)", func() error { _, err := conn.SetACL(path, zk.WorldACL(zk.PermAll), -1); return err }},
		{"Create(fake record)", func() error {
			_, err := conn.Create(fake, []byte("mallory"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			return err
		}},
		{"Delete(parent)", func() error { return conn.Delete(parent, -1) }},
	}
	for _, a := range attempts {
		err := a.f()
		s.saw(err)
		if !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s = %v; want %v", a.name, err, zk.ErrNoAuth)
		}
	}
}

// secureHarness is the conformance harness over TLS and digest. Its
// Lockers dial through a gate (for SessionStaller) and a dialer that
// records the session password (for SessionExpirer); that dialer must see
// the plain protocol, so the test runs TLS inside the dialer here, with
// the same configuration WithTLS takes. WithTLS itself carries every
// other Locker of TestSecurity.
type secureHarness struct {
	*harness
	s   *secured
	cfg *tls.Config
}

func newSecureHarness(t *testing.T, s *secured, cfg *tls.Config) *secureHarness {
	t.Helper()
	h := &harness{servers: s.secure, root: uniqueRoot(t), sess: newSessions(), gates: map[*zklock.Locker]*testutil.Gate{}}
	// The admin reads the tree on the plain port, with the digest.
	h.admin = adminOn(t, s.rawConn(t, appUser, appPassword))
	return &secureHarness{harness: h, s: s, cfg: cfg}
}

func (h *secureHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	g := new(testutil.Gate)
	l := h.dial(t, zklock.WithIdentity(identity), zklock.WithDigest(appUser, appPassword), zklock.WithLogger(h.s.logger),
		zklock.WithDialer(h.sess.dialerVia(tlsVia(g.ZKDialer(), h.cfg))))
	h.mu.Lock()
	h.gates[l] = g
	h.mu.Unlock()
	return l
}

// ExpireSession closes the session from the plain port, where the
// password sniffed from the TLS stream attaches to it.
func (h *secureHarness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	expireSession(t, h.sess, h.s.c.Endpoints(), l.(*zklock.Locker))
}

// tlsVia returns a dialer running a TLS handshake over dial's
// connections.
func tlsVia(dial zk.Dialer, cfg *tls.Config) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		raw, err := dial(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(raw, c)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			raw.Close()
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	}
}
