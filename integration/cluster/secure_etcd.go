package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/integration/internal/certs"
)

// EtcdSecurity is the security of a secured etcd cluster: its certificate
// authority and certificates, and the users and roles [EtcdSecurity.Enable]
// creates. Start a cluster with it through [WithEtcdSecurity].
//
// Members serve clients and peers over TLS only (https), require a
// client certificate signed by the authority (--client-cert-auth), and
// verify their peers the same way. The files live in a directory of the
// test's; the containers provider bind-mounts it read-only at the same
// path, so that the flags are the same for both providers.
type EtcdSecurity struct {
	// Dir holds every file.
	Dir string
	// CA is the authority that signs the members' and the clients'
	// certificates.
	CA *certs.Authority
	// Server is the members' certificate (for clients and peers).
	Server certs.Pair
	// Root is a client certificate whose common name is "root": with
	// --client-cert-auth it authenticates as the root user without a
	// password. The harness's health checks use it.
	Root certs.Pair
	// RootPassword is the root user's password.
	RootPassword string

	mu    sync.Mutex
	addrs map[string]bool // client addresses of members started with it
}

// EtcdUser is a user that [EtcdSecurity.Enable] creates, with a role of
// the same name granting Perm on each of Prefixes.
type EtcdUser struct {
	Name, Password string
	// Perm is "read", "write" or "readwrite"; "" gives the user a role
	// with no permission at all.
	Perm     string
	Prefixes []string
}

// NewEtcdSecurity makes an authority, the members' certificate and the
// root client certificate in a temporary directory of t.
func NewEtcdSecurity(t testing.TB) *EtcdSecurity {
	t.Helper()
	dir := t.TempDir()
	// The containers run as root, but a non-root engine would need to
	// read the files through the bind mount.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.NewAuthority(dir, "etcd")
	if err != nil {
		t.Fatalf("cluster: etcd security: %v", err)
	}
	server, err := ca.Issue("etcd-member")
	if err != nil {
		t.Fatalf("cluster: etcd security: %v", err)
	}
	root, err := ca.Issue("root")
	if err != nil {
		t.Fatalf("cluster: etcd security: %v", err)
	}
	s := &EtcdSecurity{Dir: dir, CA: ca, Server: server, Root: root, RootPassword: RandomSecret(), addrs: map[string]bool{}}
	t.Cleanup(s.forget)
	return s
}

// RandomSecret returns 24 random hexadecimal digits, a password no test
// output could contain by chance.
func RandomSecret() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// WithEtcdSecurity starts etcd members with TLS for clients and peers and
// client certificate authentication, from s. Auth (users, roles) is turned
// on afterwards by [EtcdSecurity.Enable]. The cluster's health checks
// connect with s.Root.
func WithEtcdSecurity(s *EtcdSecurity) Option { return func(o *options) { o.etcdSec = s } }

// etcdScheme is the scheme of the members' URLs.
func etcdScheme(o options) string {
	if o.etcdSec != nil {
		return "https"
	}
	return "http"
}

// etcdSecBinds returns the bind mount of s.Dir, read-only at the same
// path, for the containers provider.
func etcdSecBinds(o options) []string {
	if o.etcdSec == nil {
		return nil
	}
	return []string{o.etcdSec.Dir + ":" + o.etcdSec.Dir + ":ro"}
}

// etcdSecArgs returns the TLS flags of a member whose client address is
// addr, and registers addr so that health checks use TLS for it.
func etcdSecArgs(o options, addr string) []string {
	s := o.etcdSec
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.addrs[addr] = true
	s.mu.Unlock()
	secured.Store(addr, s)
	return []string{
		"--cert-file", s.Server.CertFile,
		"--key-file", s.Server.KeyFile,
		"--trusted-ca-file", s.CA.CAFile,
		"--client-cert-auth",
		"--peer-cert-file", s.Server.CertFile,
		"--peer-key-file", s.Server.KeyFile,
		"--peer-trusted-ca-file", s.CA.CAFile,
		"--peer-client-cert-auth",
	}
}

// secured maps the client address of a member started with an
// EtcdSecurity to it, for the health checks (which know only addresses).
var secured sync.Map // string -> *EtcdSecurity

// forget removes s's members from secured, once their cluster is gone.
func (s *EtcdSecurity) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.addrs {
		secured.CompareAndDelete(a, s)
	}
}

// probeTLS returns the TLS configuration of the health checks of the
// member at addr: nil unless it was started with an EtcdSecurity.
func probeTLS(addr string) *tls.Config {
	v, ok := secured.Load(addr)
	if !ok {
		return nil
	}
	cfg, err := v.(*EtcdSecurity).ClientTLS(v.(*EtcdSecurity).Root)
	if err != nil {
		return nil
	}
	return cfg
}

// ClientTLS returns a client TLS configuration that trusts s.CA and
// presents p (none when p is the zero Pair).
func (s *EtcdSecurity) ClientTLS(p certs.Pair) (*tls.Config, error) {
	pem, err := os.ReadFile(s.CA.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if p.CertFile != "" {
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// Enable creates the root user (password s.RootPassword), each user with
// its role, and turns auth on, through c's members with the root
// certificate. etcd's own "root" role is the root user's.
func (s *EtcdSecurity) Enable(ctx context.Context, c *Cluster, users ...EtcdUser) error {
	cfg, err := s.ClientTLS(s.Root)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: cfg, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("cluster: etcd security: %w", err)
	}
	defer cli.Close()
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("cluster: etcd security: %s: %w", what, err)
		}
		return nil
	}
	if _, err := cli.UserAdd(ctx, "root", s.RootPassword); err != nil {
		return step("add user root", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return step("grant root", err)
	}
	for _, u := range users {
		if _, err := cli.RoleAdd(ctx, u.Name); err != nil {
			return step("add role "+u.Name, err)
		}
		for _, p := range u.Prefixes {
			perm, ok := map[string]clientv3.PermissionType{"read": clientv3.PermissionType(clientv3.PermRead), "write": clientv3.PermissionType(clientv3.PermWrite), "readwrite": clientv3.PermissionType(clientv3.PermReadWrite)}[u.Perm]
			if !ok {
				return step("role "+u.Name, fmt.Errorf("permission %q: want read, write or readwrite", u.Perm))
			}
			if _, err := cli.RoleGrantPermission(ctx, u.Name, p, clientv3.GetPrefixRangeEnd(p), perm); err != nil {
				return step("grant "+u.Name+" on "+p, err)
			}
		}
		if _, err := cli.UserAdd(ctx, u.Name, u.Password); err != nil {
			return step("add user "+u.Name, err)
		}
		if _, err := cli.UserGrantRole(ctx, u.Name, u.Name); err != nil {
			return step("grant role to "+u.Name, err)
		}
	}
	return step("enable auth", func() error { _, err := cli.AuthEnable(ctx); return err }())
}

// CertFiles returns the names of every file in s.Dir, for tests that
// check nothing leaks the keys' contents.
func (s *EtcdSecurity) CertFiles() ([]string, error) {
	return filepath.Glob(filepath.Join(s.Dir, "*"))
}
