package etcdlock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

var _ lock.HealthChecker = (*Locker)(nil)

// Healthy implements [lock.HealthChecker]: nil at once while the session
// lease is live, else it grants the one the next Acquire would use.
func (l *Locker) Healthy(ctx context.Context) error {
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("etcdlock: healthy: %w", err)
	}
	err := l.bounded(ctx, func(ctx context.Context) error {
		_, err := l.session(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("etcdlock: healthy: %w", err)
	}
	return nil
}
