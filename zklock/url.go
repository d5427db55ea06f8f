package zklock

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

func init() { lock.Register("zk", driver{}) }

// driver opens Lockers for URLs such as
// "zk://h1:2181,h2:2181/myapp/locks?session_timeout=10s&identity=worker-1".
// The path is the root ([WithRoot]); the keys session_timeout, loss_margin,
// lock_delay, identity and layout, and lock.Open's options, map to the
// options of those names; the user information or password_env go to
// [WithDigest], and tls, ca_file, cert_file, key_file and server_name to
// [WithTLS]. Bad values are errors wrapping [lock.ErrInvalidConfig].
type driver struct{}

func (driver) Open(ctx context.Context, u *url.URL, cfg lock.OpenConfig) (lock.Locker, error) {
	// lock.Open has refused fragments already.
	if ctx == nil || u == nil {
		return nil, fmt.Errorf("zklock: open: %w: nil context or URL", lock.ErrInvalidConfig)
	}
	hosts, err := lock.URLHosts(u)
	if err != nil {
		return nil, fmt.Errorf("zklock: open: %w", err)
	}
	opts, err := urlOptions(u, cfg)
	if err != nil {
		return nil, fmt.Errorf("zklock: open: %w", err)
	}
	l, err := Dial(ctx, hosts, opts...)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

// urlOptions returns the options a URL and the options of lock.Open
// (cfg) stand for.
func urlOptions(u *url.URL, cfg lock.OpenConfig) ([]Option, error) {
	root, err := lock.URLPath(u)
	if err != nil {
		return nil, err
	}
	q, err := lock.CheckQuery(u, append([]string{"session_timeout", "loss_margin", "lock_delay", "identity", "layout"}, secure.QueryKeys...)...)
	if err != nil {
		return nil, err
	}
	var opts []Option
	creds, ok, err := secure.CredentialsFromURL(u, q, nil)
	if err != nil {
		return nil, err
	}
	if ok {
		opts = append(opts, WithDigest(creds.User, creds.Password))
	}
	tlsCfg, err := secure.TLSFromQuery(q)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, WithTLS(tlsCfg))
	}
	if root != "" {
		opts = append(opts, WithRoot(root))
	}
	for _, k := range []struct {
		key  string
		with func(time.Duration) Option
	}{{"session_timeout", WithSessionTimeout}, {"loss_margin", WithLossMargin}, {"lock_delay", WithLockDelay}} {
		if d, ok, err := lock.URLDuration(q, k.key); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, k.with(d))
		}
	}
	if y, ok := q["layout"]; ok {
		opts = append(opts, WithLayout(Layout(y[0])))
	}
	_, urlIdentity := q["identity"]
	if urlIdentity {
		opts = append(opts, WithIdentity(q["identity"][0]))
	}
	return append(opts, func(o *options) {
		o.SetOpen(cfg.Logger, cfg.MeterProvider, cfg.TracerProvider, cfg.Identity, cfg.NameAttribute, urlIdentity)
	}), nil
}
