package zklock

import (
	"context"

	"github.com/fencelock/fencelock/internal/testhook"
)

// The integration tests look inside a Locker through these hooks; they
// are not public API.
func init() {
	testhook.ZKRoot = func(locker any) string {
		l := locker.(*Locker)
		if l == nil || l.o == nil {
			return ""
		}
		return l.o.root
	}
	testhook.ZKSessionID = func(locker any) int64 {
		l := locker.(*Locker)
		if l.usable(context.Background()) != nil {
			return 0
		}
		return l.ss.id()
	}
	testhook.ZKLeaseSessionID = func(lease any) int64 {
		le := lease.(*Lease)
		if !le.valid() {
			return 0
		}
		return le.s.id
	}
}
