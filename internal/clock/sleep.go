package clock

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/sentinel"
)

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
