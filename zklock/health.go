package zklock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/secure"
	"github.com/fencelock/fencelock/lock"
)

var _ lock.HealthChecker = (*Locker)(nil)

// Healthy implements [lock.HealthChecker]. The Locker trusts its session
// while connected, or cut off for less than the session timeout minus the
// loss margin.
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
