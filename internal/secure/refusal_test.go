package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"
)

func TestCertRefusal(t *testing.T) {
	remote := func(code uint8) error {
		return fmt.Errorf("dial: %w", &net.OpError{Op: "remote error", Err: tls.AlertError(code)})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection refused"), false},
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), true},
		{fmt.Errorf("dial: %w", x509.CertificateInvalidError{Reason: x509.Expired}), true},
		{fmt.Errorf("dial: %w", x509.HostnameError{Host: "zk1"}), true},
		{remote(42), true},  // bad_certificate
		{remote(116), true}, // certificate_required
		{remote(40), true},  // handshake_failure
		{remote(80), false}, // internal_error
		{&net.OpError{Op: "read", Err: tls.AlertError(42)}, true},
		{&net.OpError{Op: "remote error", Err: errors.New("x")}, false},
		{tls.AlertError(70), false}, // protocol_version
	} {
		if got := CertRefusal(c.err); got != c.want {
			t.Errorf("CertRefusal(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
