// Package clock lets the backends' loss deadlines and keepalive timers run
// on the system clock in production and on a [Fake] in unit tests, so that
// the deadline arithmetic is tested to the nanosecond without sleeping.
package clock

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/sentinel"
)

// Clock is the part of package time the backends use.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a *time.Timer behind an interface.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Sleep waits d on the system clock, or until ctx ends (it returns
// context.Cause(ctx)), the Locker closes (closing is closed; it returns
// lock.ErrClosed) or the session ends (ended is closed; it returns
// endErr()).
func Sleep(ctx context.Context, d time.Duration, closing, ended <-chan struct{}, endErr func() error) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-closing:
		return sentinel.Closed
	case <-ended:
		return endErr()
	}
}
