package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stream builds a test2json stream from "action pkg test output" lines;
// "-" stands for an empty field.
func stream(t *testing.T, lines ...string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		f := strings.SplitN(l, " ", 4)
		for len(f) < 4 {
			f = append(f, "-")
		}
		ev := event{Action: f[0]}
		if f[1] != "-" {
			ev.Package = "github.com/fencelock/fencelock/integration/" + f[1]
		}
		if f[2] != "-" {
			ev.Test = f[2]
		}
		if f[3] != "-" {
			ev.Output = f[3] + "\n"
		}
		j, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestBackendOf(t *testing.T) {
	tests := []struct{ pkg, name, want string }{
		{"x/integration/etcdtest", "TestLeaderKilled", backendEtcd},
		{"x/integration/zktest", "TestConformance/Acquire", backendZK},
		{"x/integration/cluster", "TestHarness/etcd/kill", backendEtcd},
		{"x/integration/faulttest", "TestFault/zookeeper/pause-server", backendZK},
		{"x/integration/guardtest", "TestGuardEtcd", backendEtcd},
		{"x/integration/clitest", "TestCLIZooKeeper", backendZK},
		{"x/integration/zktest2", "TestZKLeaderKilled", backendZK},
		{"x/integration/cluster", "TestProxyDelay", backendNone},
		{"x/integration/clitest", "TestCLIBadURL/etcd://127.0.0.1:9", backendNone},
		{"x/integration/fencingtest", "TestSQLApply", backendNone},
	}
	for _, tt := range tests {
		if got := backendOf(tt.pkg, tt.name); got != tt.want {
			t.Errorf("backendOf(%q, %q) = %q; want %q", tt.pkg, tt.name, got, tt.want)
		}
	}
}

func TestRequested(t *testing.T) {
	env := map[string]string{"FENCELOCK_BACKENDS": "etcd", "FENCELOCK_PROVIDER": "process"}
	tests := []struct {
		reason string
		want   bool
	}{
		{"not requested: FENCELOCK_BACKENDS=etcd (this test needs zookeeper)", true},
		{"not requested: FENCELOCK_PROVIDER=process (this test checks the containers provider)", true},
		{"not requested: FENCELOCK_BACKENDS=zookeeper (this test needs etcd)", false}, // not what was set
		{"not requested: FENCELOCK_OTHER=1", false},
		{"cluster: start zookeeper with the process provider: zookeeper not found", false},
		{"the Harness does not implement SessionExpirer", false},
	}
	for _, tt := range tests {
		if got := requested(tt.reason, env); got != tt.want {
			t.Errorf("requested(%q) = %t; want %t", tt.reason, got, tt.want)
		}
	}
	if requested("not requested: FENCELOCK_BACKENDS=etcd", map[string]string{}) {
		t.Errorf("requested() with FENCELOCK_BACKENDS unset = true; want false")
	}
}

func TestOutcomes(t *testing.T) {
	r := newResults()
	err := r.read(strings.NewReader(stream(t,
		"start etcdtest",
		"run etcdtest TestA",
		"pass etcdtest TestA",
		// A parent whose subtests carry the results; one subtest name
		// contains "/" itself.
		"run etcdtest TestB",
		"run etcdtest TestB/x://h:1/p",
		"pass etcdtest TestB/x://h:1/p",
		"run etcdtest TestB/two",
		"output etcdtest TestB/two     b_test.go:9: boom",
		"fail etcdtest TestB/two",
		"fail etcdtest TestB",
		// Skips keep their reason.
		"run etcdtest TestC",
		"output etcdtest TestC === RUN   TestC",
		"output etcdtest TestC     main_test.go:12: not requested: FENCELOCK_BACKENDS=zookeeper (this test needs etcd)",
		"output etcdtest TestC --- SKIP: TestC (0.00s)",
		"skip etcdtest TestC",
		// A parent that fails by itself after its subtests passed.
		"run etcdtest TestD",
		"run etcdtest TestD/sub",
		"pass etcdtest TestD/sub",
		"fail etcdtest TestD",
		// A test that never ended (the binary timed out).
		"run etcdtest TestE",
		"fail etcdtest",
	)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]outcome{}
	for _, o := range r.outcomes() {
		got[o.t.name] = o
	}
	want := map[string]string{
		"TestA":           "pass",
		"TestB/x://h:1/p": "pass",
		"TestB/two":       "fail",
		"TestC":           "skip",
		"TestD":           "fail",
		"TestD/sub":       "pass",
		"TestE":           "fail",
	}
	if len(got) != len(want) {
		t.Errorf("outcomes() = %d tests %v; want %d", len(got), got, len(want))
	}
	for name, status := range want {
		if got[name].status != status {
			t.Errorf("outcome of %s = %q; want %q", name, got[name].status, status)
		}
	}
	if r := got["TestC"].reason; r != "not requested: FENCELOCK_BACKENDS=zookeeper (this test needs etcd)" {
		t.Errorf("skip reason of TestC = %q", r)
	}
	if n := len(r.packageFailures()); n != 0 {
		t.Errorf("packageFailures() = %d; want 0 (its failure is explained by TestB, TestD and TestE)", n)
	}
}

func TestPackageFailure(t *testing.T) {
	r := newResults()
	r.read(strings.NewReader(stream(t,
		"run cluster TestA",
		"pass cluster TestA",
		"output cluster - leakcheck: goroutines still running after the tests:",
		"fail cluster",
	)))
	f := r.packageFailures()
	if len(f) != 1 || !strings.Contains(strings.Join(f[0].output, ""), "leakcheck") {
		t.Errorf("packageFailures() = %v; want the cluster package with its output", f)
	}
}

// TestReport runs a stage through "run" and checks what report decides.
func TestReport(t *testing.T) {
	tests := []struct {
		name     string
		backends string
		events   []string
		wantCode int
		want     []string
	}{
		{
			name:     "requested skip passes",
			backends: "etcd",
			events: []string{
				"run etcdtest TestA", "pass etcdtest TestA",
				"run zktest TestZ", "output zktest TestZ     x.go:1: not requested: FENCELOCK_BACKENDS=etcd (this test needs zookeeper)", "skip zktest TestZ",
				"pass etcdtest", "pass zktest",
			},
			wantCode: 0,
			want:     []string{"RESULT: PASS", "asked for", "zookeeper", "zookeeper left out"},
		},
		{
			name: "unrequested skip fails",
			events: []string{
				"run zktest TestZ", "output zktest TestZ     x.go:1: zookeeper not found", "skip zktest TestZ", "pass zktest",
			},
			wantCode: 1,
			want:     []string{"RESULT: FAIL (1 skip(s) nobody asked for)", "NOT ASKED FOR", "zookeeper not found", "zktest TestZ"},
		},
		{
			name: "failed test fails",
			events: []string{
				"run etcdtest TestA", "fail etcdtest TestA", "fail etcdtest",
			},
			wantCode: 1,
			want:     []string{"1 failed test(s)", "etcdtest TestA"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("FENCELOCK_BACKENDS", tt.backends)
			if err := os.WriteFile(filepath.Join(dir, "process-001.jsonl"), []byte(stream(t, tt.events...)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := appendStep(dir, step{Stage: "process", Provider: "process", Start: time.Now(), Seconds: 61, Exit: 0, Env: testEnv(), Events: "process-001.jsonl"}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			code, err := cmdReport([]string{"-dir", dir, "-left-out", "zookeeper left out"}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("report exit code = %d; want %d; output:\n%s", code, tt.wantCode, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("report output does not contain %q:\n%s", w, out.String())
				}
			}
			if !strings.Contains(out.String(), "1m01s") {
				t.Errorf("report output lacks the stage's wall time 1m01s:\n%s", out.String())
			}
		})
	}
}

// TestFollow checks the compact log: a failed test's output is shown, a
// passing package is one line.
func TestFollow(t *testing.T) {
	in := stream(t,
		"run etcdtest TestA", "output etcdtest TestA     a_test.go:3: boom", "fail etcdtest TestA",
		"output etcdtest - FAIL", "fail etcdtest",
		"run zktest TestB", "pass zktest TestB",
		"output zktest - ok  \tgithub.com/fencelock/fencelock/integration/zktest\t1.0s", "pass zktest",
	) + "not an event\n"
	var events, log bytes.Buffer
	if err := follow(strings.NewReader(in), &events, &log, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"--- FAIL: etcdtest TestA", "boom", "ok  \tgithub.com/fencelock/fencelock/integration/zktest", "not an event"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("log does not contain %q:\n%s", w, log.String())
		}
	}
	if strings.Contains(events.String(), "not an event") {
		t.Errorf("events file kept a line that is not an event")
	}
}

func TestParseFuzzList(t *testing.T) {
	out := "FuzzGuard\nFuzzParse\nok  \tgithub.com/fencelock/fencelock/fencing\t0.01s\n" +
		"?   \tgithub.com/fencelock/fencelock/cmd\t[no test files]\n" +
		"ok  \tgithub.com/fencelock/fencelock/lock\t0.02s\n" +
		"FuzzName\nok  \tgithub.com/fencelock/fencelock/lock/locktest\t0.01s\n"
	got := parseFuzzList(out)
	want := []fuzzTarget{
		{"github.com/fencelock/fencelock/fencing", "FuzzGuard"},
		{"github.com/fencelock/fencelock/fencing", "FuzzParse"},
		{"github.com/fencelock/fencelock/lock/locktest", "FuzzName"},
	}
	if len(got) != len(want) {
		t.Fatalf("parseFuzzList() = %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parseFuzzList()[%d] = %v; want %v", i, got[i], want[i])
		}
	}
}

// fuzzEvents returns the go test -json stream of a fuzz run of FuzzX in
// package p whose output is lines and that ends with action.
func fuzzEvents(t *testing.T, action string, lines ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, l := range lines {
		if err := enc.Encode(event{Action: "output", Package: "p", Test: "FuzzX", Output: l + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Encode(event{Action: action, Package: "p", Test: "FuzzX"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestFuzzDeadlineFlake checks that only the exact output of the fuzzing
// engine's deadline race (go.dev/issue/75804) is taken for it.
func TestFuzzDeadlineFlake(t *testing.T) {
	race := []string{
		"fuzz: elapsed: 0s, gathering baseline coverage: 15/15 completed, now fuzzing with 2 workers",
		"fuzz: elapsed: 6s, execs: 5510 (0/sec), new interesting: 22 (total: 37)",
		"--- FAIL: FuzzX (7.06s)",
		"    context deadline exceeded",
		"FAIL",
		"exit status 1",
	}
	tests := []struct {
		name  string
		lines []string
		want  bool
	}{
		{"the race", race, true},
		{"a failing input", append(append([]string{}, race...), "    Failing input written to testdata/fuzz/FuzzX/abc"), false},
		{"the target's own error", append([]string{"    x_test.go:12: ParseX(\"a\") = nil; want an error"}, race...), false},
		{"a panic", append([]string{"panic: runtime error: index out of range"}, race...), false},
		{"a plain failure", []string{"--- FAIL: FuzzX (1.00s)", "    x_test.go:3: bad", "FAIL"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fuzzDeadlineFlake(fuzzEvents(t, "fail", tt.lines...))
			if (got != "") != tt.want {
				t.Errorf("fuzzDeadlineFlake() = %q; want a reason: %v", got, tt.want)
			}
		})
	}
}

// TestReportRetried checks that a step retried for a known defect is
// listed apart and counts neither as a failed step nor as a failed test,
// while its run again counts.
func TestReportRetried(t *testing.T) {
	for _, againFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("again fails %v", againFails), func(t *testing.T) {
			dir := t.TempDir()
			flake := fuzzEvents(t, "fail", "--- FAIL: FuzzX (7.06s)", "    context deadline exceeded", "FAIL")
			again, exit := fuzzEvents(t, "pass"), 0
			if againFails {
				again, exit = flake, 1
			}
			for i, f := range []struct {
				data    []byte
				exit    int
				retried string
			}{{flake, 1, fuzzDeadlineFlake(flake)}, {again, exit, ""}} {
				name := fmt.Sprintf("fuzz-%03d.jsonl", i+1)
				if err := os.WriteFile(filepath.Join(dir, name), f.data, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := appendStep(dir, step{Stage: "fuzz", Command: []string{"go", "test", "-fuzz", "FuzzX"}, Start: time.Now(), Seconds: 7, Exit: f.exit, Events: name, Retried: f.retried}); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			code, err := cmdReport([]string{"-dir", dir, "-stages", "fuzz"}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 0, true: 1}[againFails]; code != want {
				t.Errorf("report exit code = %d; want %d; output:\n%s", code, want, out.String())
			}
			if !strings.Contains(out.String(), "go.dev/issue/75804") {
				t.Errorf("report does not list the retried step:\n%s", out.String())
			}
		})
	}
}
