package benchtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/certs"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// The cost of TLS: uncontended acquire+release on the plain cluster of the
// run and on a second cluster started with TLS for clients and peers,
// client certificates required and auth on (an application user whose
// role covers only the prefix), measured in the same interleaved rounds.
//
// Rows: the plain etcdlock recipe of the uncontended table; the same
// through a client made with TLS and the user's credentials (etcdlock.New,
// requests counted); and a Locker opened by lock.Open from a URL with the
// certificate files and password_env, the way an application would (its
// client is the driver's own, so its requests are not counted).

const tlsPrefix = "benchtls"

// tlsRows measures rs, the plain row first, in interleaved rounds and
// sets each secured row's ratio to the plain one's p50.
func tlsRows(t *testing.T, rs []recipe, plainAt placement, cfg config) []uncontendedResult {
	rows := measureUncontended(t, rs, plainAt, cfg)
	for i := 1; i < len(rows); i++ {
		rows[i].Ratio = rows[i].ratioTo(rows[0], "p50_ms", lower)
	}
	return rows
}

// etcdTLSRecipes starts the secured etcd cluster and returns the rows
// above as recipes, the plain one first.
func etcdTLSRecipes(t *testing.T) []recipe {
	sec := cluster.NewEtcdSecurity(t)
	sc := cluster.FromEnv(t).Start(t, cluster.Etcd, cluster.WithEtcdSecurity(sec))
	pw := cluster.RandomSecret()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sec.Enable(ctx, sc, cluster.EtcdUser{Name: "bench", Password: pw, Perm: "readwrite", Prefixes: []string{tlsPrefix + "/"}}); err != nil {
		t.Fatalf("Enable() = %v", err)
	}
	leader, err := sc.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	follower := sc.Endpoints()[(leader+1)%len(sc.Members)]
	pair, err := sec.CA.Issue("bench-client")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := sec.ClientTLS(pair)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCELOCK_BENCH_TLS_PW", pw)
	q := url.Values{"ca_file": {sec.CA.CAFile}, "cert_file": {pair.CertFile}, "key_file": {pair.KeyFile}, "password_env": {"FENCELOCK_BENCH_TLS_PW"}}

	plain := etcdRecipes(nil)[0] // "etcdlock"
	if plain.name != "etcdlock" {
		t.Fatalf("the first etcd recipe is %q; want etcdlock", plain.name)
	}
	plain.name = "etcdlock, plain"
	rs := []recipe{
		plain,
		{
			name: "etcdlock, TLS+auth",
			role: roleFencelock,
			dial: func(_ []string, ctr *counters, ttl time.Duration) (conn, error) {
				cli, err := clientv3.New(clientv3.Config{
					Endpoints: []string{follower}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
					TLS: tlsCfg, Username: "bench", Password: pw, DialOptions: etcdDialOptions(ctr),
				})
				if err != nil {
					return nil, err
				}
				l, err := etcdlock.New(cli, etcdlock.WithPrefix(tlsPrefix), etcdlock.WithTTL(ttl))
				if err != nil {
					cli.Close()
					return nil, err
				}
				return etcdlockConn{cli, l}, nil
			},
		},
		{
			name: "lock.Open, TLS+auth",
			role: roleFencelock,
			dial: func(_ []string, _ *counters, ttl time.Duration) (conn, error) {
				u := url.URL{Scheme: "etcd", User: url.User("bench"), Host: follower, Path: "/" + tlsPrefix,
					RawQuery: q.Encode() + "&ttl=" + ttl.String()}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err := lock.Open(ctx, u.String())
				if err != nil {
					return nil, err
				}
				return openConn{l}, nil
			},
		},
	}
	return rs
}

// zkTLSRecipes is etcdTLSRecipes for ZooKeeper: the plain zklock row of the
// run's ensemble against a second ensemble with a TLS client port per
// server (client certificates required; quorum traffic stays plain) and
// digest credentials, whose ACLs then guard every znode the Locker
// creates. Rows: the plain zklock recipe; zklock.Dial with WithTLS and
// WithDigest; and lock.Open from a URL with the certificate files, the
// user and password_env. Requests are not counted on the TLS rows (the
// counting dialer reads frames of the plain protocol).
func zkTLSRecipes(t *testing.T) []recipe {
	ca, err := certs.NewAuthority(t.TempDir(), "benchzk")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("zk-server")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue("bench-client")
	if err != nil {
		t.Fatal(err)
	}
	sc := cluster.FromEnv(t).Start(t, cluster.ZooKeeper, cluster.WithZKSecurity(cluster.ZKSecurity{KeyStore: server.BundleFile, TrustStore: ca.CAFile}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := sc.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader() = %v", err)
	}
	follower := sc.SecureEndpoints()[(leader+1)%len(sc.Members)]
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", ca.CAFile)
	}
	pair, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	pw := cluster.RandomSecret()
	t.Setenv("FENCELOCK_BENCH_TLS_PW", pw)
	q := url.Values{"ca_file": {ca.CAFile}, "cert_file": {client.CertFile}, "key_file": {client.KeyFile}, "password_env": {"FENCELOCK_BENCH_TLS_PW"}}

	plain := zkRecipes(nil)[0] // "zklock"
	if plain.name != "zklock" {
		t.Fatalf("the first ZooKeeper recipe is %q; want zklock", plain.name)
	}
	plain.name = "zklock, plain"
	rs := []recipe{
		plain,
		{
			name: "zklock, TLS+digest",
			role: roleFencelock,
			dial: func(_ []string, _ *counters, ttl time.Duration) (conn, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				l, err := zklock.Dial(ctx, []string{follower}, zklock.WithRoot(fencelockRoot), zklock.WithSessionTimeout(ttl),
					zklock.WithTLS(tlsCfg), zklock.WithDigest("bench", pw))
				if err != nil {
					return nil, err
				}
				return zklockConn{l}, nil
			},
		},
		{
			name: "lock.Open, TLS+digest",
			role: roleFencelock,
			dial: func(_ []string, _ *counters, ttl time.Duration) (conn, error) {
				u := url.URL{Scheme: "zk", User: url.User("bench"), Host: follower, Path: fencelockRoot,
					RawQuery: q.Encode() + "&session_timeout=" + ttl.String()}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				l, err := lock.Open(ctx, u.String())
				if err != nil {
					return nil, err
				}
				return openConn{l}, nil
			},
		},
	}
	return rs
}

// openConn is a Locker that owns its client.
type openConn struct{ l lock.Locker }

func (c openConn) client() (client, error) { return lockerClient{c.l}, nil }
func (c openConn) close() error            { return c.l.Close() }

// printTLS prints the rows of tlsRows, each against the plain row.
func printTLS(w io.Writer, kind cluster.Kind, rows []uncontendedResult, cfg config) {
	if len(rows) == 0 {
		return
	}
	secured := "one with TLS (clients and peers), client certificates and auth"
	if kind == cluster.ZooKeeper {
		secured = "one with a TLS client port (client certificates required) and digest credentials with ACLs"
	}
	fmt.Fprintf(w, "\nTLS cost: uncontended acquire+release, 1 client connected to a follower, plain cluster vs %s, %d cycles each (%d rounds in alternating order; ratios: median (min–max) over the rounds):\n", secured, cfg.Rounds*cfg.Cycles, cfg.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "recipe\t p50 ms\t p99 ms\t cycles/s\t requests/cycle\t client CPU µs/cycle\t p50 vs plain\t cycles/s vs plain\t")
	base := rows[0]
	for _, u := range rows {
		reqs := fmt.Sprintf("%.1f", u.RequestsPerCycle)
		if strings.HasPrefix(u.Recipe, "lock.Open") || u.Recipe == "zklock, TLS+digest" {
			reqs = "-"
		}
		vsP50, vsRate := "", ""
		if u.Ratio != nil {
			vsP50, vsRate = u.Ratio.spread(), u.ratioTo(base, "cycles_per_sec", higher).spread()
		}
		fmt.Fprintf(tw, "%s\t %.2f\t %.2f\t %.0f\t %s\t %.0f\t %s\t %s\t\n", u.Recipe, u.Latency.P50, u.Latency.P99, u.CyclesPerSec, reqs, u.ClientCPUUs, vsP50, vsRate)
	}
	tw.Flush()
}
