package etcdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

func init() { lock.Register("etcd", driver{}) }

// driver opens "etcd://" URLs for lock.Open.
type driver struct{}

// Open implements [lock.Driver] for URLs of the form
//
//	etcd://[user[:password]@]host:port[,host:port...][/prefix]?ttl=10s&identity=name&loss_margin=2s&lock_delay=5s
//	    &layout=concurrency&ca_file=ca.crt&cert_file=client.crt&key_file=client.key
//	    &server_name=etcd.example&tls=true&password_env=VAR
//
// The path goes to [WithPrefix] as is ("etcd://h:2379//app/locks" is
// "/app/locks"); the keys ttl, identity, loss_margin, lock_delay and
// layout, and cfg's fields, to the options of those names. TLS is on with
// any of ca_file, cert_file, key_file, server_name and tls=true (the
// system's roots). The user information is etcd's user and password, or
// the user alone with password_env naming the variable that holds it.
//
// Any other or repeated key, a bad value, an unreadable file, a
// certificate without its key or a user without a password is an error
// wrapping [lock.ErrInvalidConfig]. With credentials, Open logs in within
// ctx and 5s (a refusal wraps [lock.ErrPermission]); without, it sends no
// request. The Locker owns the client, which pings its connections (every
// 5s, 2s timeout) and logs through the Locker's logger.
func (driver) Open(ctx context.Context, u *url.URL, cfg lock.OpenConfig) (lock.Locker, error) {
	if ctx == nil || u == nil {
		return nil, fmt.Errorf("etcdlock: open: %w: nil context or URL", lock.ErrInvalidConfig)
	}
	hosts, err := lock.URLHosts(u)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	o, q, err := urlOptions(u, cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	creds, _, err := secure.CredentialsFromURL(u, q, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	tlsCfg, err := secure.TLSFromQuery(q)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	ccfg, watch := clientConfig(hosts, o, creds, tlsCfg)
	client, err := newClient(ctx, ccfg, watch)
	if err != nil {
		who := strings.Join(hosts, ",")
		if creds.User != "" {
			who += fmt.Sprintf(" as user %q", creds.User)
		}
		return nil, fmt.Errorf("etcdlock: open %s: %w", who, err)
	}
	l := newLocker(client, o)
	l.ownsClient = true
	l.tls = watch
	return l, nil
}

// urlOptions builds the options of a Locker opened with a URL: its path,
// its query q, then cfg.
func urlOptions(u *url.URL, cfg lock.OpenConfig) (*options, url.Values, error) {
	path, err := lock.URLPath(u)
	if err != nil {
		return nil, nil, err
	}
	q, err := lock.CheckQuery(u, append([]string{"ttl", "identity", "loss_margin", "lock_delay", "layout"}, secure.QueryKeys...)...)
	if err != nil {
		return nil, nil, err
	}
	var opts []Option
	if path != "" {
		opts = append(opts, WithPrefix(path))
	}
	for _, d := range []struct {
		key string
		opt func(time.Duration) Option
	}{{"ttl", WithTTL}, {"loss_margin", WithLossMargin}, {"lock_delay", WithLockDelay}} {
		if v, ok, err := lock.URLDuration(q, d.key); err != nil {
			return nil, nil, err
		} else if ok {
			opts = append(opts, d.opt(v))
		}
	}
	if v, ok := q["layout"]; ok {
		opts = append(opts, WithLayout(Layout(v[0])))
	}
	_, urlIdentity := q["identity"]
	if urlIdentity {
		opts = append(opts, WithIdentity(q["identity"][0]))
	}
	opts = append(opts, func(o *options) {
		o.SetOpen(cfg.Logger, cfg.MeterProvider, cfg.TracerProvider, cfg.Identity, cfg.NameAttribute, urlIdentity)
	})
	o, err := buildOptions(opts)
	return o, q, err
}

// clientConfig is the configuration of the client that Open creates for
// hosts, with creds if any; with tlsCfg, its handshakes go through the
// returned watch, which sees refusals.
func clientConfig(hosts []string, o *options, creds secure.Credentials, tlsCfg *tls.Config) (clientv3.Config, *refusals) {
	ccfg := clientv3.Config{
		Endpoints: hosts,
		Username:  creds.User,
		Password:  creds.Password,
		Logger:    clientLogger(o.Logger, creds.Password),
		// 5s is the server's default minimum ping interval.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialTimeout:          loginTimeout, // clientv3.New logs in
	}
	if tlsCfg == nil {
		return ccfg, nil
	}
	watch := newRefusals(len(hosts))
	ccfg.TLS = tlsCfg
	// These replace the client's own credentials: the same TLS, watched.
	ccfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(watch.credentials(tlsCfg))}
	return ccfg, watch
}

// loginTimeout bounds the login of Open, when ctx does not end sooner.
const loginTimeout = 5 * time.Second

// newClient creates the client of cfg, whose login (with credentials) ends
// with ctx or when watch sees every member refuse the TLS handshake.
func newClient(ctx context.Context, cfg clientv3.Config, watch *refusals) (*clientv3.Client, error) {
	life, cancel := context.WithCancel(context.Background())
	cfg.Context = life
	stopCtx := context.AfterFunc(ctx, cancel)
	stopWatch := watch.onRefusal(cancel)
	client, err := clientv3.New(cfg)
	stopWatch()
	stopCtx()
	if err == nil && life.Err() != nil {
		// Ended between the login and the return of New.
		client.Close()
		err = life.Err()
	}
	if err == nil {
		return client, nil
	}
	cancel()
	// The client's errors do not carry the password; make sure.
	msg := secure.Redact(err.Error(), cfg.Password)
	switch {
	case watch.err() != nil:
		return nil, watch.err()
	case isRefusal(err):
		return nil, fmt.Errorf("%w: %s", lock.ErrPermission, msg)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("log in: %w: %s", ctx.Err(), msg)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("log in: no answer within %v: %w", loginTimeout, context.DeadlineExceeded)
	}
	return nil, fmt.Errorf("%w: %s", lock.ErrInvalidConfig, msg)
}
