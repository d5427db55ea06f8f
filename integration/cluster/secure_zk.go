package cluster

import (
	"fmt"
	"os"
	"strings"
)

// ZKSecurity secures a ZooKeeper ensemble: each server gets a TLS client
// port (secureClientPort, bound to 127.0.0.1 like the plain one) served by
// Netty, with the key and certificate of KeyStore, trusting the client
// certificates signed by the authorities in TrustStore. The plain client
// port stays open: the harness's health checks ("srvr", "mntr") use it,
// and the digest ACLs a client sets guard the data on both ports alike.
// Quorum traffic stays plain (on loopback).
//
// The files are read by the servers: the process provider passes their
// paths, the containers provider bind-mounts each one read-only at the
// same path inside the container, and makes them readable by any user
// (mode 0644; the official image runs ZooKeeper as a non-root user).
type ZKSecurity struct {
	// KeyStore is a PEM file holding the servers' private key and their
	// certificate (certs.Pair.BundleFile), valid for 127.0.0.1.
	KeyStore string
	// TrustStore is a PEM file of the certificates of the authorities
	// whose client certificates the servers accept (certs.Authority.CAFile).
	TrustStore string
	// ClientAuth is ZooKeeper's ssl.clientAuth: "need" (the default: a
	// client without a trusted certificate is refused in the handshake),
	// "want" or "none".
	ClientAuth string
}

// WithZKSecurity starts a ZooKeeper ensemble with a secure client port
// per server (see [ZKSecurity] and [Cluster.SecureEndpoints]). etcd
// clusters ignore it.
func WithZKSecurity(s ZKSecurity) Option {
	return func(o *options) { o.zkSecurity = &s }
}

// SecureEndpoints returns every member's secure (TLS) client address, in
// the order of Members, or nil when the cluster was started without
// [WithZKSecurity].
func (c *Cluster) SecureEndpoints() []string {
	return append([]string(nil), c.secureEndpoints...)
}

// checkZKSecurity checks the files of s before any server starts, so that
// a missing file fails the start with its name rather than a server that
// never answers.
func checkZKSecurity(s *ZKSecurity) error {
	if s == nil {
		return nil
	}
	switch s.ClientAuth {
	case "", "need", "want", "none":
	default:
		return fmt.Errorf("cluster: ZKSecurity.ClientAuth %q: want need, want or none", s.ClientAuth)
	}
	for _, f := range []struct{ name, path string }{{"KeyStore", s.KeyStore}, {"TrustStore", s.TrustStore}} {
		if f.path == "" || !strings.HasPrefix(f.path, "/") {
			return fmt.Errorf("cluster: ZKSecurity.%s %q: want an absolute path", f.name, f.path)
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("cluster: ZKSecurity.%s: %w", f.name, err)
		}
	}
	return nil
}

// zkNettyCodec is the jar of Netty's codec classes. The secure client
// port needs Netty's SslHandler (netty-handler, on zookeeper.jar's
// manifest class path), which extends netty-codec's ByteToMessageDecoder;
// Debian's zookeeper.jar does not name netty-codec, although its
// dependency libnetty-java installs it.
const zkNettyCodec = "/usr/share/java/netty-codec.jar"

// zkSecureClasspath returns the process provider's class path with
// netty-codec added when the ensemble is secured.
func zkSecureClasspath(o options, cp string) (string, error) {
	if o.zkSecurity == nil || strings.Contains(cp, "netty-codec") {
		return cp, nil
	}
	if _, err := os.Stat(zkNettyCodec); err != nil {
		return "", fmt.Errorf("the secure client port needs Netty's codec jar: %w (install it with \"apt-get install -y libnetty-java\", or put it on FENCELOCK_ZK_CLASSPATH)", err)
	}
	return cp + ":" + zkNettyCodec, nil
}

// zkSecurePorts is the number of extra ports per server: one secure
// client port when secured.
func zkSecurePorts(o options) int {
	if o.zkSecurity == nil {
		return 0
	}
	return 1
}

// zkSecureCfg returns the zoo.cfg lines that open the secure client port,
// the fourth of a server's ports; "" when not secured. ZooKeeper reads
// the ssl.* and serverCnxnFactory keys of zoo.cfg as the system
// properties zookeeper.ssl.* and zookeeper.serverCnxnFactory.
func zkSecureCfg(o options, ports []int) string {
	s := o.zkSecurity
	if s == nil {
		return ""
	}
	auth := s.ClientAuth
	if auth == "" {
		auth = "need"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
	fmt.Fprintf(&b, "secureClientPort=%d\n", ports[3])
	fmt.Fprintf(&b, "secureClientPortAddress=127.0.0.1\n")
	fmt.Fprintf(&b, "ssl.keyStore.location=%s\n", s.KeyStore)
	fmt.Fprintf(&b, "ssl.keyStore.type=PEM\n")
	fmt.Fprintf(&b, "ssl.trustStore.location=%s\n", s.TrustStore)
	fmt.Fprintf(&b, "ssl.trustStore.type=PEM\n")
	fmt.Fprintf(&b, "ssl.clientAuth=%s\n", auth)
	// The servers' certificate is for 127.0.0.1; nothing in the harness
	// checks client certificates against host names.
	fmt.Fprintf(&b, "ssl.hostnameVerification=false\n")
	return b.String()
}

// zkSecureAddrs returns the secure client addresses of the servers, or
// nil.
func zkSecureAddrs(kind Kind, o options, ports [][]int) []string {
	if kind != ZooKeeper || o.zkSecurity == nil {
		return nil
	}
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p[3])
	}
	return addrs
}

// zkSecureBinds returns the bind mounts of a secured server's container
// and makes the files readable inside it.
func zkSecureBinds(o options) ([]string, error) {
	s := o.zkSecurity
	if s == nil {
		return nil, nil
	}
	var binds []string
	for _, f := range []string{s.KeyStore, s.TrustStore} {
		if err := os.Chmod(f, 0o644); err != nil {
			return nil, err
		}
		binds = append(binds, f+":"+f+":ro")
	}
	return binds, nil
}
