package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/certs"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// refusalBound is how soon a refused call must return: well under the
// calls' own deadline, so not after a timeout or a retry loop.
const refusalBound = 2 * time.Second

// secured is a secured cluster with its users and certificates.
type secured struct {
	sec       *cluster.EtcdSecurity
	c         *cluster.Cluster
	root      *clientv3.Client // authenticated as root by its certificate
	client    certs.Pair       // trusted, common name not a user
	expired   certs.Pair       // trusted authority, expired
	untrusted certs.Pair       // from another authority
	rogueCA   string           // that authority's certificate
	passwords map[string]string
	secrets   []string // everything that must never be printed
}

// Users of the secured cluster, and the prefix each role covers.
const (
	secPrefix   = "secapp"   // our application's prefix
	otherPrefix = "otherapp" // another application's
)

func startSecured(t *testing.T) *secured {
	t.Helper()
	sec := cluster.NewEtcdSecurity(t)
	c := cluster.FromEnv(t).Start(t, cluster.Etcd, cluster.WithEtcdSecurity(sec))
	s := &secured{sec: sec, c: c, passwords: map[string]string{}}
	users := []cluster.EtcdUser{
		{Name: "app", Perm: "readwrite", Prefixes: []string{secPrefix + "/"}},
		{Name: "reader", Perm: "read", Prefixes: []string{secPrefix + "/"}},
		{Name: "other", Perm: "readwrite", Prefixes: []string{otherPrefix + "/"}},
		{Name: "revokee", Perm: "readwrite", Prefixes: []string{secPrefix + "/"}},
	}
	for i := range users {
		users[i].Password = cluster.RandomSecret()
		s.passwords[users[i].Name] = users[i].Password
		s.secrets = append(s.secrets, users[i].Password)
	}
	s.secrets = append(s.secrets, sec.RootPassword)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sec.Enable(ctx, c, users...); err != nil {
		t.Fatalf("Enable() = %v", err)
	}
	var err error
	if s.client, err = sec.CA.Issue("client"); err != nil {
		t.Fatal(err)
	}
	if s.expired, err = sec.CA.IssueValid("app", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	rogue, err := certs.NewAuthority(t.TempDir(), "rogue")
	if err != nil {
		t.Fatal(err)
	}
	if s.untrusted, err = rogue.Issue("app"); err != nil {
		t.Fatal(err)
	}
	s.rogueCA = rogue.CAFile
	for _, p := range []certs.Pair{sec.Server, sec.Root, s.client, s.expired, s.untrusted} {
		s.secrets = append(s.secrets, keyLines(t, p.KeyFile)...)
	}
	tlsCfg, err := sec.ClientTLS(sec.Root)
	if err != nil {
		t.Fatal(err)
	}
	s.root = testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg})
	return s
}

// keyLines returns the base64 lines of a PEM key file: any of them in an
// output means key material leaked.
func keyLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) >= 16 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// urlOf builds a lock.Open URL: user info (password from the env var
// FENCELOCK_TEST_PW_<user> when viaEnv), TLS files, prefix and identity.
func (s *secured) urlOf(user string, viaEnv bool, ca string, cert certs.Pair, prefix, identity string) string {
	u := url.URL{Scheme: "etcd", Host: strings.Join(s.c.Endpoints(), ","), Path: "/" + prefix}
	q := url.Values{}
	switch {
	case user == "":
	case viaEnv:
		u.User = url.User(user)
		q.Set("password_env", "FENCELOCK_TEST_PW_"+user)
	default:
		u.User = url.UserPassword(user, s.passwords[user])
	}
	if ca != "" {
		q.Set("ca_file", ca)
	}
	if cert.CertFile != "" {
		q.Set("cert_file", cert.CertFile)
		q.Set("key_file", cert.KeyFile)
	}
	q.Set("ttl", "2s")
	if identity != "" {
		q.Set("identity", identity)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// output collects everything the test prints or is told: slog records,
// the process's stderr (the etcd and gRPC clients' own loggers), and the
// texts of every error the test sees.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// captureStderr sends file descriptor 2 into out until the returned
// function is called.
func captureStderr(t *testing.T, out io.Writer) func() {
	t.Helper()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(out, r) }()
	return func() {
		_ = syscall.Dup3(saved, 2, 0)
		syscall.Close(saved)
		w.Close()
		<-done
		r.Close()
	}
}

func TestSecurity(t *testing.T) {
	begin := time.Now()
	s := startSecured(t)
	t.Logf("secured cluster ready in %v", time.Since(begin).Round(time.Millisecond))

	out := new(output)
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	prevDefault := slog.Default()
	slog.SetDefault(logger) // the default logger of Lockers made by lock.Open
	restoreStderr := captureStderr(t, out)
	defer func() {
		restoreStderr()
		slog.SetDefault(prevDefault)
		all := out.String()
		for _, sec := range s.secrets {
			if strings.Contains(all, sec) {
				t.Errorf("a secret (%.4s…) appears in the captured output", sec)
			}
		}
		t.Logf("checked %d bytes of errors, logs and stderr for %d secrets", len(all), len(s.secrets))
	}()
	seen := func(err error) error {
		if err != nil {
			fmt.Fprintf(out, "error: %v\n%+v\n%#v\n", err, err, err)
		}
		return err
	}
	for user, pw := range s.passwords {
		t.Setenv("FENCELOCK_TEST_PW_"+user, pw)
	}
	ca := s.sec.CA.CAFile
	ctx := context.Background()

	t.Run("conformance", func(t *testing.T) {
		h := &secHarness{s: s, seen: seen}
		begin := time.Now()
		locktest.TestLockerWith(t, h, locktest.Options{Rounds: 15, Lockers: 3, Goroutines: 3, Timeout: 10 * time.Second})
		t.Logf("conformance over TLS and auth: %v", time.Since(begin).Round(time.Millisecond))
	})

	// open opens a Locker, closed at the end of the test.
	open := func(t *testing.T, raw string) (lock.Locker, error) {
		t.Helper()
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := lock.Open(octx, raw)
		if err == nil {
			t.Cleanup(func() { l.Close() })
		}
		return l, seen(err)
	}

	// Each case is refused: at Open or by every call, with err wrapping
	// want, within refusalBound.
	refusals := []struct {
		name string
		url  string
		want error
	}{
		{"no credentials", s.urlOf("", false, ca, s.client, secPrefix, ""), lock.ErrPermission},
		{"wrong password", strings.Replace(s.urlOf("app", false, ca, s.client, secPrefix, ""), s.passwords["app"], "wrong-"+s.passwords["app"], 1), lock.ErrPermission},
		{"role without the prefix", s.urlOf("other", true, ca, s.client, secPrefix, ""), lock.ErrPermission},
		{"read-only role", s.urlOf("reader", true, ca, s.client, secPrefix, ""), lock.ErrPermission},
		{"untrusted client certificate", s.urlOf("app", true, ca, s.untrusted, secPrefix, ""), lock.ErrPermission},
		{"untrusted client certificate, no credentials", s.urlOf("", false, ca, s.untrusted, secPrefix, ""), lock.ErrPermission},
		{"expired client certificate", s.urlOf("app", true, ca, s.expired, secPrefix, ""), lock.ErrPermission},
		{"no client certificate", s.urlOf("app", true, ca, certs.Pair{}, secPrefix, ""), lock.ErrPermission},
		{"untrusted server", s.urlOf("app", true, s.rogueCA, s.client, secPrefix, ""), lock.ErrPermission},
		{"missing certificate file", s.urlOf("app", true, ca, certs.Pair{CertFile: "/nonexistent/c.crt", KeyFile: "/nonexistent/c.key"}, secPrefix, ""), lock.ErrInvalidConfig},
		{"key file that is not a key", s.urlOf("app", true, ca, certs.Pair{CertFile: s.client.CertFile, KeyFile: s.client.CertFile}, secPrefix, ""), lock.ErrInvalidConfig},
		{"user without a password", strings.Replace(s.urlOf("app", true, ca, s.client, secPrefix, ""), "password_env=FENCELOCK_TEST_PW_app", "password_env=FENCELOCK_TEST_UNSET", 1), lock.ErrInvalidConfig},
	}
	for _, tt := range refusals {
		t.Run("refused/"+tt.name, func(t *testing.T) {
			start := time.Now()
			l, err := open(t, tt.url)
			if d := time.Since(start); d > refusalBound+5*time.Second {
				t.Errorf("Open took %v", d)
			}
			if err != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("lock.Open() = %v; want an error wrapping %v", err, tt.want)
				}
				t.Logf("lock.Open: %v", err)
				return
			}
			if tt.want == lock.ErrInvalidConfig {
				t.Fatalf("lock.Open() = nil; want an error wrapping %v", tt.want)
			}
			name := "r-" + strings.ReplaceAll(tt.name, " ", "-")
			name = strings.ReplaceAll(name, ",", "")
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			calls := []struct {
				call string
				f    func() error
			}{
				{"TryAcquire", func() error { _, err := l.TryAcquire(cctx, name); return err }},
				{"Acquire", func() error { _, err := l.Acquire(cctx, name); return err }},
				{"TryAcquireShared", func() error { _, err := l.(lock.SharedLocker).TryAcquireShared(cctx, name); return err }},
				{"AcquireSemaphore", func() error { _, err := l.(lock.Semaphore).AcquireSemaphore(cctx, name, 2); return err }},
				{"Holder", func() error { _, err := l.Holder(cctx, name); return err }},
				{"Holders", func() error { _, err := l.(lock.HolderLister).Holders(cctx, name); return err }},
			}
			for _, c := range calls {
				start := time.Now()
				err := seen(c.f())
				d := time.Since(start)
				if tt.name == "read-only role" && (c.call == "Holder" || c.call == "Holders") {
					// Reading is what the role allows.
					if err != nil && !errors.Is(err, lock.ErrNotHeld) {
						t.Errorf("%s() = %v; want nil or %v for a reader", c.call, err, lock.ErrNotHeld)
					}
					continue
				}
				if !errors.Is(err, tt.want) {
					t.Errorf("%s() = %v after %v; want an error wrapping %v", c.call, err, d, tt.want)
					continue
				}
				if d > refusalBound {
					t.Errorf("%s() refused after %v; want within %v", c.call, d, refusalBound)
				}
				t.Logf("%s (%v): %v", c.call, d.Round(time.Millisecond), err)
			}
		})
	}

	t.Run("other application cannot touch our records", func(t *testing.T) {
		ours, err := open(t, s.urlOf("app", true, ca, s.client, secPrefix, "ours"))
		if err != nil {
			t.Fatalf("lock.Open(app) = %v", err)
		}
		lease, err := ours.TryAcquire(ctx, "shared-resource")
		if err != nil {
			t.Fatalf("TryAcquire() = %v", err)
		}
		key := lease.(*etcdlock.Lease).Key()
		tlsCfg, err := s.sec.ClientTLS(s.client)
		if err != nil {
			t.Fatal(err)
		}
		other, err := clientv3.New(clientv3.Config{Endpoints: s.c.Endpoints(), TLS: tlsCfg, Username: "other",
			Password: s.passwords["other"], Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("clientv3.New(other) = %v", err)
		}
		defer other.Close()
		fake := strings.TrimSuffix(key, key[strings.LastIndexByte(key, '#')+1:]) + "0000000000000001-1"
		attacks := []struct {
			what string
			f    func() error
		}{
			{"delete our record", func() error { _, err := other.Delete(ctx, key); return err }},
			{"delete our prefix", func() error { _, err := other.Delete(ctx, secPrefix+"/", clientv3.WithPrefix()); return err }},
			{"overwrite our record", func() error { _, err := other.Put(ctx, key, "impostor"); return err }},
			{"put a fake earlier record", func() error { _, err := other.Put(ctx, fake, "impostor"); return err }},
			{"revoke-by-txn", func() error {
				_, err := other.Txn(ctx).Then(clientv3.OpDelete(key)).Commit()
				return err
			}},
		}
		for _, a := range attacks {
			err := seen(a.f())
			if !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("other application: %s = %v; want %v", a.what, err, rpctypes.ErrPermissionDenied)
			}
		}
		// Through fencelock, with our prefix: refused before writing.
		theirs, err := open(t, s.urlOf("other", true, ca, s.client, secPrefix, "impostor"))
		if err != nil {
			t.Fatalf("lock.Open(other) = %v", err)
		}
		if _, err := theirs.Acquire(ctx, "shared-resource"); !errors.Is(seen(err), lock.ErrPermission) {
			t.Errorf("other application: Acquire(our lock) = %v; want %v", err, lock.ErrPermission)
		}
		h, err := ours.Holder(ctx, "shared-resource")
		if err != nil || h.Identity != "ours" || h.Token != lease.Token() {
			t.Errorf("Holder() = %+v, %v; want ours with token %d", h, err, lease.Token())
		}
		resp, err := s.root.Get(ctx, secPrefix+"/shared-resource/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != key || string(resp.Kvs[0].Value) != "ours" {
			t.Errorf("records under our lock = %v, %v; want only ours", resp, err)
		}
		if err := lease.Err(); err != nil {
			t.Errorf("Lease.Err() = %v; want nil", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
	})

	t.Run("permission withdrawn from a holder", func(t *testing.T) {
		l, err := open(t, s.urlOf("revokee", true, ca, s.client, secPrefix, "revokee"))
		if err != nil {
			t.Fatalf("lock.Open(revokee) = %v", err)
		}
		lease, err := l.TryAcquire(ctx, "withdrawn")
		if err != nil {
			t.Fatalf("TryAcquire() = %v", err)
		}
		if _, err := s.root.RoleRevokePermission(ctx, "revokee", secPrefix+"/", clientv3.GetPrefixRangeEnd(secPrefix+"/")); err != nil {
			t.Fatalf("RoleRevokePermission() = %v", err)
		}
		for _, c := range []struct {
			call string
			f    func() error
		}{
			{"Release", func() error { return lease.Release(ctx) }},
			{"Holder", func() error { _, err := l.Holder(ctx, "withdrawn"); return err }},
			{"TryAcquire", func() error { _, err := l.TryAcquire(ctx, "withdrawn-2"); return err }},
		} {
			start := time.Now()
			err := seen(c.f())
			d := time.Since(start)
			if !errors.Is(err, lock.ErrPermission) || d > refusalBound {
				t.Errorf("%s() = %v after %v; want an error wrapping %v within %v", c.call, err, d, lock.ErrPermission, refusalBound)
				continue
			}
			t.Logf("%s (%v): %v", c.call, d.Round(time.Millisecond), err)
		}
	})
}

// secHarness gives the conformance suite Lockers opened by URL as the
// application user over TLS.
type secHarness struct {
	s    *secured
	seen func(error) error
}

var (
	_ locktest.SessionExpirer = (*secHarness)(nil)
	_ locktest.RecordLister   = (*secHarness)(nil)
)

func (h *secHarness) NewLocker(t *testing.T, identity string) lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, h.s.urlOf("app", true, h.s.sec.CA.CAFile, h.s.client, secPrefix, identity))
	if err != nil {
		t.Fatalf("lock.Open() = %v", h.seen(err))
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (h *secHarness) ExpireSession(t *testing.T, l lock.Locker) {
	t.Helper()
	id, ok := testutil.SessionLeaseID(l.(*etcdlock.Locker))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.s.root.Revoke(ctx, id); err != nil {
		t.Fatalf("Revoke(%x) = %v", int64(id), err)
	}
}

func (h *secHarness) Records(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pfx := secPrefix + "/" + name + "/#"
	resp, err := h.s.root.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get(%q) = %v", pfx, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}
