package etcdlock

import (
	"context"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/lock"
)

func init() { lock.Register("etcd", driver{}) }

// driver opens "etcd://" URLs for lock.Open.
type driver struct{}

// Open implements [lock.Driver] for URLs of the form
//
//	etcd://host:port[,host:port...][/prefix]?ttl=10s&identity=name&loss_margin=2s
//
// The path after the slash that ends the host list is given to
// [WithPrefix] as is (default [DefaultPrefix]): "etcd://h:2379/app/locks"
// keeps its records under "app/locks/…" and "etcd://h:2379//app/locks"
// (two slashes) under "/app/locks/…". The query keys map to [WithTTL],
// [WithIdentity] and [WithLossMargin]. Any other query key, a repeated one,
// user information, a fragment or a bad value is an error wrapping
// [lock.ErrInvalidConfig] (see [lock.Open]). The Locker owns the client it creates and closes
// it in Close. The client pings its connections (every 5s, 2s timeout) so
// that a member that stops answering is left behind. No request is sent
// before the first call that needs one.
func (driver) Open(ctx context.Context, u *url.URL) (lock.Locker, error) {
	if ctx == nil || u == nil {
		return nil, fmt.Errorf("etcdlock: open: %w: nil context or URL", lock.ErrInvalidConfig)
	}
	hosts, err := lock.URLHosts(u)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	if u.User != nil {
		return nil, fmt.Errorf("etcdlock: open: %w: user information in the URL is not supported yet", lock.ErrInvalidConfig)
	}
	path, err := lock.URLPath(u)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	q, err := lock.CheckQuery(u, "ttl", "identity", "loss_margin")
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	var opts []Option
	if path != "" {
		opts = append(opts, WithPrefix(path))
	}
	if d, ok, err := lock.URLDuration(q, "ttl"); err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	} else if ok {
		opts = append(opts, WithTTL(d))
	}
	if d, ok, err := lock.URLDuration(q, "loss_margin"); err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	} else if ok {
		opts = append(opts, WithLossMargin(d))
	}
	if v, ok := q["identity"]; ok {
		opts = append(opts, WithIdentity(v[0]))
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdlock: open: %w", err)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints: hosts,
		// Pings find a member that stopped answering without closing
		// its connections, so that watches move to another member.
		// 5s is the server's default minimum ping interval.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open %q: %w: %w", u.String(), lock.ErrInvalidConfig, err)
	}
	l := newLocker(client, o)
	l.ownsClient = true
	return l, nil
}
