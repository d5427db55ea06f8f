// Package secure holds what both backends share about TLS and
// credentials: the URL query keys that name certificate files and their
// loading into a *tls.Config, the credentials of a URL (its user
// information, or a password read from the environment), and the
// redaction of secrets from text that is printed.
//
// Errors wrap sentinel.InvalidConfig, carry no package prefix (the backend
// adds its own once), name files by path and keys by name, and never
// repeat a password or the contents of a key file.
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// The URL query keys of TLS and credentials, the same on every backend.
const (
	// KeyTLS turns TLS on ("true") or off ("false"). TLS is on when any
	// of the file keys is given; "tls=true" alone uses the system's
	// roots to verify the servers.
	KeyTLS = "tls"
	// KeyCAFile names a PEM file of the certificates that verify the
	// servers, instead of the system's roots.
	KeyCAFile = "ca_file"
	// KeyCertFile and KeyKeyFile name the PEM files of the client's
	// certificate and private key; one needs the other.
	KeyCertFile = "cert_file"
	KeyKeyFile  = "key_file"
	// KeyServerName is the name verified in the servers' certificates,
	// when it is not the host of the URL.
	KeyServerName = "server_name"
	// KeyPasswordEnv names the environment variable that holds the
	// password of the URL's user ("etcd://app@h:2379/?password_env=X"),
	// so that the password need not be in the URL nor on a command line.
	KeyPasswordEnv = "password_env"
)

// QueryKeys are the keys above, for lock.CheckQuery's allowed list.
var QueryKeys = []string{KeyTLS, KeyCAFile, KeyCertFile, KeyKeyFile, KeyServerName, KeyPasswordEnv}

// Files names the PEM files of a TLS configuration. The zero Files
// verifies the servers with the system's roots and gives no client
// certificate.
type Files struct {
	CA, Cert, Key string
	ServerName    string
}

// TLSFromQuery returns the TLS configuration that q's keys ask for, or
// nil when they ask for none.
func TLSFromQuery(q url.Values) (*tls.Config, error) {
	f := Files{CA: q.Get(KeyCAFile), Cert: q.Get(KeyCertFile), Key: q.Get(KeyKeyFile), ServerName: q.Get(KeyServerName)}
	on := f != (Files{})
	for _, k := range []string{KeyCAFile, KeyCertFile, KeyKeyFile, KeyServerName} {
		if v, ok := q[k]; ok && (len(v) != 1 || v[0] == "") {
			return nil, fmt.Errorf("%w: %s: empty", sentinel.InvalidConfig, k)
		}
	}
	if v, ok := q[KeyTLS]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q: want true or false", sentinel.InvalidConfig, KeyTLS, v[0])
		}
		if !b && on {
			return nil, fmt.Errorf("%w: %s=false contradicts %s", sentinel.InvalidConfig, KeyTLS, strings.Join(given(q), ", "))
		}
		on = b
	}
	if !on {
		return nil, nil
	}
	return LoadTLS(f)
}

// given lists the TLS file keys present in q.
func given(q url.Values) []string {
	var out []string
	for _, k := range []string{KeyCAFile, KeyCertFile, KeyKeyFile, KeyServerName} {
		if _, ok := q[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// LoadTLS reads f into a client TLS configuration (TLS 1.2 at least).
// A file that cannot be read or parsed, or a certificate without its key
// (or the reverse), is an error wrapping lock.ErrInvalidConfig that names
// the file and never shows its contents.
func LoadTLS(f Files) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", sentinel.InvalidConfig, KeyCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s %q: no PEM certificate in it", sentinel.InvalidConfig, KeyCAFile, f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			// The error of a bad pair says what is wrong (no PEM
			// data, a key that does not match) without the key.
			return nil, fmt.Errorf("%w: %s %q and %s %q: %w", sentinel.InvalidConfig, KeyCertFile, f.Cert, KeyKeyFile, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.Cert != "":
		return nil, fmt.Errorf("%w: %s without %s", sentinel.InvalidConfig, KeyCertFile, KeyKeyFile)
	case f.Key != "":
		return nil, fmt.Errorf("%w: %s without %s", sentinel.InvalidConfig, KeyKeyFile, KeyCertFile)
	}
	return cfg, nil
}

// Credentials are a user name and password. Printing them with any verb
// of package fmt shows the user and hides the password.
type Credentials struct {
	User     string
	Password string
}

// String returns the user and a mask in place of the password.
func (c Credentials) String() string { return c.User + ":<redacted>" }

// GoString is String, for %#v.
func (c Credentials) GoString() string { return c.String() }

// CredentialsFromURL returns the credentials of u: its user information,
// the password from the user information or from the environment
// variable named by q's password_env key (read with getenv). It reports
// false when u names no user. A user without a password, a password in
// both places, password_env without a user, an empty or unset variable,
// and an empty user are errors wrapping lock.ErrInvalidConfig; none shows
// a password.
func CredentialsFromURL(u *url.URL, q url.Values, getenv func(string) string) (Credentials, bool, error) {
	env, hasEnv := q[KeyPasswordEnv]
	if u == nil || u.User == nil {
		if hasEnv {
			return Credentials{}, false, fmt.Errorf("%w: %s without a user in the URL (user@host)", sentinel.InvalidConfig, KeyPasswordEnv)
		}
		return Credentials{}, false, nil
	}
	c := Credentials{User: u.User.Username()}
	if c.User == "" {
		return Credentials{}, false, fmt.Errorf("%w: empty user name in the URL", sentinel.InvalidConfig)
	}
	pw, hasPW := u.User.Password()
	switch {
	case hasPW && hasEnv:
		return Credentials{}, false, fmt.Errorf("%w: a password in the URL and %s: give one", sentinel.InvalidConfig, KeyPasswordEnv)
	case hasPW:
		if pw == "" {
			return Credentials{}, false, fmt.Errorf("%w: empty password in the URL for user %q", sentinel.InvalidConfig, c.User)
		}
		c.Password = pw
	case hasEnv:
		if env[0] == "" {
			return Credentials{}, false, fmt.Errorf("%w: %s: empty variable name", sentinel.InvalidConfig, KeyPasswordEnv)
		}
		if getenv == nil {
			getenv = os.Getenv
		}
		c.Password = getenv(env[0])
		if c.Password == "" {
			return Credentials{}, false, fmt.Errorf("%w: %s: environment variable %s is empty or unset", sentinel.InvalidConfig, KeyPasswordEnv, env[0])
		}
	default:
		return Credentials{}, false, fmt.Errorf("%w: user %q has no password: give it in the URL or with %s", sentinel.InvalidConfig, c.User, KeyPasswordEnv)
	}
	return c, true, nil
}

// Redact returns s with every non-empty secret replaced by "<redacted>".
func Redact(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "<redacted>")
		}
	}
	return s
}

// Refusal returns err wrapped with lock.ErrPermission when refused says
// that the server refused the client (its credentials, its certificate or
// its rights: an answer that a second attempt would get again), and err
// unchanged otherwise: nil, not a refusal, or wrapping ErrPermission
// already. Each backend says what its server's refusals look like.
func Refusal(err error, refused func(error) bool) error {
	if err == nil || errors.Is(err, sentinel.Permission) || !refused(err) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel.Permission, err)
}

// Unverified reports whether err is this side's failure to verify the
// peer's certificate in a TLS handshake: an unknown authority, an invalid
// or expired certificate, or a name it is not valid for.
func Unverified(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		cerr x509.CertificateInvalidError
		herr x509.HostnameError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &cerr) || errors.As(err, &herr)
}
