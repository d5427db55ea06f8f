package fencing

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencelock/fencelock/internal/sentinel"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// ErrInvalidConfig is wrapped by this package and its sub-packages when
// given a bad value (a non-positive limit, a nil database, a bad table
// name…). It is the same value as lock.ErrInvalidConfig.
var ErrInvalidConfig = sentinel.InvalidConfig

// DefaultMaxResources is the number of resources a zero [Guard] remembers
// individually before it starts to evict idle ones.
const DefaultMaxResources = 1 << 16

// Guard enforces fencing tokens for resources that live in this process: a
// file, an in-memory map, a device handle (see [Guard.Apply]).
//
// The zero Guard is ready to use, remembers up to [DefaultMaxResources]
// resources and records no metrics; [NewGuard] sets another limit and
// options. A Guard must not be copied after first use. It is safe for
// concurrent use. A nil *Guard refuses every write with an error wrapping
// [ErrInvalidConfig].
//
// # Bounded memory
//
// When a Guard needs room it forgets the least recently used idle
// resource and raises a floor to its highest token; a resource it does not
// know starts at the floor. This is safe, and live when all tokens come
// from one counter (docs/design/fencing.md); give independent token
// sources each its own Guard, or a limit above the number of resources.
type Guard struct {
	mu      sync.Mutex
	limit   int               // 0 means DefaultMaxResources
	entries map[string]*entry // every resource the Guard remembers
	idle    entry             // sentinel of the ring of unused entries, most recently used first
	floor   Token             // highest token of every evicted resource
	tel     *telemetry.Telemetry
}

// Option configures the metrics of a [Guard] (it records no spans: Apply
// takes no context). A nil provider is an error wrapping
// [ErrInvalidConfig].
type Option func(*options)

type options struct {
	tel telemetry.Config
	err error // the first bad option's
}

// WithMeterProvider makes the Guard count its decisions under the helper
// "guard" (see lock.WithMeterProvider). It must not be nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.err = cmp.Or(o.err, o.tel.SetMeterProvider(mp)) }
}

// guardHelper is the helper attribute of a Guard's decisions.
const guardHelper = "guard"

// entry is the state of one resource.
type entry struct {
	mu      sync.Mutex    // the resource's critical section
	highest atomic.Uint64 // written with mu held, read by Guard.Highest without

	// The fields below are guarded by Guard.mu.
	key        string
	refs       int    // calls using the entry: waiting for mu or holding it
	prev, next *entry // links in Guard.idle while refs == 0
}

// NewGuard returns a Guard that remembers up to maxResources resources
// individually; see "Bounded memory" on [Guard]. A maxResources below 1,
// a nil option or an option given a bad value is an error wrapping
// [ErrInvalidConfig].
func NewGuard(maxResources int, opts ...Option) (*Guard, error) {
	if maxResources < 1 {
		return nil, fmt.Errorf("fencing: new guard: %w: max resources %d, want at least 1", ErrInvalidConfig, maxResources)
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("fencing: new guard: %w: option %d is nil", ErrInvalidConfig, i)
		}
		opt(&o)
	}
	if o.err != nil {
		return nil, fmt.Errorf("fencing: new guard: %w: %w", ErrInvalidConfig, o.err)
	}
	g := &Guard{limit: maxResources}
	g.tel, _ = telemetry.New("", o.tel) // a refused instrument stays a no-op
	return g, nil
}

// Apply runs fn if token is not lower than the highest token accepted for
// resource (any string), and records token as the new highest. The check,
// the record and fn form one critical section per resource; calls for
// different resources run in parallel.
//
// A lower token is rejected with a [*StaleTokenError] and fn does not run.
// A zero token is an error wrapping [ErrInvalidToken], a nil fn or Guard
// one wrapping [ErrInvalidConfig]. Otherwise Apply returns fn's error
// unchanged; the token stays recorded even when fn fails or panics (the
// grant exists, so lower tokens stay refused). fn must be short and must
// not call Apply for the same resource on the same Guard.
func (g *Guard) Apply(resource string, token Token, fn func() error) error {
	if g == nil {
		return fmt.Errorf("fencing: apply %q: %w: nil guard", resource, ErrInvalidConfig)
	}
	if token == 0 {
		return fmt.Errorf("fencing: apply %q: %w: zero is not a token", resource, ErrInvalidToken)
	}
	if fn == nil {
		return fmt.Errorf("fencing: apply %q: %w: nil write function", resource, ErrInvalidConfig)
	}
	e := g.use(resource)
	defer g.unuse(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	if highest := Token(e.highest.Load()); token < highest {
		g.tel.Decide(context.Background(), guardHelper, telemetry.Rejected)
		return &StaleTokenError{Resource: resource, Token: token, Highest: highest}
	}
	e.highest.Store(uint64(token))
	g.tel.Decide(context.Background(), guardHelper, telemetry.Accepted)
	return fn()
}

// Highest returns the highest token accepted for resource, or, for a
// resource the Guard does not remember, the floor left by evictions (zero if
// nothing was evicted). It does not wait for a running Apply. A nil Guard
// has accepted nothing: its Highest is zero.
func (g *Guard) Highest(resource string) Token {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entries[resource]; e != nil {
		return Token(e.highest.Load())
	}
	return g.floor
}

// Len returns the number of resources the Guard remembers individually
// (zero for a nil Guard).
func (g *Guard) Len() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.entries)
}

// use returns resource's entry, created at the floor if needed, and marks it
// in use so that it cannot be evicted.
func (g *Guard) use(resource string) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entries == nil {
		g.entries = make(map[string]*entry)
		g.idle.prev, g.idle.next = &g.idle, &g.idle
	}
	e := g.entries[resource]
	switch {
	case e == nil:
		floor := g.floor // read before evicting: eviction concerns other resources
		g.evictLocked(g.max() - 1)
		e = &entry{key: resource}
		e.highest.Store(uint64(floor))
		g.entries[resource] = e
	case e.refs == 0:
		e.prev.next, e.next.prev = e.next, e.prev
		e.prev, e.next = nil, nil
	}
	e.refs++
	return e
}

// unuse ends one use of e; an entry no call uses joins the idle ring, and
// the Guard shrinks back to its limit if calls in flight made it grow past.
func (g *Guard) unuse(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	e.prev, e.next = &g.idle, g.idle.next
	e.prev.next, e.next.prev = e, e
	g.evictLocked(g.max())
}

// evictLocked forgets least recently used idle entries until at most n
// remain or none is idle, raising the floor to cover every forgotten token.
func (g *Guard) evictLocked(n int) {
	for len(g.entries) > n && g.idle.prev != &g.idle {
		e := g.idle.prev
		e.prev.next, e.next.prev = e.next, e.prev
		e.prev, e.next = nil, nil
		g.floor = max(g.floor, Token(e.highest.Load()))
		delete(g.entries, e.key)
	}
}

func (g *Guard) max() int { return cmp.Or(g.limit, DefaultMaxResources) }
