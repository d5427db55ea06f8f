// Package secure holds what both backends share about TLS and credentials:
// the URL query keys, the loading of certificate files, the credentials of
// a URL, and the redaction of secrets from printed text. Errors wrap
// sentinel.InvalidConfig without a package prefix, name files by path and
// keys by name, and never repeat a password or a key file's contents.
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// The URL query keys of TLS and credentials, the same on every backend.
const (
	KeyTLS        = "tls"         // "true" or "false"; on by default when a file key is given
	KeyCAFile     = "ca_file"     // PEM certificates that verify the servers (default: the system's roots)
	KeyCertFile   = "cert_file"   // the client's PEM certificate; needs key_file
	KeyKeyFile    = "key_file"    // the client's PEM private key; needs cert_file
	KeyServerName = "server_name" // the name verified in the servers' certificates, if not the URL's host
	// KeyPasswordEnv names the environment variable that holds the
	// password of the URL's user ("etcd://app@h:2379/?password_env=X").
	KeyPasswordEnv = "password_env"
)

// QueryKeys are the keys above, for lock.CheckQuery's allowed list.
var QueryKeys = []string{KeyTLS, KeyCAFile, KeyCertFile, KeyKeyFile, KeyServerName, KeyPasswordEnv}

// TLSFromQuery returns the client TLS configuration (TLS 1.2 at least)
// that q's keys ask for, or nil when they ask for none. A file that cannot
// be read or parsed, or a certificate without its key (or the reverse), is
// an error naming the file, never showing its contents.
func TLSFromQuery(q url.Values) (*tls.Config, error) {
	var given []string
	for _, k := range []string{KeyCAFile, KeyCertFile, KeyKeyFile, KeyServerName} {
		if v, ok := q[k]; ok {
			if len(v) != 1 || v[0] == "" {
				return nil, fmt.Errorf("%w: %s: empty", sentinel.InvalidConfig, k)
			}
			given = append(given, k)
		}
	}
	on := len(given) > 0
	if v, ok := q[KeyTLS]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q: want true or false", sentinel.InvalidConfig, KeyTLS, v[0])
		}
		if !b && on {
			return nil, fmt.Errorf("%w: %s=false contradicts %s", sentinel.InvalidConfig, KeyTLS, strings.Join(given, ", "))
		}
		on = b
	}
	if !on {
		return nil, nil
	}
	return loadTLS(q.Get(KeyCAFile), q.Get(KeyCertFile), q.Get(KeyKeyFile), q.Get(KeyServerName))
}

func loadTLS(ca, cert, key, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", sentinel.InvalidConfig, KeyCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s %q: no PEM certificate in it", sentinel.InvalidConfig, KeyCAFile, ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			// The error of a bad pair says what is wrong (no PEM
			// data, a key that does not match) without the key.
			return nil, fmt.Errorf("%w: %s %q and %s %q: %w", sentinel.InvalidConfig, KeyCertFile, cert, KeyKeyFile, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "":
		return nil, fmt.Errorf("%w: %s without %s", sentinel.InvalidConfig, KeyCertFile, KeyKeyFile)
	case key != "":
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

// CredentialsFromURL returns the user of u and the password from u or
// from the environment variable q's password_env names (read with getenv),
// and false when u names no user. A missing, empty or doubly given
// password or user, or password_env without a user, is an error.
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
	case hasPW && pw == "":
		return Credentials{}, false, fmt.Errorf("%w: empty password in the URL for user %q", sentinel.InvalidConfig, c.User)
	case hasPW:
		c.Password = pw
	case hasEnv && env[0] == "":
		return Credentials{}, false, fmt.Errorf("%w: %s: empty variable name", sentinel.InvalidConfig, KeyPasswordEnv)
	case hasEnv:
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

// Refusal returns err wrapped with lock.ErrPermission when refused, the
// backend's test, says the server refused the client (an answer a second
// attempt would get again), and err unchanged otherwise (nil, not a
// refusal, or already wrapping it).
func Refusal(err error, refused func(error) bool) error {
	if err == nil || errors.Is(err, sentinel.Permission) || !refused(err) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel.Permission, err)
}

// CertRefusal reports whether err is a TLS handshake that failed over a
// certificate: this side could not verify the peer's (unverified), or the
// peer refused ours with an alert (RFC 8446, section 6.2). Handshake
// failure (40) counts because ZooKeeper's server sends it when it refuses
// a client certificate.
func CertRefusal(err error) bool {
	if unverified(err) {
		return true
	}
	var aerr tls.AlertError
	if errors.As(err, &aerr) {
		return refusingAlert(uint8(aerr))
	}
	// A received alert is a *net.OpError "remote error" around crypto/tls's
	// unexported alert type, a uint8.
	var oerr *net.OpError
	if !errors.As(err, &oerr) || oerr.Op != "remote error" || oerr.Err == nil {
		return false
	}
	v := reflect.ValueOf(oerr.Err)
	return v.Type().PkgPath() == "crypto/tls" && v.Kind() == reflect.Uint8 && refusingAlert(uint8(v.Uint()))
}

func refusingAlert(code uint8) bool {
	// handshake_failure, bad_certificate, unsupported_certificate,
	// certificate_revoked, certificate_expired, certificate_unknown,
	// unknown_ca, access_denied, certificate_required
	return slices.Contains([]uint8{40, 42, 43, 44, 45, 46, 48, 49, 116}, code)
}

// unverified reports whether err is this side's failure to verify the
// peer's certificate: an unknown authority, an invalid or expired
// certificate, or a name it is not valid for.
func unverified(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		cerr x509.CertificateInvalidError
		herr x509.HostnameError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &cerr) || errors.As(err, &herr)
}
