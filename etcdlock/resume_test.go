package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

func FuzzParseTicket(f *testing.F) {
	for _, s := range []string{"etcd/1 42 694d7a1b2c3d4e5f fencelock/jobs/#694d7a1b2c3d4e5f-1", "etcd/1 42 694d fencelock/a/#694d-1\n",
		"etcd/1 0 1 k", "etcd/1 1 -1 k", "etcd/1 1 1", "etcd/2 1 1 k", "etcd/1 +1 +1 k k", "", " ", "etcd/1 1 zz k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rev, id, key, ok := parseTicket(lock.Ticket(s))
		if !ok {
			return
		}
		if rev <= 0 || id <= 0 {
			t.Fatalf("parseTicket(%q) = %d, %d, %q, true; want a positive revision and lease ID", s, rev, id, key)
		}
		again := lock.Ticket(fmt.Sprintf("etcd/1 %d %x %s", rev, int64(id), key))
		if r2, id2, k2, ok2 := parseTicket(again); !ok2 || r2 != rev || id2 != id || k2 != key {
			t.Fatalf("parseTicket(%q) = %d, %x, %q, %v; want %d, %x, %q, true", again, r2, int64(id2), k2, ok2, rev, int64(id), key)
		}
	})
}

// TestResumeBadInput: a ticket that is not one of the name's under the
// Locker's prefix and layout is refused before any I/O (the client points
// at a closed port), and a lease that was not granted has no ticket.
func TestResumeBadInput(t *testing.T) {
	client := newTestClient(t)
	l, err := New(client, WithPrefix("app"))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	mutexes, err := New(client, WithPrefix("app"), WithLayout(LayoutConcurrency))
	if err != nil {
		t.Fatalf("New(LayoutConcurrency) = %v", err)
	}
	t.Cleanup(func() { mutexes.Close() })
	ctx := context.Background()
	good := lock.Ticket("etcd/1 42 694d app/jobs/#694d-1")
	tests := []struct {
		call string
		l    *Locker
		name string
		t    lock.Ticket
		want error
	}{
		{"empty", l, "jobs", "", lock.ErrInvalidConfig},
		{"version 2", l, "jobs", "etcd/2 42 694d app/jobs/#694d-1", lock.ErrInvalidConfig},
		{"token 0", l, "jobs", "etcd/1 0 694d app/jobs/#694d-1", lock.ErrInvalidConfig},
		{"lease not hexadecimal", l, "jobs", "etcd/1 42 xyz app/jobs/#694d-1", lock.ErrInvalidConfig},
		{"other name", l, "other", good, lock.ErrInvalidConfig},
		{"name below", l, "jobs", "etcd/1 42 694d app/jobs/#694d-1/x", lock.ErrInvalidConfig},
		{"no record", l, "jobs", "etcd/1 42 694d app/jobs/#", lock.ErrInvalidConfig},
		{"other prefix", l, "jobs", "etcd/1 42 694d fencelock/jobs/#694d-1", lock.ErrInvalidConfig},
		{"layout concurrency", mutexes, "jobs", good, lock.ErrInvalidConfig},
		{"bad name", l, "jobs/", good, lock.ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			le, err := lock.Resume(ctx, tt.l, tt.name, tt.t)
			if le != nil || !errors.Is(err, tt.want) {
				t.Fatalf("Resume(%q, %q) = %v, %v; want nil, an error wrapping %v", tt.name, tt.t, le, err, tt.want)
			}
		})
	}
	if _, ok := l.SessionLease(); ok {
		t.Errorf("SessionLease() = _, true after refused resumes; want no session")
	}
	for _, le := range []*Lease{nil, {}} {
		if tk, err := le.Ticket(); tk != "" || !errors.Is(err, lock.ErrInvalidConfig) {
			t.Errorf("(%#v).Ticket() = %q, %v; want \"\", an error wrapping %v", le, tk, err, lock.ErrInvalidConfig)
		}
	}
}
