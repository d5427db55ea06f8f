package etcdlock

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
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

// TestRefusal is the table of errors that mean "the cluster refused this
// client" (wrapped with lock.ErrPermission, not retried) and of those that
// do not.
func TestRefusal(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"permission denied", rpctypes.ErrPermissionDenied, true},
		{"permission denied, wrapped", fmt.Errorf("txn: %w", rpctypes.ErrPermissionDenied), true},
		{"permission denied, gRPC form", rpctypes.ErrGRPCPermissionDenied, true},
		{"authentication failed", rpctypes.ErrAuthFailed, true},
		{"user name empty", rpctypes.ErrUserEmpty, true},
		{"invalid auth token", rpctypes.ErrInvalidAuthToken, true},
		{"user not found", rpctypes.ErrUserNotFound, true},
		{"gRPC PermissionDenied", status.Error(codes.PermissionDenied, "no"), true},
		{"gRPC Unauthenticated", status.Error(codes.Unauthenticated, "who?"), true},
		{"unknown authority", fmt.Errorf("handshake: %w", x509.UnknownAuthorityError{}), true},
		{"expired certificate", x509.CertificateInvalidError{Reason: x509.Expired}, true},
		{"wrong host name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, true},
		{"verification error", &tls.CertificateVerificationError{Err: errors.New("x")}, true},

		{"auth not enabled", rpctypes.ErrAuthNotEnabled, false},
		{"auth old revision (the client retries it)", rpctypes.ErrAuthOldRevision, false},
		{"no leader", rpctypes.ErrNoLeader, false},
		{"lease not found", rpctypes.ErrLeaseNotFound, false},
		{"request too large", rpctypes.ErrRequestTooLarge, false},
		{"deadline", context.DeadlineExceeded, false},
		{"gRPC Unavailable", status.Error(codes.Unavailable, "connection refused"), false},
		{"connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, false},
		{"remote error not from crypto/tls", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err != nil && isRefusal(tt.err); got != tt.want {
				t.Fatalf("isRefusal(%v) = %v; want %v", tt.err, got, tt.want)
			}
			got := secure.Refusal(tt.err, isRefusal)
			if errors.Is(got, lock.ErrPermission) != tt.want {
				t.Fatalf("Refusal(%v) = %v; want wrapping %v: %v", tt.err, got, lock.ErrPermission, tt.want)
			}
			if tt.err != nil && !errors.Is(got, tt.err) {
				t.Errorf("Refusal(%v) = %v; want the cause kept", tt.err, got)
			}
			if tt.want && retryable(tt.err) && isEtcdError(tt.err) {
				t.Errorf("retryable(%v) = true; want a refusal not retried", tt.err)
			}
		})
	}
	once := secure.Refusal(rpctypes.ErrPermissionDenied, isRefusal)
	if again := secure.Refusal(once, isRefusal); again != once {
		t.Errorf("Refusal(Refusal(err)) = %v; want it unchanged", again)
	}
}

func isEtcdError(err error) bool {
	var ee rpctypes.EtcdError
	return errors.As(err, &ee)
}

// testCA is a throwaway authority for handshakes in memory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for 127.0.0.1 valid until notAfter.
func (ca *testCA) issue(t *testing.T, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSWatch runs real handshakes against a server that requires a
// client certificate from its authority, through the credentials a Locker
// opened by URL uses, and checks what the watch concludes: a refusal on
// either side (the server's certificate does not verify; the server
// rejects ours, which with TLS 1.3 the client learns on its first read)
// makes err wrap lock.ErrPermission and fires the waiters; an accepted
// client clears it; a failure that is not about certificates is ignored.
func TestTLSWatch(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	good := ca.issue(t, time.Now().Add(time.Hour))
	expired := ca.issue(t, time.Now().Add(-time.Hour))
	stranger := other.issue(t, time.Now().Add(time.Hour))
	server := &tls.Config{Certificates: []tls.Certificate{good}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}

	tests := []struct {
		name    string
		server  *tls.Config
		client  *tls.Config
		refused bool
	}{
		{"accepted", server, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{good}}, false},
		{"server not trusted", server, &tls.Config{RootCAs: other.pool, Certificates: []tls.Certificate{good}}, true},
		{"client certificate from another authority", server, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{stranger}}, true},
		{"client certificate expired", server, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{expired}}, true},
		{"no client certificate", server, &tls.Config{RootCAs: ca.pool}, true},
		{"client certificate, TLS 1.2", server, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{stranger}, MaxVersion: tls.VersionTLS12}, true},
		{"no common protocol version", &tls.Config{Certificates: []tls.Certificate{good}, MinVersion: tls.VersionTLS13},
			&tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{good}, MaxVersion: tls.VersionTLS12}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serveTLS(t, tt.server)
			w := newRefusals(1)
			fired := make(chan struct{})
			stop := w.onRefusal(func() { close(fired) })
			defer stop()
			handshake(t, w, tt.client, addr)
			err := w.err()
			if got := errors.Is(err, lock.ErrPermission); got != tt.refused {
				t.Fatalf("after the handshake, err() = %v; want refused = %v", err, tt.refused)
			}
			select {
			case <-fired:
				if !tt.refused {
					t.Errorf("the waiter fired for a client that was not refused")
				}
			default:
				if tt.refused {
					t.Errorf("the waiter did not fire for a refused client")
				}
			}
			if !tt.refused {
				return
			}
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("err() = %q; want the member's address in it", err)
			}
			// A later working connection to the member clears the refusal.
			w.note(addr, nil)
			if err := w.err(); err != nil {
				t.Errorf("after a working connection, err() = %v; want nil", err)
			}
		})
	}
}

// TestTLSWatchAllEndpoints checks that one member refusing is not enough:
// the others may still take the client.
func TestTLSWatchAllEndpoints(t *testing.T) {
	w := newRefusals(2)
	refused := x509.UnknownAuthorityError{}
	w.note("a:1", refused)
	if err := w.err(); err != nil {
		t.Fatalf("one of two refused: err() = %v; want nil", err)
	}
	ctx, release := w.context(context.Background())
	defer release()
	w.note("b:1", refused)
	if err := w.err(); !errors.Is(err, lock.ErrPermission) {
		t.Fatalf("both refused: err() = %v; want %v", err, lock.ErrPermission)
	}
	select {
	case <-ctx.Done():
	default:
		t.Fatalf("both refused: the call's context was not cancelled")
	}
	if ctx, release := w.context(context.Background()); ctx.Err() == nil {
		release()
		t.Fatalf("a context taken while refused is not cancelled")
	}
	var nilWatch *refusals
	if err := nilWatch.err(); err != nil {
		t.Fatalf("nil watch: err() = %v", err)
	}
}

// serveTLS accepts connections on 127.0.0.1 with cfg (and HTTP/2's ALPN
// name, which gRPC requires), handshakes, writes a byte and closes each.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, cfg)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				_, _ = tc.Write([]byte{1})
			}
			tc.Close()
		}
	}()
	return ln.Addr().String()
}

// handshake connects to addr through w's credentials and reads the first
// byte, as gRPC reads the server's preface.
func handshake(t *testing.T, w *refusals, cfg *tls.Config, addr string) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := w.credentials(cfg).ClientHandshake(ctx, addr, raw)
	if err != nil {
		t.Logf("handshake: %v", err)
		return
	}
	_, err = io.ReadFull(conn, make([]byte, 1))
	t.Logf("first read: %v", err)
}
