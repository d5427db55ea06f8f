package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestDemoEmbedded runs the demo as "make demo" does, with its embedded
// etcd, and checks that the story it tells really happened: in the fenced
// run the stale write was rejected and B's value kept, in the unfenced run
// A's stale write overwrote B's.
func TestDemoEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if err := run(ctx, nil, &stdout, &stderr); err != nil {
		t.Fatalf("run() = %v; want nil\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Logf("demo took %v:\n%s", time.Since(start).Round(time.Millisecond), out)

	fenced, unfenced, ok := strings.Cut(out, "== 2.")
	if !ok {
		t.Fatalf("output has no second scenario (\"== 2.\"):\n%s", out)
	}
	checkTokens(t, "fenced run", fenced)
	checkTokens(t, "unfenced run", unfenced)
	checkLostFirst(t, "fenced run", fenced)
	checkLostFirst(t, "unfenced run", unfenced)
	for _, want := range []string{
		"REJECTED: fencing: stale token",
		`result: report = "B's report". B's write is safe.`,
	} {
		if !strings.Contains(fenced, want) {
			t.Errorf("fenced run output lacks %q:\n%s", want, fenced)
		}
	}
	if strings.Contains(unfenced, "REJECTED") {
		t.Errorf("unfenced run rejected a write:\n%s", unfenced)
	}
	if want := `result: report = "A's stale report". B's write is lost`; !strings.Contains(unfenced, want) {
		t.Errorf("unfenced run output lacks %q:\n%s", want, unfenced)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q; want nothing", stderr.String())
	}
}

var tokenRE = regexp.MustCompile(`(?m)^  ([AB])  acquires the lock: token (\d+)`)

// checkTokens checks that A and B both acquired, B after A with a higher
// token, and that the stale write carried A's token.
func checkTokens(t *testing.T, what, out string) {
	t.Helper()
	m := tokenRE.FindAllStringSubmatch(out, -1)
	if len(m) != 2 || m[0][1] != "A" || m[1][1] != "B" {
		t.Fatalf("%s: acquisitions = %v; want A then B:\n%s", what, m, out)
	}
	a, _ := strconv.ParseUint(m[0][2], 10, 64)
	b, _ := strconv.ParseUint(m[1][2], 10, 64)
	if b <= a {
		t.Errorf("%s: token of B = %d; want greater than A's %d", what, b, a)
	}
	if want := "with token " + m[0][2] + "\n"; !strings.Contains(out, "A's stale report\" "+want) {
		t.Errorf("%s: A's late write does not carry A's token %s:\n%s", what, m[0][2], out)
	}
}

func TestDemoFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--etcd", "127.0.0.1:1", "--zk", "127.0.0.1:2"}, "not both"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--ttl", "-1s"}, "must be positive"},
		{[]string{"--nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v; want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// checkLostFirst checks that the story says what happened to A: its
// Locker declared the lease lost before B was granted the lock, and A's
// write went out after that.
func checkLostFirst(t *testing.T, what, out string) {
	t.Helper()
	lost := strings.Index(out, "declared the lease lost")
	granted := strings.Index(out, "B  acquires the lock")
	resumed := strings.Index(out, "resumes. Its lease ended")
	if lost < 0 || granted < 0 || resumed < 0 || !(lost < granted && granted < resumed) {
		t.Errorf("%s: want A's loss, then B's grant, then A's write after its lease ended:\n%s", what, out)
	}
}
