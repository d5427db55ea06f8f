package lock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// resumer is a Locker that records the Resume it was asked for.
type resumer struct {
	lock.Locker
	name string
	t    lock.Ticket
}

func (r *resumer) Resume(_ context.Context, name string, t lock.Ticket) (lock.Lease, error) {
	r.name, r.t = name, t
	return nil, lock.ErrLost
}

func TestResume(t *testing.T) {
	ctx := context.Background()
	mem := locktest.NewMemory().NewLocker("")
	t.Cleanup(func() { mem.Close() })
	r := &resumer{Locker: mem}
	var nilCtx context.Context
	var typedNil *resumer
	tests := []struct {
		call string
		f    func() (lock.Lease, error)
		want error
	}{
		{"Resume(nil ctx)", func() (lock.Lease, error) { return lock.Resume(nilCtx, r, "a", "x") }, lock.ErrInvalidConfig},
		{"Resume(nil Locker)", func() (lock.Lease, error) { return lock.Resume(ctx, nil, "a", "x") }, lock.ErrInvalidConfig},
		{"Resume(typed nil Locker)", func() (lock.Lease, error) { return lock.Resume(ctx, typedNil, "a", "x") }, lock.ErrInvalidConfig},
		{"Resume(Memory)", func() (lock.Lease, error) { return lock.Resume(ctx, mem, "a", "x") }, lock.ErrUnsupported},
		{"Resume(Resumer)", func() (lock.Lease, error) { return lock.Resume(ctx, r, "a", "x") }, lock.ErrLost},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			le, err := tt.f()
			if le != nil || !errors.Is(err, tt.want) {
				t.Fatalf("%s = %v, %v; want nil, an error wrapping %v", tt.call, le, err, tt.want)
			}
		})
	}
	if r.name != "a" || r.t != "x" {
		t.Errorf("Resume(ctx, r, %q, %q) called r.Resume with %q, %q", "a", "x", r.name, r.t)
	}
	if !errors.Is(lock.ErrUnsupported, errors.ErrUnsupported) {
		t.Errorf("lock.ErrUnsupported is not errors.ErrUnsupported")
	}
}
