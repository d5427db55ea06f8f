package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// TestRevoke: revoke ends the grant with the token given and nothing else.
func TestRevoke(t *testing.T) {
	const name = "jobs/r"
	ctx := context.Background()
	m := locktest.NewMemory()
	holder := m.NewLocker("h")
	t.Cleanup(func() { holder.Close() })
	le, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	tok := strconv.FormatUint(uint64(le.Token()), 10)
	wrong := strconv.FormatUint(uint64(le.Token())+1, 10)
	bare := func(ctx context.Context, raw string) (lock.Locker, error) {
		l, err := memOpen(m)(ctx, raw)
		return bareLocker{l}, err
	}

	tests := []struct {
		name   string
		open   func(context.Context, string) (lock.Locker, error)
		args   []string
		code   int
		stdout string
	}{
		{"no token", memOpen(m), []string{"revoke", name}, exitUsage, ""},
		{"token 0", memOpen(m), []string{"revoke", name, "--token", "0"}, exitUsage, ""},
		{"bad token", memOpen(m), []string{"revoke", name, "--token", "x"}, exitUsage, ""},
		{"no name", memOpen(m), []string{"revoke", "--token", tok}, exitUsage, ""},
		{"bad name", memOpen(m), []string{"revoke", "a//b", "--token", tok}, exitUsage, ""},
		{"backend without revoke", bare, []string{"revoke", name, "--token", tok}, exitError, ""},
		{"another token", memOpen(m), []string{"revoke", name, "--token", wrong}, exitFree, ""},
		{"another name", memOpen(m), []string{"revoke", name + "x", "--token", tok}, exitFree, ""},
		{"the holder", memOpen(m), []string{"revoke", "--token", tok, name}, exitOK, "revoked token=" + tok + "\n"},
		{"again", memOpen(m), []string{"revoke", name, "--token", tok}, exitFree, ""},
	}
	for _, tt := range tests {
		code, stdout, stderr := runAppWith(t, memURL, tt.open, tt.args...)
		if code != tt.code || stdout != tt.stdout {
			t.Errorf("%s: fencelock %q = %d, %q (stderr %q); want %d, %q", tt.name, tt.args, code, stdout, stderr, tt.code, tt.stdout)
		}
		if tt.code == exitFree && stderr != fmt.Sprintf("fencelock: lock %q has no holder with token %s\n", tt.args[1], tt.args[3]) {
			t.Errorf("%s: stderr %q; want no holder with token", tt.name, stderr)
		}
		if tt.code != exitOK && le.Err() != nil && tt.name != "again" {
			t.Fatalf("%s: the lease ended: %v", tt.name, le.Err())
		}
	}
	if err := le.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("revoked lease Err() = %v; want an error wrapping %v", err, lock.ErrLost)
	}
}
