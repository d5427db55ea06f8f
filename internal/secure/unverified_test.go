package secure

import (
	"crypto/x509"
	"errors"
	"fmt"
	"testing"
)

func TestUnverified(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection refused"), false},
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), true},
		{fmt.Errorf("dial: %w", x509.CertificateInvalidError{Reason: x509.Expired}), true},
		{fmt.Errorf("dial: %w", x509.HostnameError{Host: "zk1"}), true},
	} {
		if got := Unverified(c.err); got != c.want {
			t.Errorf("Unverified(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
