package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"
	"time"
)

// TestIssue checks that an issued certificate verifies against its
// authority for 127.0.0.1 and for client authentication, that one from
// another authority and an expired one do not, and that the bundle file
// loads as a key pair.
func TestIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewAuthority(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewAuthority(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.Issue("app")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue("app")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.IssueValid("old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	verify := func(p Pair, usage x509.ExtKeyUsage) error {
		kp, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			return err
		}
		if _, err := tls.LoadX509KeyPair(p.BundleFile, p.BundleFile); err != nil {
			return err
		}
		leaf, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			return err
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verify(good, usage); err != nil {
			t.Errorf("Verify(issued, usage %v) = %v; want nil", usage, err)
		}
	}
	var unknown x509.UnknownAuthorityError
	if err := verify(foreign, x509.ExtKeyUsageClientAuth); !errors.As(err, &unknown) {
		t.Errorf("Verify(other authority's) = %v; want an unknown authority error", err)
	}
	var invalid x509.CertificateInvalidError
	if err := verify(expired, x509.ExtKeyUsageClientAuth); !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("Verify(expired) = %v; want an expired certificate error", err)
	}
}
