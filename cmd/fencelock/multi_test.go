package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// envLine prints what the command sees of the variables run sets.
const envLine = `echo "locks=$FENCELOCK_LOCKS a=$FENCING_TOKEN_JOBS_A b=$FENCING_TOKEN_JOBS_B token=${FENCING_TOKEN-unset} lock=${FENCELOCK_LOCK-unset}"`

// runMem runs the command against m with environ as the inherited
// environment.
func runMem(t *testing.T, m *locktest.Memory, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{
		openURL: memOpen(m),
		stdin:   strings.NewReader(""),
		stdout:  &stdout,
		stderr:  &stderr,
		getenv: func(k string) string {
			if k == "FENCELOCK_URL" {
				return memURL
			}
			return ""
		},
		environ: environ,
	}
	code := a.main(context.Background(), args)
	return code, stdout.String(), stderr.String()
}

// TestRunSeveralLocks: with several --lock, run holds them all while the
// command runs, passes each token in its own variable and no
// FENCING_TOKEN (not even an inherited one), and releases them all.
func TestRunSeveralLocks(t *testing.T) {
	m := locktest.NewMemory()
	inherited := []string{"FENCING_TOKEN=99", "FENCELOCK_LOCK=outer", "FENCELOCK_LOCKS=outer"}
	code, stdout, stderr := runMem(t, m, inherited, "run", "--lock", "jobs/b", "--lock", "jobs/a", "--", "sh", "-c", envLine)
	want := regexp.MustCompile(`^locks=jobs/a jobs/b a=([1-9]\d*) b=([1-9]\d*) token=unset lock=unset\n$`)
	mt := want.FindStringSubmatch(stdout)
	if code != exitOK || mt == nil || mt[1] == mt[2] || stderr != "" {
		t.Errorf("run --lock jobs/b --lock jobs/a = %d, stdout %q, stderr %q; want 0, %v with two tokens, nothing", code, stdout, stderr, want)
	}
	for _, name := range []string{"jobs/a", "jobs/b"} {
		if recs := m.Records(name); len(recs) != 0 {
			t.Errorf("records of %q after the run = %q; want none", name, recs)
		}
	}

	// One --lock: FENCING_TOKEN and FENCELOCK_LOCK as always, and the
	// variables of several.
	code, stdout, _ = runMem(t, m, inherited, "run", "--lock", "jobs/a", "--", "sh", "-c", envLine)
	want = regexp.MustCompile(`^locks=jobs/a a=([1-9]\d*) b= token=([1-9]\d*) lock=jobs/a\n$`)
	if mt := want.FindStringSubmatch(stdout); code != exitOK || mt == nil || mt[1] != mt[2] {
		t.Errorf("run --lock jobs/a = %d, stdout %q; want 0, %v with one token twice", code, stdout, want)
	}
}

// TestRunSeveralHeld: when one of the names is held, run --try and --wait
// exit 75 naming its holder, and hold none of the others.
func TestRunSeveralHeld(t *testing.T) {
	for _, flag := range []string{"--try", "--wait=20ms"} {
		t.Run(flag, func(t *testing.T) {
			m := locktest.NewMemory()
			tok := hold(t, m, "jobs/b", holding{identity: "other"})
			args := []string{"run", flag, "--lock", "jobs/a", "--lock", "jobs/b", "--lock", "jobs/c", "--", "sh", "-c", "echo ran"}
			code, stdout, stderr := runMem(t, m, nil, args...)
			if code != exitHeld || stdout != "" {
				t.Errorf("fencelock %q = %d, stdout %q; want %d, nothing", args, code, stdout, exitHeld)
			}
			if want := fmt.Sprintf("fencelock: run: lock \"jobs/b\" is held by token=%d identity=other; not running the command\n", tok[0]); stderr != want {
				t.Errorf("fencelock %q: stderr %q; want %q", args, stderr, want)
			}
			for _, name := range []string{"jobs/a", "jobs/c"} {
				if recs := m.Records(name); len(recs) != 0 {
					t.Errorf("records of %q after the refused run = %q; want none", name, recs)
				}
			}
		})
	}
}

// TestRunSeveralLost: losing one of the names while the command runs
// stops the command, exits 76 naming that lock, and releases the others.
func TestRunSeveralLost(t *testing.T) {
	m := locktest.NewMemory()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runMem(t, m, nil, "run", "--grace", "5s", "--lock", "jobs/a", "--lock", "jobs/b", "--", "sh", "-c", "sleep 30")
		done <- result{code, stdout, stderr}
	}()
	op := m.NewLocker("operator")
	defer op.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changes, _, err := op.Observe(ctx, "jobs/b")
	if err != nil {
		t.Fatalf("Observe(jobs/b) = %v", err)
	}
	var h lock.Holder
	for h = range changes {
		if h.Token != 0 {
			break
		}
	}
	if h.Token == 0 {
		t.Fatalf("run did not take jobs/b within 10s")
	}
	if err := op.Revoke(ctx, "jobs/b", h.Token); err != nil {
		t.Fatalf("Revoke(jobs/b, %d) = %v", h.Token, err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("run still running 10s after jobs/b was revoked")
	}
	if r.code != exitLost || !strings.HasPrefix(r.stderr, `fencelock: run: lost lock "jobs/b" while the command ran`) {
		t.Errorf("run whose jobs/b was revoked = %d, stderr %q; want %d, lost lock \"jobs/b\"", r.code, r.stderr, exitLost)
	}
	if recs := m.Records("jobs/a"); len(recs) != 0 {
		t.Errorf("records of jobs/a after the loss = %q; want none", recs)
	}
}
