package locktest

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lock"
)

var _ lock.HealthChecker = (*MemLocker)(nil)

// Healthy implements [lock.HealthChecker]: nil unless l is closed. A
// MemLocker without a session opens one, as its next Acquire would.
func (l *MemLocker) Healthy(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("locktest: healthy: %w: nil context", lock.ErrInvalidConfig)
	}
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.closed {
		return fmt.Errorf("locktest: healthy: %w", lock.ErrClosed)
	}
	if l.sess == nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("locktest: healthy: %w", err)
		}
		l.openSessionLocked()
	}
	return nil
}
