package etcdlock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/lock"
)

// The integration tests look inside a Locker through these hooks; they
// are not public API.
func init() {
	testhook.EtcdSessionLeaseID = func(locker any) (int64, bool) {
		l := locker.(*Locker)
		if l.usable(context.Background()) != nil {
			return 0, false
		}
		s, _ := l.currentSession()
		if s == nil {
			return 0, false
		}
		return int64(s.id), true
	}
	testhook.EtcdRecordPrefix = func(locker any, name string) (string, error) {
		l := locker.(*Locker)
		if err := l.usable(context.Background()); err != nil {
			return "", fmt.Errorf("etcdlock: record prefix: %w", err)
		}
		if err := lock.ValidateName(name); err != nil {
			return "", fmt.Errorf("etcdlock: record prefix: %w", err)
		}
		return l.namePrefix(name), nil
	}
}
