package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// writePair writes a self-signed certificate and its key to dir and
// returns their paths and the key's PEM text.
func writePair(t *testing.T, dir, name string) (cert, key string, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, keyPEM
}

func TestTLSFromQuery(t *testing.T) {
	dir := t.TempDir()
	cert, key, keyPEM := writePair(t, dir, "client")
	other, _, _ := writePair(t, dir, "other")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		query   string
		on      bool
		certs   int
		roots   bool
		server  string
		wantErr string // "" for success
	}{
		{query: ""},
		{query: "tls=false"},
		{query: "tls=true", on: true},
		{query: "ca_file=" + cert, on: true, roots: true},
		{query: "ca_file=" + cert + "&cert_file=" + cert + "&key_file=" + key + "&server_name=localhost", on: true, certs: 1, roots: true, server: "localhost"},
		{query: "cert_file=" + cert + "&key_file=" + key, on: true, certs: 1},
		{query: "tls=maybe", wantErr: `tls="maybe": want true or false`},
		{query: "tls=false&ca_file=" + cert, wantErr: "tls=false contradicts ca_file"},
		{query: "ca_file=", wantErr: "ca_file: empty"},
		{query: "ca_file=" + missing, wantErr: "ca_file: open " + missing},
		{query: "ca_file=" + garbage, wantErr: "no PEM certificate in it"},
		{query: "cert_file=" + cert, wantErr: "cert_file without key_file"},
		{query: "key_file=" + key, wantErr: "key_file without cert_file"},
		{query: "cert_file=" + other + "&key_file=" + key, wantErr: "private key does not match public key"},
		{query: "cert_file=" + cert + "&key_file=" + garbage, wantErr: "key_file"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := TLSFromQuery(q)
			if tt.wantErr != "" {
				if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("TLSFromQuery() = %v; want an error wrapping %v that says %q", err, lock.ErrInvalidConfig, tt.wantErr)
				}
				if strings.Contains(err.Error(), string(keyPEM[40:80])) {
					t.Errorf("TLSFromQuery() = %q; want no key material in it", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("TLSFromQuery() = %v; want no error", err)
			}
			if (cfg != nil) != tt.on {
				t.Fatalf("TLSFromQuery() = %v; want TLS on = %v", cfg, tt.on)
			}
			if cfg == nil {
				return
			}
			if len(cfg.Certificates) != tt.certs || (cfg.RootCAs != nil) != tt.roots || cfg.ServerName != tt.server {
				t.Errorf("TLSFromQuery() = %d certificates, roots %v, server name %q; want %d, %v, %q",
					len(cfg.Certificates), cfg.RootCAs != nil, cfg.ServerName, tt.certs, tt.roots, tt.server)
			}
		})
	}
}

const pw = "Tz8qLm4w"

func TestCredentialsFromURL(t *testing.T) {
	env := map[string]string{"APP_PW": pw}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		url     string
		want    Credentials
		ok      bool
		wantErr string
	}{
		{url: "x://h:1/a"},
		{url: "x://app:" + pw + "@h:1/a", want: Credentials{"app", pw}, ok: true},
		{url: "x://app:p%40ss@h:1/a", want: Credentials{"app", "p@ss"}, ok: true},
		{url: "x://app@h:1/a?password_env=APP_PW", want: Credentials{"app", pw}, ok: true},
		{url: "x://app@h:1/a", wantErr: `user "app" has no password`},
		{url: "x://app:@h:1/a", wantErr: `empty password in the URL for user "app"`},
		{url: "x://:" + pw + "@h:1/a", wantErr: "empty user name"},
		{url: "x://h:1/a?password_env=APP_PW", wantErr: "password_env without a user"},
		{url: "x://app:" + pw + "@h:1/a?password_env=APP_PW", wantErr: "a password in the URL and password_env"},
		{url: "x://app@h:1/a?password_env=NOPE", wantErr: "environment variable NOPE is empty or unset"},
		{url: "x://app@h:1/a?password_env=", wantErr: "password_env: empty variable name"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			c, ok, err := CredentialsFromURL(u, u.Query(), getenv)
			if tt.wantErr != "" {
				if !errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CredentialsFromURL() = %v; want an error wrapping %v that says %q", err, lock.ErrInvalidConfig, tt.wantErr)
				}
				if strings.Contains(err.Error(), pw) {
					t.Errorf("CredentialsFromURL() = %q; want the password left out", err)
				}
				return
			}
			if err != nil || ok != tt.ok || c != tt.want {
				t.Fatalf("CredentialsFromURL() = %v, %v, %v; want %v, %v, nil", c, ok, err, tt.want, tt.ok)
			}
		})
	}
}

func TestCredentialsPrintNoPassword(t *testing.T) {
	c := Credentials{User: "app", Password: pw}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		if s := fmt.Sprintf(verb, c); strings.Contains(s, pw) || !strings.Contains(s, "app") {
			t.Errorf("Sprintf(%q, credentials) = %q; want the user and not the password", verb, s)
		}
	}
	if s := fmt.Sprintf("%v", &c); strings.Contains(s, pw) {
		t.Errorf("Sprintf(%%v, &credentials) = %q; want the password left out", s)
	}
}

func TestRedact(t *testing.T) {
	got := Redact("dial app:"+pw+"@h: failed, "+pw, pw, "")
	if want := "dial app:<redacted>@h: failed, <redacted>"; got != want {
		t.Errorf("Redact() = %q; want %q", got, want)
	}
}

// FuzzCredentialsFromURL: whatever the URL, the result is an error
// wrapping ErrInvalidConfig or credentials with a user and a password,
// and no error repeats the password.
func FuzzCredentialsFromURL(f *testing.F) {
	for _, s := range []string{"x://app:" + pw + "@h:1/a", "x://app@h:1/a?password_env=P", "x://:@h:1", "x://h:1/?password_env=", "x://a%zz@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return
		}
		c, ok, err := CredentialsFromURL(u, q, func(k string) string { return map[string]string{"P": pw}[k] })
		if err != nil {
			if !errors.Is(err, lock.ErrInvalidConfig) {
				t.Fatalf("CredentialsFromURL(%q) = %v; want an error wrapping %v", raw, err, lock.ErrInvalidConfig)
			}
			if p, has := u.User.Password(); has && len(p) >= 8 && strings.Contains(err.Error(), p) {
				t.Fatalf("CredentialsFromURL(%q) = %q; want the password left out", raw, err)
			}
			return
		}
		if ok != (u.User != nil) || ok && (c.User == "" || c.Password == "") {
			t.Fatalf("CredentialsFromURL(%q) = %v, %v; want a user and a password exactly when the URL has a user", raw, c, ok)
		}
	})
}

func TestRefusal(t *testing.T) {
	refused := errors.New("refused by the server")
	other := errors.New("connection reset")
	isRefused := func(err error) bool { return errors.Is(err, refused) }
	if got := Refusal(nil, isRefused); got != nil {
		t.Errorf("Refusal(nil) = %v; want nil", got)
	}
	if got := Refusal(other, isRefused); got != other {
		t.Errorf("Refusal(%v) = %v; want it unchanged", other, got)
	}
	got := Refusal(refused, isRefused)
	if !errors.Is(got, lock.ErrPermission) || !errors.Is(got, refused) {
		t.Errorf("Refusal(%v) = %v; want it wrapped with lock.ErrPermission, cause kept", refused, got)
	}
	if again := Refusal(got, isRefused); again != got {
		t.Errorf("Refusal(Refusal(err)) = %v; want it unchanged", again)
	}
}
