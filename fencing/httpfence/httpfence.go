// Package httpfence carries fencing tokens over HTTP: a request header, a
// server-side handler that enforces it per resource, and a client transport
// that attaches the token of a lease.
//
// The client sends its lease's token in the [Header] ("Fencing-Token: 42").
// [Handler] runs the write inside a [fencing.Guard]'s critical section for
// the request's resource. A stale token gets 409 Conflict, a missing or
// malformed one 400 Bad Request, each with a JSON body ([WriteError]).
//
// The guard lives in the server process, so the protected state must too:
// with several replicas, or a handler that writes to another service,
// enforce the token where the data is (for a database, package sqlfence,
// with [TokenFromRequest] and [WriteError]). Work the handler hands off to
// other goroutines is not protected. The [Transport] refuses to send once
// the lease has ended, but a lease can end while a request is in flight,
// which is why the server checks too.
package httpfence

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// Header is the request header that carries the fencing token, in decimal.
const Header = "Fencing-Token"

// ErrMissingToken is returned by [TokenFromRequest] for a request without
// the [Header]. It wraps [fencing.ErrInvalidToken].
var ErrMissingToken = fmt.Errorf("httpfence: missing %s header: %w", Header, fencing.ErrInvalidToken)

// TokenFromRequest returns the token in r's [Header]. A missing header is
// [ErrMissingToken]; a repeated header, zero, or anything but a decimal
// number is an error wrapping [fencing.ErrInvalidToken]; a nil r is an
// error wrapping [fencing.ErrInvalidConfig].
func TokenFromRequest(r *http.Request) (fencing.Token, error) {
	if r == nil {
		return 0, fmt.Errorf("httpfence: token from request: %w: nil request", fencing.ErrInvalidConfig)
	}
	vals := r.Header.Values(Header)
	if len(vals) == 0 {
		return 0, ErrMissingToken
	}
	if len(vals) > 1 {
		return 0, fmt.Errorf("httpfence: %d %s headers: %w: want exactly one", len(vals), Header, fencing.ErrInvalidToken)
	}
	tok, err := fencing.ParseToken(vals[0])
	if err != nil {
		return 0, fmt.Errorf("httpfence: %s header: %w", Header, err)
	}
	return tok, nil
}

// ErrorBody is the JSON body of the responses [WriteError] writes.
// Resource, Token and Highest are set for "stale_token", as in
// [fencing.StaleTokenError]; Detail says what was wrong with a missing or
// invalid token.
type ErrorBody struct {
	Error    string        `json:"error"` // stale_token, missing_token, invalid_token or internal_error
	Resource string        `json:"resource,omitempty"`
	Token    fencing.Token `json:"token,omitempty"`
	Highest  fencing.Token `json:"highest,omitempty"`
	Detail   string        `json:"detail,omitempty"`
}

// WriteError writes the response for err:
//
//   - a [*fencing.StaleTokenError]: 409 Conflict,
//     {"error":"stale_token","resource":"…","token":7,"highest":8}
//   - [ErrMissingToken]: 400 Bad Request, {"error":"missing_token",…}
//   - any other error wrapping [fencing.ErrInvalidToken]: 400 Bad Request,
//     {"error":"invalid_token","detail":"…"}
//   - anything else, nil included: 500 Internal Server Error,
//     {"error":"internal_error"}, without details, which may be private.
//
// A nil w writes nothing. Tokens are JSON numbers (etcd revisions and
// ZooKeeper zxids stay far below 2^53).
func WriteError(w http.ResponseWriter, err error) {
	if nilcheck.IsNil(w) {
		return
	}
	var (
		status = http.StatusInternalServerError
		body   = ErrorBody{Error: "internal_error"}
		stale  *fencing.StaleTokenError
	)
	switch {
	case errors.As(err, &stale):
		status = http.StatusConflict
		body = ErrorBody{Error: "stale_token", Resource: stale.Resource, Token: stale.Token, Highest: stale.Highest}
	case errors.Is(err, fencing.ErrInvalidToken): // ErrMissingToken too
		status = http.StatusBadRequest
		body = ErrorBody{Error: "invalid_token", Detail: err.Error()}
		if errors.Is(err, ErrMissingToken) {
			body.Error = "missing_token"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body) // the status is out; nothing to do if the client is gone
}

// Handler returns a handler that checks the request's fencing token for
// the resource resourceOf names and serves the request with next inside
// g's critical section for that resource (docs/design/fencing.md says
// why), so requests for one resource are handled one at a time: keep next
// short, and never let it wait for another request to the same resource.
// The token is recorded once the check passes, whatever next then does.
//
// A nil g, resourceOf or next (also a nil pointer or function in next), a
// nil option or one given a nil provider is an error wrapping
// [fencing.ErrInvalidConfig].
func Handler(g *fencing.Guard, resourceOf func(*http.Request) string, next http.Handler, opts ...Option) (http.Handler, error) {
	if g == nil || resourceOf == nil || nilcheck.IsNil(next) {
		return nil, fmt.Errorf("httpfence: handler: %w: nil guard, resource function or next handler", fencing.ErrInvalidConfig)
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("httpfence: handler: %w: option %d is nil", fencing.ErrInvalidConfig, i)
		}
		opt(&o)
	}
	if o.err != nil {
		return nil, fmt.Errorf("httpfence: handler: %w: %w", fencing.ErrInvalidConfig, o.err)
	}
	tel, _ := telemetry.New("", o.tel) // a refused instrument stays a no-op
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := TokenFromRequest(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		ctx, wr := tel.StartWrite(r.Context(), helper, "", uint64(tok))
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		err = g.Apply(resourceOf(r), tok, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		if err != nil { // a stale token: g, tok and the write are valid
			wr.End(telemetry.Rejected, err)
			WriteError(w, err)
			return
		}
		wr.End(telemetry.Accepted, nil)
	}), nil
}

// Option configures the metrics and spans of [Handler].
type Option func(*options)

type options struct {
	tel telemetry.Config
	err error // the first bad option's
}

// helper is the helper attribute of Handler's decisions.
const helper = "httpfence"

// WithMeterProvider makes Handler count its decisions under the helper
// "httpfence" (see lock.WithMeterProvider). It must not be nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.err = cmp.Or(o.err, o.tel.SetMeterProvider(mp)) }
}

// WithTracerProvider makes Handler record a span, fencelock.fenced_write,
// around each request it checks. It must not be nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.err = cmp.Or(o.err, o.tel.SetTracerProvider(tp)) }
}

// Transport is an [http.RoundTripper] that sends the token of a lease in
// the [Header] of every request, and refuses to send once the lease has
// ended. It is safe for concurrent use if Base is.
type Transport struct {
	// Lease supplies the token: a lock.Lease, or anything with the
	// methods of one that Transport uses. It must not be nil.
	Lease interface {
		Name() string
		Token() fencing.Token
		Err() error
	}
	// Base sends the requests; nil means [http.DefaultTransport].
	Base http.RoundTripper
}

// RoundTrip sends a copy of req carrying the lease's token. If the lease
// has ended it sends nothing and returns an error wrapping the lease's Err
// (so lock.ErrLost or lock.ErrReleased). A nil Transport or Lease (also a
// nil pointer of a lease type), a nil req or one without a URL is an error
// wrapping [fencing.ErrInvalidConfig], which errors.Is finds through an
// [http.Client]'s *url.Error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.refuse(req); err != nil {
		if req != nil && req.Body != nil {
			req.Body.Close() // as the RoundTripper contract requires
		}
		return nil, err
	}
	out := req.Clone(req.Context())
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	out.Header.Set(Header, t.Lease.Token().String())
	base := t.Base
	if nilcheck.IsNil(base) {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

// refuse returns why req must not be sent, or nil.
func (t *Transport) refuse(req *http.Request) error {
	switch {
	case req == nil || req.URL == nil:
		return fmt.Errorf("httpfence: round trip: %w: nil request or URL", fencing.ErrInvalidConfig)
	case t == nil || nilcheck.IsNil(t.Lease):
		return fmt.Errorf("httpfence: %s %s: %w: transport without a lease", req.Method, req.URL.Redacted(), fencing.ErrInvalidConfig)
	}
	if err := t.Lease.Err(); err != nil {
		return fmt.Errorf("httpfence: %s %s: lease %q has ended: %w", req.Method, req.URL.Redacted(), t.Lease.Name(), err)
	}
	return nil
}
