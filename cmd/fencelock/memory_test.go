package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// memURL is the backend URL of the tests against locktest.Memory; only
// its identity query parameter (set by --identity) is read.
const memURL = "mem://test"

// memOpen opens a new Locker of m for every invocation, with the identity
// the URL carries, as lock.Open opens a new client of one cluster.
func memOpen(m *locktest.Memory) func(context.Context, string) (lock.Locker, error) {
	return func(_ context.Context, raw string) (lock.Locker, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", lock.ErrInvalidConfig, err)
		}
		return m.NewLocker(u.Query().Get("identity")), nil
	}
}

// bareLocker hides every optional interface of the Locker it wraps: a
// backend that offers only exclusive locks.
type bareLocker struct{ lock.Locker }

// holding is a grant a test takes before running the command.
type holding struct {
	identity string
	shared   bool
	limit    int // > 0: a permit
}

// hold takes the grants hs on m under the name, each from its own Locker
// (closed in t.Cleanup), and returns their tokens.
func hold(t *testing.T, m *locktest.Memory, name string, hs ...holding) []uint64 {
	t.Helper()
	ctx := context.Background()
	var tokens []uint64
	for _, h := range hs {
		l := m.NewLocker(h.identity)
		t.Cleanup(func() { l.Close() })
		var (
			lease lock.Lease
			err   error
		)
		switch {
		case h.limit > 0:
			lease, err = l.TryAcquireSemaphore(ctx, name, h.limit)
		case h.shared:
			lease, err = l.TryAcquireShared(ctx, name)
		default:
			lease, err = l.TryAcquire(ctx, name)
		}
		if err != nil {
			t.Fatalf("hold %+v of %q: %v", h, name, err)
		}
		tokens = append(tokens, uint64(lease.Token()))
	}
	return tokens
}

// TestRunKinds runs "run" with --shared, --limit or neither against locks
// already held in an in-memory backend. The command prints its token, so
// stdout tells whether it ran and under which grant.
func TestRunKinds(t *testing.T) {
	const ran = `echo "ran $FENCING_TOKEN"`
	reader := holding{identity: "reader", shared: true}
	writer := holding{identity: "writer"}
	permit2 := holding{identity: "permit", limit: 2}
	tests := []struct {
		name  string
		held  []holding
		flags []string
		code  int
		ran   bool   // the command ran (stdout "ran <token>")
		want  string // in stderr; "" wants stderr empty
	}{
		{"shared on a free lock", nil, []string{"--shared"}, exitOK, true, ""},
		{"shared beside readers", []holding{reader, reader}, []string{"--shared", "--try"}, exitOK, true, ""},
		{"shared waits beside readers", []holding{reader}, []string{"--shared", "--wait", "10s"}, exitOK, true, ""},
		{"shared try while a writer holds", []holding{writer}, []string{"--shared", "--try"}, exitHeld, false, "is held by token=1 identity=writer; not running"},
		{"shared wait while a writer holds", []holding{writer}, []string{"--shared", "--wait", "20ms"}, exitHeld, false, "is held by token=1 identity=writer"},
		{"exclusive try while readers hold", []holding{reader, reader}, []string{"--try"}, exitHeld, false, "is held by 2 readers; not running"},
		{"exclusive try while one reader holds", []holding{reader}, []string{"--try"}, exitHeld, false, "is held by 1 reader; not running"},
		{"permit free", []holding{permit2}, []string{"--limit", "2", "--try"}, exitOK, true, ""},
		{"permits taken", []holding{permit2, permit2}, []string{"--limit", "2", "--try"}, exitHeld, false, `semaphore "jobs/x" has no free permit (2 of 2 held)`},
		{"permits taken, wait", []holding{permit2, permit2}, []string{"--limit=2", "--wait", "20ms"}, exitHeld, false, "has no free permit"},
		{"limit disagrees", []holding{permit2}, []string{"--limit", "3", "--try"}, exitError, false, "incompatible request"},
		{"limit disagrees, waiting", []holding{permit2}, []string{"--limit", "1"}, exitError, false, "incompatible request"},
		{"shared on a semaphore", []holding{permit2}, []string{"--shared"}, exitError, false, "incompatible request"},
		{"exclusive on a semaphore", []holding{permit2}, nil, exitError, false, "incompatible request"},
		{"permit on a lock", []holding{reader}, []string{"--limit", "2"}, exitError, false, "incompatible request"},
		{"limit beyond the backend's", nil, []string{"--limit", strconv.Itoa(1 << 31)}, exitUsage, false, "invalid configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := locktest.NewMemory()
			const name = "jobs/x"
			tokens := hold(t, m, name, tt.held...)
			args := append(append([]string{"run", "--lock", name}, tt.flags...), "--", "sh", "-c", ran)
			code, stdout, stderr := runAppWith(t, memURL, memOpen(m), args...)
			if code != tt.code {
				t.Errorf("fencelock %q: exit status = %d; want %d (stderr %q)", args, code, tt.code, stderr)
			}
			if tt.ran {
				tok, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(stdout, "ran "), "\n"), 10, 64)
				if err != nil || (len(tokens) > 0 && tok <= tokens[len(tokens)-1]) {
					t.Errorf("fencelock %q: stdout = %q; want \"ran <token>\" with a token above %v", args, stdout, tokens)
				}
			} else if stdout != "" {
				t.Errorf("fencelock %q: stdout = %q; want nothing (the command must not run)", args, stdout)
			}
			switch {
			case tt.want == "" && stderr != "":
				t.Errorf("fencelock %q: stderr = %q; want nothing", args, stderr)
			case tt.want != "" && (strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "fencelock: ") || !strings.Contains(stderr, tt.want)):
				t.Errorf("fencelock %q: stderr = %q; want one line \"fencelock: ...%s...\"", args, stderr, tt.want)
			}
			// Whatever happened, the run left no record of its own.
			if recs := m.Records(name); len(recs) != len(tt.held) {
				t.Errorf("records of %q after the run = %q; want the %d held before", name, recs, len(tt.held))
			}
		})
	}
}

// TestRunWithoutInterface: a backend whose Locker lacks SharedLocker or
// Semaphore gets a clear error, and the command does not run.
func TestRunWithoutInterface(t *testing.T) {
	tests := []struct {
		flag, want string
	}{
		{"--shared", "this backend offers no shared locks"},
		{"--limit=3", "this backend offers no semaphores"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			m := locktest.NewMemory()
			open := func(ctx context.Context, raw string) (lock.Locker, error) {
				l, err := memOpen(m)(ctx, raw)
				return bareLocker{l}, err
			}
			args := []string{"run", tt.flag, "--lock", "a", "--", "sh", "-c", "echo ran"}
			code, stdout, stderr := runAppWith(t, memURL, open, args...)
			if code != exitError || stdout != "" {
				t.Errorf("fencelock %q = %d, stdout %q; want %d, nothing", args, code, stdout, exitError)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("fencelock %q: stderr = %q; want one line with %q", args, stderr, tt.want)
			}
		})
	}
}

// TestHolderLists: holder prints every holder, one line each in grant
// order, with the marker of its kind; exit 3 when free.
func TestHolderLists(t *testing.T) {
	tests := []struct {
		name   string
		held   []holding
		bare   bool   // the backend cannot list holders
		format string // the expected stdout, with %d for each token in turn
		code   int
	}{
		{"free", nil, false, "", exitFree},
		{"writer", []holding{{identity: "w"}}, false, "token=%d identity=w\n", exitOK},
		{"readers", []holding{{identity: "r1", shared: true}, {identity: "r 2", shared: true}}, false,
			"token=%d identity=r1 shared\ntoken=%d identity=\"r 2\" shared\n", exitOK},
		{"permits", []holding{{identity: "p1", limit: 3}, {identity: "p2", limit: 3}, {identity: "p3", limit: 3}}, false,
			"token=%d identity=p1 permit limit=3\ntoken=%d identity=p2 permit limit=3\ntoken=%d identity=p3 permit limit=3\n", exitOK},
		{"writer, backend without lister", []holding{{identity: "w"}}, true, "token=%d identity=w\n", exitOK},
		{"readers, backend without lister", []holding{{identity: "r1", shared: true}, {identity: "r2", shared: true}}, true,
			"token=%d identity=r1 shared\n", exitOK},
		{"free, backend without lister", nil, true, "", exitFree},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := locktest.NewMemory()
			const name = "jobs/y"
			tokens := hold(t, m, name, tt.held...)
			open := memOpen(m)
			if tt.bare {
				open = func(ctx context.Context, raw string) (lock.Locker, error) {
					l, err := memOpen(m)(ctx, raw)
					return bareLocker{l}, err
				}
			}
			var args []any
			for _, tok := range tokens[:strings.Count(tt.format, "%d")] {
				args = append(args, tok)
			}
			want := fmt.Sprintf(tt.format, args...)
			code, stdout, stderr := runAppWith(t, memURL, open, "holder", name)
			if code != tt.code || stdout != want {
				t.Errorf("fencelock holder %s = %d, %q (stderr %q); want %d, %q", name, code, stdout, stderr, tt.code, want)
			}
			if tt.code == exitFree && stderr != fmt.Sprintf("fencelock: lock %q is free\n", name) {
				t.Errorf("fencelock holder %s: stderr %q; want the lock is free", name, stderr)
			}
		})
	}
}
