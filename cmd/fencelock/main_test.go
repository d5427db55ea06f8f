package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// These cases fail before any backend is contacted. The end-to-end tests
// against real clusters live in integration/clitest.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string // FENCELOCK_URL
		code int
		want string
	}{
		{"no command", nil, "", exitUsage, "no command given"},
		{"unknown command", []string{"grab"}, "", exitUsage, `unknown command "grab"`},
		{"unknown flag", []string{"--nope", "holder", "a"}, "", exitUsage, "flag provided but not defined: -nope"},
		{"no URL", []string{"holder", "a"}, "", exitUsage, "give --url or set FENCELOCK_URL"},
		{"unknown scheme", []string{"--url", "redis://127.0.0.1:6379", "holder", "a"}, "", exitUsage, `unknown scheme "redis"`},
		{"unknown scheme from env", []string{"holder", "a"}, "redis://127.0.0.1:6379", exitUsage, `unknown scheme "redis"`},
		{"bad query key", []string{"holder", "a", "--url", "etcd://127.0.0.1:2379?tll=1s"}, "", exitUsage, `unknown query key "tll"`},
		{"bad duration", []string{"holder", "a"}, "zk://127.0.0.1:2181?session_timeout=soon", exitUsage, "invalid configuration"},
		{"identity twice", []string{"--identity", "me", "holder", "a"}, "etcd://127.0.0.1:2379?identity=you", exitUsage, "identity given twice"},
		{"holder without name", []string{"holder"}, "etcd://127.0.0.1:2379", exitUsage, "no lock name given"},
		{"holder two names", []string{"holder", "a", "b"}, "etcd://127.0.0.1:2379", exitUsage, "want one lock name"},
		{"holder bad name", []string{"holder", "a//b"}, "etcd://127.0.0.1:2379", exitUsage, "invalid name"},
		{"leader bad name", []string{"leader", "../x", "--watch"}, "etcd://127.0.0.1:2379", exitUsage, "invalid name"},
		{"run without lock", []string{"run", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--lock NAME is required"},
		{"run without command", []string{"run", "--lock", "a"}, "etcd://127.0.0.1:2379", exitUsage, "no command given"},
		{"run bad name", []string{"run", "--lock", "a b", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "invalid name"},
		{"run try and wait", []string{"run", "--lock", "a", "--try", "--wait", "1s", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "not both"},
		{"run bad grace", []string{"run", "--lock", "a", "--grace", "0s", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--grace 0s"},
		{"bad timeout", []string{"--timeout", "-1s", "holder", "a"}, "etcd://127.0.0.1:2379", exitUsage, "--timeout -1s"},
		{"run shared and limit", []string{"run", "--shared", "--limit", "2", "--lock", "a", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--shared or --limit, not both"},
		{"run limit and shared", []string{"run", "--limit=2", "--lock", "a", "--shared", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--shared or --limit, not both"},
		{"run limit zero", []string{"run", "--limit", "0", "--lock", "a", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--limit 0: must be at least 1"},
		{"run limit negative", []string{"run", "--limit", "-3", "--lock", "a", "--try", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--limit -3: must be at least 1"},
		{"run limit not a number", []string{"run", "--limit", "two", "--lock", "a", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, `invalid value "two" for flag -limit`},
		{"run lock twice", []string{"run", "--lock", "a", "--lock", "b", "--lock", "a", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, `--lock "a" given twice`},
		{"run locks sharing a variable", []string{"run", "--lock", "db/x", "--lock", "db.X", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "both pass their token as FENCING_TOKEN_DB_X"},
		{"run second lock bad name", []string{"run", "--lock", "a", "--lock", "b//c", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "invalid name"},
		{"run shared with several locks", []string{"run", "--shared", "--lock", "a", "--lock", "b", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--shared and --limit take one --lock"},
		{"run limit with several locks", []string{"run", "--lock", "a", "--lock", "b", "--limit", "2", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, "--shared and --limit take one --lock"},
		{"run shared with value", []string{"run", "--shared=maybe", "--lock", "a", "--", "true"}, "etcd://127.0.0.1:2379", exitUsage, `invalid boolean value "maybe" for -shared`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("fencelock %q: exit status = %d; want %d (stderr %q)", tt.args, code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("fencelock %q: stdout = %q; want nothing", tt.args, stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "fencelock: ") {
				t.Errorf("fencelock %q: stderr = %q; want one line starting with \"fencelock: \"", tt.args, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("fencelock %q: stderr = %q; want it to contain %q", tt.args, stderr, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"run", "-h"}, {"holder", "--help"}} {
		code, stdout, stderr := runApp(t, "", args...)
		if code != exitOK || !strings.HasPrefix(stdout, "Usage:") || stderr != "" {
			t.Errorf("fencelock %q = %d, stdout %.20q, stderr %q; want 0, the usage, nothing", args, code, stdout, stderr)
		}
	}
}

func TestFormatHolder(t *testing.T) {
	tests := []struct {
		identity string
		token    uint64
		want     string
	}{
		{"host/12/ab", 42, "token=42 identity=host/12/ab"},
		{"worker 1", 7, `token=7 identity="worker 1"`},
		{"", 7, `token=7 identity=""`},
		{"anything", 0, "none"},
	}
	for _, tt := range tests {
		h := lock.Holder{Identity: tt.identity, Token: fencing.Token(tt.token)}
		if got := formatHolder(h); got != tt.want {
			t.Errorf("formatHolder(%+v) = %q; want %q", h, got, tt.want)
		}
	}
}

// The markers of shared grants and permits follow the exclusive line.
func TestFormatHolderKinds(t *testing.T) {
	tests := []struct {
		h    lock.Holder
		want string
	}{
		{lock.Holder{Identity: "r", Token: 5, Shared: true}, "token=5 identity=r shared"},
		{lock.Holder{Identity: "p", Token: 6, Shared: true, Limit: 3}, "token=6 identity=p permit limit=3"},
		{lock.Holder{Identity: "a b", Token: 7, Shared: true}, `token=7 identity="a b" shared`},
		{lock.Holder{Identity: "w", Token: 8}, "token=8 identity=w"},
	}
	for _, tt := range tests {
		h := tt.h
		if got := formatHolder(h); got != tt.want {
			t.Errorf("formatHolder(%+v) = %q; want %q", h, got, tt.want)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args  []string
		pos   string
		watch bool
	}{
		{[]string{"a", "--watch"}, "a", true},
		{[]string{"--watch", "a"}, "a", true},
		{[]string{"a"}, "a", false},
		{[]string{"--", "--watch"}, "--watch", false},
		{[]string{"a", "b", "--watch"}, "a b", true},
	}
	for _, tt := range tests {
		fs := newFlagSet("t")
		watch := fs.Bool("watch", false, "")
		pos, err := parseInterspersed(fs, tt.args)
		if err != nil || strings.Join(pos, " ") != tt.pos || *watch != tt.watch {
			t.Errorf("parseInterspersed(%q) = %q, watch %v, %v; want %q, watch %v, nil", tt.args, pos, *watch, err, tt.pos, tt.watch)
		}
	}
}

func runApp(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	return runAppWith(t, url, nil, args...)
}

// runAppWith runs the command with FENCELOCK_URL=url and openURL opening
// the backend (nil: lock.Open).
func runAppWith(t *testing.T, url string, openURL func(context.Context, string) (lock.Locker, error), args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{
		openURL: openURL,
		stdin:   strings.NewReader(""),
		stdout:  &stdout,
		stderr:  &stderr,
		getenv: func(k string) string {
			if k == "FENCELOCK_URL" {
				return url
			}
			return ""
		},
	}
	code := a.main(context.Background(), args)
	return code, stdout.String(), stderr.String()
}
