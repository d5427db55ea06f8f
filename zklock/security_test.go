package zklock

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

func TestPermissionMapping(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"ErrNoAuth", zk.ErrNoAuth, true},
		{"wrapped ErrNoAuth", fmt.Errorf("create under /x: %w", zk.ErrNoAuth), true},
		{"ErrAuthFailed", zk.ErrAuthFailed, true},
		{"unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"expired server certificate", x509.CertificateInvalidError{Reason: x509.Expired}, true},
		{"wrong host", x509.HostnameError{Host: "h"}, true},
		{"alert bad certificate", tls.AlertError(42), true},
		{"alert certificate required", tls.AlertError(116), true},
		{"alert protocol version", tls.AlertError(70), false},
		{"already ErrPermission", fmt.Errorf("%w: x", lock.ErrPermission), true},
		{"ErrNoNode", zk.ErrNoNode, false},
		{"ErrConnectionClosed", zk.ErrConnectionClosed, false},
		{"EOF", io.EOF, false},
		{"record header", tls.RecordHeaderError{Msg: "not TLS"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := secure.Refusal(tt.err, isRefusal)
			if errors.Is(got, lock.ErrPermission) != tt.want {
				t.Fatalf("Refusal(%v) = %v; want wrapping ErrPermission: %v", tt.err, got, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("Refusal(%v) = %v; lost the cause", tt.err, got)
			}
			if tt.want && strings.Count(got.Error(), lock.ErrPermission.Error()) != 1 {
				t.Errorf("Refusal(%v) = %q; want %q once", tt.err, got, lock.ErrPermission)
			}
		})
	}
	if got := secure.Refusal(nil, isRefusal); got != nil {
		t.Errorf("Refusal(nil) = %v; want nil", got)
	}
}

func TestDefaultACL(t *testing.T) {
	custom := zk.WorldACL(zk.PermRead)
	tests := []struct {
		name string
		opts []Option
		want []zk.ACL
	}{
		{"no credentials", nil, zk.WorldACL(zk.PermAll)},
		{"digest", []Option{WithDigest("app", "s3cret")}, append(zk.DigestACL(zk.PermAll, "app", "s3cret"), zk.WorldACL(zk.PermRead)...)},
		{"other scheme", []Option{WithAuth("x509x", []byte("k"))}, append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)},
		{"WithACL wins", []Option{WithDigest("app", "s3cret"), WithACL(custom)}, custom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := buildOptions(tt.opts)
			if err != nil {
				t.Fatalf("buildOptions() = %v", err)
			}
			if !slices.Equal(o.acl, tt.want) {
				t.Errorf("acl = %v; want %v", o.acl, tt.want)
			}
		})
	}
	o, _ := buildOptions([]Option{WithDigest("app", "s3cret"), WithAuth("ip", []byte("127.0.0.1"))})
	if got := o.creds(); len(got) != 2 || got[0].scheme != "digest" || string(got[0].secret) != "app:s3cret" {
		t.Errorf("creds() = %d credentials; want the digest first, then the other", len(got))
	}
}

func TestSecurityOptionsInvalid(t *testing.T) {
	const secret = "Pa55-w0rd-xyz"
	tests := []struct {
		name string
		opt  Option
	}{
		{"empty user", WithDigest("", secret)},
		{"colon in user", WithDigest("a:b", secret)},
		{"empty password", WithDigest("app", "")},
		{"empty scheme", WithAuth("", []byte(secret))},
		{"empty secret", WithAuth("digest", nil)},
		{"nil TLS", WithTLS(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Dial(context.Background(), []string{"127.0.0.1:1"}, tt.opt)
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Fatalf("Dial() = %v; want an error wrapping %v", err, lock.ErrInvalidConfig)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Dial() = %q; shows the secret", err)
			}
		})
	}
}

func TestOpenSecurityInvalid(t *testing.T) {
	const secret = "Pa55-w0rd-xyz"
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\n"+secret+"\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZKLOCK_TEST_EMPTY", "")
	for _, raw := range []string{
		"zk://user@127.0.0.1:1/root",
		"zk://user:@127.0.0.1:1/root",
		"zk://:" + secret + "@127.0.0.1:1/root",
		"zk://a%3Ab:" + secret + "@127.0.0.1:1/root",
		"zk://127.0.0.1:1/root?password_env=ZKLOCK_TEST_EMPTY",
		"zk://user@127.0.0.1:1/root?password_env=ZKLOCK_TEST_EMPTY",
		"zk://user:" + secret + "@127.0.0.1:1/root?password_env=X",
		"zk://user:" + secret + "@127.0.0.1:1/root?ca_file=" + filepath.Join(dir, "missing.pem"),
		"zk://user:" + secret + "@127.0.0.1:1/root?ca_file=" + garbage,
		"zk://127.0.0.1:1/root?cert_file=" + garbage,
		"zk://127.0.0.1:1/root?cert_file=" + garbage + "&key_file=" + garbage,
		"zk://127.0.0.1:1/root?tls=maybe",
		"zk://127.0.0.1:1/root?tls=false&ca_file=" + garbage,
	} {
		t.Run(raw, func(t *testing.T) {
			l, err := lock.Open(context.Background(), raw)
			if !errors.Is(err, lock.ErrInvalidConfig) || l != nil {
				if l != nil {
					l.Close()
				}
				t.Fatalf("lock.Open() = %v, %v; want nil and an error wrapping %v", l, err, lock.ErrInvalidConfig)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("lock.Open() = %q; shows the secret", err)
			}
		})
	}
}

// testPKI makes a CA and a certificate it signs for 127.0.0.1, valid
// between notBefore and notAfter.
type testPKI struct {
	pool *x509.CertPool
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{pool: pool, ca: ca, key: key}
}

func (p *testPKI) issue(t *testing.T, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: notBefore, NotAfter: notAfter,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestDialTLSRefusedAtOnce dials a TLS server that refuses the client (or
// that the client cannot trust) and checks that Dial returns an error
// wrapping ErrPermission long before its context ends, instead of
// reconnecting until then. The server only does the handshake: a refusal
// never gets further.
func TestDialTLSRefusedAtOnce(t *testing.T) {
	serverPKI, otherPKI := newTestPKI(t), newTestPKI(t)
	now := time.Now()
	serverCert := serverPKI.issue(t, now.Add(-time.Minute), now.Add(time.Hour))
	goodClient := serverPKI.issue(t, now.Add(-time.Minute), now.Add(time.Hour))
	untrustedClient := otherPKI.issue(t, now.Add(-time.Minute), now.Add(time.Hour))
	expiredClient := serverPKI.issue(t, now.Add(-2*time.Hour), now.Add(-time.Hour))

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    serverPKI.pool,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-served })

	tests := []struct {
		name string
		cfg  *tls.Config
		want string // in the error
	}{
		{"no client certificate", &tls.Config{RootCAs: serverPKI.pool}, "certificate"},
		{"untrusted client certificate", &tls.Config{RootCAs: serverPKI.pool, Certificates: []tls.Certificate{untrustedClient}}, "certificate"},
		{"expired client certificate", &tls.Config{RootCAs: serverPKI.pool, Certificates: []tls.Certificate{expiredClient}}, "certificate"},
		{"untrusted server", &tls.Config{RootCAs: otherPKI.pool, Certificates: []tls.Certificate{goodClient}}, "unknown authority"},
		{"TLS 1.2, untrusted client", &tls.Config{RootCAs: serverPKI.pool, Certificates: []tls.Certificate{untrustedClient}, MaxVersion: tls.VersionTLS12}, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			begin := time.Now()
			l, err := Dial(ctx, []string{ln.Addr().String()}, WithTLS(tt.cfg), WithDigest("app", "Pa55-w0rd-xyz"),
				WithSessionTimeout(4*time.Second), WithLogger(slog.New(slog.DiscardHandler)))
			took := time.Since(begin)
			if err == nil {
				l.Close()
				t.Fatalf("Dial() = nil error; want one wrapping %v", lock.ErrPermission)
			}
			if !errors.Is(err, lock.ErrPermission) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial() = %v; want an error wrapping %v that says %q", err, lock.ErrPermission, tt.want)
			}
			if took > 5*time.Second {
				t.Errorf("Dial() took %v; want a prompt refusal", took)
			}
			if strings.Contains(err.Error(), "Pa55-w0rd-xyz") {
				t.Errorf("Dial() = %q; shows the password", err)
			}
			t.Logf("Dial() after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}
