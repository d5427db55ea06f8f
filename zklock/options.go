package zklock

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/names"
	"github.com/fencelock/fencelock/lock"
)

// Defaults of the options.
const (
	// DefaultRoot is the znode under which locks live unless [WithRoot]
	// says otherwise.
	DefaultRoot = "/fencelock"

	// DefaultSessionTimeout is the session timeout [Dial] asks the server
	// for unless [WithSessionTimeout] says otherwise. The server may
	// negotiate it into its [2, 20] × tickTime range; the Locker uses the
	// negotiated value.
	DefaultSessionTimeout = 10 * time.Second

	// DefaultLossMarginFraction is the default loss margin as a fraction of
	// the negotiated session timeout: one tenth, but at least
	// [MinDefaultLossMargin]. See [WithLossMargin].
	DefaultLossMarginFraction = 10

	// MinDefaultLossMargin is the floor of the default loss margin.
	MinDefaultLossMargin = 100 * time.Millisecond
)

// Option configures a Locker. Leaving an option out means its documented
// default; giving an option a bad value makes [Dial] and [New] return an
// error wrapping [lock.ErrInvalidConfig].
type Option func(*options)

type options struct {
	root           string
	sessionTimeout time.Duration
	timeoutSet     bool
	identity       string
	acl            []zk.ACL
	logger         *slog.Logger
	lossMargin     time.Duration
	dialer         zk.Dialer
	errs           []error
}

func (o *options) bad(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("%w: "+format, append([]any{lock.ErrInvalidConfig}, args...)...))
}

// WithRoot sets the znode under which locks live (default [DefaultRoot]).
// It accepts the same paths as etcdlock.WithPrefix, checked by the same
// rule (see [lock.URLPath]): a valid lock name, with or without a leading
// and a trailing slash, whose first segment is not "zookeeper" (reserved
// by the server). ZooKeeper paths are always absolute, so "/myapp/locks",
// "myapp/locks" and "myapp/locks/" all name the root /myapp/locks. A
// missing root and its missing ancestors are created as persistent znodes
// with the Locker's ACL on first use.
func WithRoot(root string) Option {
	return func(o *options) {
		ns, err := names.ParseNamespace(root)
		if err != nil {
			o.bad("root: %w", err)
			return
		}
		o.root = "/" + ns.Path
	}
}

// WithSessionTimeout sets the session timeout (default
// [DefaultSessionTimeout]). With [Dial] it is the timeout asked of the
// server, which may negotiate a different one; the Locker reads the
// negotiated value from the handshake. With [New] it must be the timeout
// the connection negotiated, since go-zookeeper does not reveal it: pass
// the value given to zk.Connect and keep it inside the server's
// [2, 20] × tickTime range.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.bad("session timeout %v: must be positive", d)
			return
		}
		if d < time.Millisecond || d > 24*time.Hour {
			o.bad("session timeout %v: out of range", d)
			return
		}
		o.sessionTimeout = d
		o.timeoutSet = true
	}
}

// WithIdentity sets the identity stored in each lock znode and reported by
// [Locker.Holder] (default [lock.DefaultIdentity], "hostname/pid/random").
// It must follow the rule of [lock.ValidateIdentity], the same on every
// backend: 1 to 1024 bytes of UTF-8 without control characters.
func WithIdentity(id string) Option {
	return func(o *options) {
		if err := lock.ValidateIdentity(id); err != nil {
			o.errs = append(o.errs, err)
			return
		}
		o.identity = id
	}
}

// WithACL sets the ACL of every znode the Locker creates (default
// zk.WorldACL(zk.PermAll)). It must be non-empty.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.bad("empty ACL")
			return
		}
		o.acl = append([]zk.ACL(nil), acl...)
	}
}

// WithLogger sets where the Locker and its go-zookeeper connection log
// (default: nowhere). Connection chatter is logged at debug level, session
// state changes and lost leases at info and warn. It must not be nil or a
// zero slog.Logger (which has no handler).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil || l.Handler() == nil {
			o.bad("logger: nil, or a zero slog.Logger without a handler")
			return
		}
		o.logger = l
	}
}

// WithLossMargin sets how much earlier than the server could expire the
// session a disconnected Locker declares its leases lost. The default is a
// tenth of the negotiated session timeout, at least [MinDefaultLossMargin].
//
// With [Dial] the Locker knows when the server last heard from it (the send
// time of the last request the server answered), so a lease ends at that
// time plus the session timeout minus the margin. The margin covers the
// difference in clock rates and the delay of the local timer. With [New]
// the Locker only learns of a disconnection from the connection's events,
// which go-zookeeper raises up to two thirds of the session timeout after
// the last reply; a lease then ends one third of the session timeout minus
// the margin after the event. The margin must be positive and smaller than
// the session timeout.
func WithLossMargin(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.bad("loss margin %v: must be positive", d)
			return
		}
		o.lossMargin = d
	}
}

// WithDialer sets the function [Dial] uses to open each TCP connection
// (default net.DialTimeout), for instance to add TLS or to observe the
// connection in tests. [New] ignores it.
func WithDialer(d zk.Dialer) Option {
	return func(o *options) {
		if d == nil {
			o.bad("nil dialer")
			return
		}
		o.dialer = d
	}
}

func buildOptions(opts []Option) (*options, error) {
	o := &options{
		root:           DefaultRoot,
		sessionTimeout: DefaultSessionTimeout,
		acl:            zk.WorldACL(zk.PermAll),
	}
	for _, opt := range opts {
		if opt == nil {
			o.bad("nil option")
			continue
		}
		opt(o)
	}
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	if o.lossMargin != 0 && o.lossMargin >= o.sessionTimeout {
		return nil, fmt.Errorf("%w: loss margin %v: must be smaller than the session timeout %v", lock.ErrInvalidConfig, o.lossMargin, o.sessionTimeout)
	}
	if o.identity == "" {
		o.identity = lock.DefaultIdentity()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// margin returns the loss margin for a negotiated session timeout.
func (o *options) margin(timeout time.Duration) time.Duration {
	if o.lossMargin > 0 {
		return min(o.lossMargin, timeout)
	}
	return max(timeout/DefaultLossMarginFraction, min(MinDefaultLossMargin, timeout/2))
}
