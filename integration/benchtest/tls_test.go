package benchtest

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock"
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

// measureTLS runs the rows above; plainAt places the plain rows.
func measureTLS(t *testing.T, plainAt placement, cfg config) []uncontendedResult {
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
	return measureUncontended(t, rs, plainAt, cfg)
}

// openConn is a Locker that owns its client.
type openConn struct{ l lock.Locker }

func (c openConn) client() (client, error) { return lockerClient{c.l}, nil }
func (c openConn) close() error            { return c.l.Close() }

// printTLS prints the rows of measureTLS, each against the plain row.
func printTLS(w io.Writer, rows []uncontendedResult, cfg config) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTLS cost: uncontended acquire+release, 1 client connected to a follower, plain cluster vs one with TLS (clients and peers), client certificates and auth, %d cycles each (%d interleaved rounds):\n", cfg.Rounds*cfg.Cycles, cfg.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "recipe\t p50 ms\t p99 ms\t cycles/s\t requests/cycle\t client CPU µs/cycle\t p50 vs plain\t cycles/s vs plain\t")
	base := rows[0]
	for _, u := range rows {
		reqs := fmt.Sprintf("%.1f", u.RequestsPerCycle)
		if strings.HasPrefix(u.Recipe, "lock.Open") {
			reqs = "-"
		}
		fmt.Fprintf(tw, "%s\t %.2f\t %.2f\t %.0f\t %s\t %.0f\t %s\t %s\t\n", u.Recipe, u.Latency.P50, u.Latency.P99, u.CyclesPerSec, reqs, u.ClientCPUUs,
			ratio(u.Latency.P50, base.Latency.P50), ratio(u.CyclesPerSec, base.CyclesPerSec))
	}
	tw.Flush()
}
