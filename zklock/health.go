package zklock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.HealthChecker = (*Locker)(nil)

// Healthy implements [lock.HealthChecker]. While the Locker trusts its
// ZooKeeper session (connected, or cut off for less than the session
// timeout minus the loss margin) it returns nil without a request.
// Without one it waits, bounded by ctx, for the connection to establish a
// session, as an Acquire would.
func (l *Locker) Healthy(ctx context.Context) error {
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("zklock: healthy: %w", err)
	}
	if err := l.enter(); err != nil {
		return fmt.Errorf("zklock: healthy: %w", err)
	}
	defer l.leave()
	if _, err := l.ss.get(ctx); err != nil {
		return fmt.Errorf("zklock: healthy: %w", secure.Refusal(err, isRefusal))
	}
	return nil
}
