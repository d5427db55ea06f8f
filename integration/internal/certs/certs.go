// Package certs makes the certificates of the secured-cluster tests: a
// certificate authority, and server and client certificates it signs,
// written as PEM files that etcd, ZooKeeper and the clients read.
//
// Every certificate is valid for the servers' loopback names (IP
// 127.0.0.1 and DNS localhost) and for both server and client
// authentication, so one certificate can serve a member and its peers.
// Keys are ECDSA P-256 in PKCS #8 ("PRIVATE KEY"), the form both etcd
// and ZooKeeper's PEM key store read.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Authority is a certificate authority whose files live in a directory.
type Authority struct {
	// CAFile is the PEM file of the authority's certificate: what a
	// client or server that trusts this authority reads.
	CAFile string
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
}

// Pair is an issued certificate and its key.
type Pair struct {
	// CertFile and KeyFile are the PEM files of the certificate and of
	// its private key.
	CertFile, KeyFile string
	// BundleFile holds the key and the certificate in one PEM file, the
	// form of ZooKeeper's PEM key store.
	BundleFile string
	// Name is the certificate's common name (etcd takes it as the user
	// of a request authenticated by its certificate).
	Name string
}

var serial atomic.Int64

// NewAuthority creates an authority named name with its files in dir,
// valid from an hour ago for a day.
func NewAuthority(dir, name string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"fencelock tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	a := &Authority{CAFile: filepath.Join(dir, name+"-ca.crt"), dir: dir, cert: cert, key: key}
	if err := os.WriteFile(a.CAFile, pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return nil, err
	}
	return a, nil
}

// Issue signs a certificate for name, valid from an hour ago for a day.
func (a *Authority) Issue(name string) (Pair, error) {
	now := time.Now()
	return a.IssueValid(name, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// IssueValid signs a certificate for name valid from notBefore to
// notAfter: one whose notAfter is past is expired.
func (a *Authority) IssueValid(name string, notBefore, notAfter time.Time) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return Pair{}, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	base := filepath.Join(a.dir, fmt.Sprintf("%s-%d", name, serial.Load()))
	p := Pair{CertFile: base + ".crt", KeyFile: base + ".key", BundleFile: base + ".pem", Name: name}
	certPEM, keyPEM := pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
	for _, f := range []struct {
		path string
		data []byte
	}{{p.CertFile, certPEM}, {p.KeyFile, keyPEM}, {p.BundleFile, append(append([]byte{}, keyPEM...), certPEM...)}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return Pair{}, err
		}
	}
	return p, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
