package etcdlock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

var _ lock.HealthChecker = (*Locker)(nil)

// Healthy implements [lock.HealthChecker]. While the Locker's session
// lease is live (its keepalives acknowledged within the loss deadline) it
// returns nil without a request. Without one it grants a new session
// lease, the one the next Acquire would use: one round trip, bounded by
// ctx, after which the session is kept alive as usual.
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
