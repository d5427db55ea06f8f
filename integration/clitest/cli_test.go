package clitest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// backend is a running cluster as the tests see it: the URL fencelock is
// given, and direct access to the lock records, to know when a waiter has
// queued and to end a lease from outside.
type backend struct {
	url string
	// records returns the number of records (waiting or holding) of name.
	records func(t testing.TB, name string) int
	// deleteRecords deletes every record of name, as an operator or an
	// expired session would, and returns how many it deleted.
	deleteRecords func(t testing.TB, name string) int
}

// prefix is the key prefix (etcd) or root (ZooKeeper) of the tests' locks.
const prefix = "clitest"

func etcdBackend(t *testing.T) backend {
	t.Helper()
	c := cluster.FromEnv(t).Start(t, cluster.Etcd)
	client := testutil.EtcdClient(t, clientv3.Config{Endpoints: c.Endpoints()})
	key := func(name string) string { return prefix + "/" + name + "/#" }
	return backend{
		url: "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix + "?ttl=10s",
		records: func(t testing.TB, name string) int {
			t.Helper()
			resp, err := client.Get(testutil.Context(t, 10*time.Second), key(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("etcd Get(%q) = %v", key(name), err)
			}
			return int(resp.Count)
		},
		deleteRecords: func(t testing.TB, name string) int {
			t.Helper()
			resp, err := client.Delete(testutil.Context(t, 10*time.Second), key(name), clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("etcd Delete(%q) = %v", key(name), err)
			}
			return int(resp.Deleted)
		},
	}
}

func zkBackend(t *testing.T) backend {
	t.Helper()
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
	conn := testutil.ZKConn(t, c.Endpoints(), 10*time.Second, nil)
	parent := func(name string) string { return "/" + prefix + "/" + name }
	children := func(t testing.TB, name string) []string {
		t.Helper()
		kids, _, err := conn.Children(parent(name))
		if err == zk.ErrNoNode {
			return nil
		}
		if err != nil {
			t.Fatalf("zk Children(%q) = %v", parent(name), err)
		}
		return kids
	}
	return backend{
		url: "zk://" + strings.Join(c.Endpoints(), ",") + "/" + prefix + "?session_timeout=10s",
		records: func(t testing.TB, name string) int {
			t.Helper()
			return len(children(t, name))
		},
		deleteRecords: func(t testing.TB, name string) int {
			t.Helper()
			n := 0
			for _, k := range children(t, name) {
				if err := conn.Delete(parent(name)+"/"+k, -1); err != nil && err != zk.ErrNoNode {
					t.Fatalf("zk Delete(%q) = %v", k, err)
				}
				n++
			}
			return n
		},
	}
}

func TestCLIEtcd(t *testing.T)      { testCLI(t, etcdBackend(t)) }
func TestCLIZooKeeper(t *testing.T) { testCLI(t, zkBackend(t)) }

func testCLI(t *testing.T, b backend) {
	t.Run("ExitStatusAndToken", func(t *testing.T) { testExitStatus(t, b) })
	t.Run("Exclusion", func(t *testing.T) { testExclusion(t, b) })
	t.Run("LostLease", func(t *testing.T) { testLostLease(t, b) })
	t.Run("LeaderWatch", func(t *testing.T) { testLeaderWatch(t, b) })
}

var tokenLine = regexp.MustCompile(`^token=(\d+) identity=(\S+)$`)

// testExitStatus: run passes FENCING_TOKEN and FENCELOCK_LOCK to the
// command and exits with its status; the lock is free afterwards.
func testExitStatus(t *testing.T, b backend) {
	tests := []struct {
		script string
		want   int
	}{
		{`exit 0`, 0},
		{`exit 7`, 7},
		{`kill -TERM $$`, 128 + 15},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			name := testutil.UniqueName(t)
			script := `echo "token=$FENCING_TOKEN lock=$FENCELOCK_LOCK"; ` + tt.script
			code, stdout, stderr := fencelock(t, b.url, "run", "--lock", name, "--", "sh", "-c", script)
			if code != tt.want {
				t.Fatalf("fencelock run -- sh -c %q: status = %d; want %d (stderr %q)", tt.script, code, tt.want, stderr)
			}
			var token uint64
			var lockName string
			if _, err := fmt.Sscanf(stdout, "token=%d lock=%s\n", &token, &lockName); err != nil || token == 0 || lockName != name {
				t.Errorf("command saw %q; want token=<positive> lock=%s (%v)", stdout, name, err)
			}
			if stderr != "" {
				t.Errorf("stderr = %q; want nothing", stderr)
			}
			if n := b.records(t, name); n != 0 {
				t.Errorf("records of %q after run = %d; want 0 (released)", name, n)
			}
			code, _, stderr = fencelock(t, b.url, "holder", name)
			if code != 3 {
				t.Errorf("fencelock holder after run: status = %d; want 3 (free)", code)
			}
			oneLine(t, "holder of a free lock", stderr, "is free")
		})
	}
	t.Run("NotFound", func(t *testing.T) {
		code, _, stderr := fencelock(t, b.url, "run", "--lock", testutil.UniqueName(t), "--", "/nonexistent/command")
		if code != 127 {
			t.Errorf("run of a missing command: status = %d; want 127", code)
		}
		oneLine(t, "run of a missing command", stderr, "no such file")
	})
}

// testExclusion: a second run waits for the first, --try refuses at once,
// and holder reports the running holder.
func testExclusion(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	// Each command reports its token, then waits for a line on stdin.
	script := `echo "started $FENCING_TOKEN"; read x; echo "done $FENCING_TOKEN"`
	a := start(t, b.url, "--identity", "cli-A", "run", "--lock", name, "--", "sh", "-c", script)
	tokA := parseStarted(t, a.line(30*time.Second))

	bp := start(t, b.url, "run", "--identity", "cli-B", "--lock", name, "--", "sh", "-c", script)
	testutil.Eventually(t, 30*time.Second, "B queued behind A", func() bool { return b.records(t, name) == 2 })

	code, stdout, stderr := fencelock(t, b.url, "holder", name)
	if want := fmt.Sprintf("token=%d identity=cli-A\n", tokA); code != 0 || stdout != want {
		t.Errorf("holder while A runs = %d, %q (stderr %q); want 0, %q", code, stdout, stderr, want)
	}
	code, _, stderr = fencelock(t, b.url, "run", "--try", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 {
		t.Errorf("run --try while held: status = %d; want 75", code)
	}
	oneLine(t, "run --try while held", stderr, fmt.Sprintf("held by token=%d identity=cli-A", tokA))
	code, _, stderr = fencelock(t, b.url, "run", "--wait", "300ms", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 {
		t.Errorf("run --wait 300ms while held: status = %d; want 75 (stderr %q)", code, stderr)
	}

	// A third run, interrupted while it waits, leaves without running
	// its command and without a record.
	c := start(t, b.url, "run", "--lock", name, "--", "sh", "-c", "echo ran")
	testutil.Eventually(t, 30*time.Second, "C queued behind A and B", func() bool { return b.records(t, name) == 3 })
	c.Cmd.Process.Signal(syscall.SIGINT)
	if code, stderr := c.wait(30 * time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("run interrupted while waiting: status = %d (stderr %q); want %d", code, stderr, 128+int(syscall.SIGINT))
	} else {
		oneLine(t, "run interrupted while waiting", stderr, "interrupted")
	}
	if c.Stdout.String() != "" {
		t.Errorf("interrupted run's command ran: stdout %q", c.Stdout.String())
	}
	testutil.Eventually(t, 30*time.Second, "C's record removed", func() bool { return b.records(t, name) == 2 })

	if !bp.Running() || bp.Stdout.String() != "" {
		t.Fatalf("B while A holds: running %v, stdout %q; want running and silent", bp.Running(), bp.Stdout.String())
	}
	fmt.Fprintln(a.Stdin, "go")
	if l := a.line(10 * time.Second); l != fmt.Sprintf("done %d", tokA) {
		t.Errorf("A said %q; want done %d", l, tokA)
	}
	if code, stderr := a.wait(30 * time.Second); code != 0 {
		t.Errorf("A: status = %d (stderr %q); want 0", code, stderr)
	}
	tokB := parseStarted(t, bp.line(30*time.Second))
	if tokB <= tokA {
		t.Errorf("B's token = %d; want greater than A's %d", tokB, tokA)
	}
	fmt.Fprintln(bp.Stdin, "go")
	if code, stderr := bp.wait(30 * time.Second); code != 0 {
		t.Errorf("B: status = %d (stderr %q); want 0", code, stderr)
	}
	if n := b.records(t, name); n != 0 {
		t.Errorf("records of %q after both runs = %d; want 0", name, n)
	}
}

func parseStarted(t testing.TB, line string) uint64 {
	t.Helper()
	s, ok := strings.CutPrefix(line, "started ")
	tok, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil || tok == 0 {
		t.Fatalf("command said %q; want \"started <token>\"", line)
	}
	return tok
}

// testLostLease: when the lease ends under a running command, fencelock
// stops the command (SIGTERM, then SIGKILL after --grace) and exits 76.
func testLostLease(t *testing.T, b backend) {
	tests := []struct {
		name, trap, want string
	}{
		{"TermHonoured", `trap 'echo got TERM; exit 0' TERM`, "got TERM"},
		{"TermIgnored", `trap '' TERM`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := testutil.UniqueName(t)
			script := tt.trap + `; echo "started $FENCING_TOKEN"; while :; do sleep 0.1; done`
			p := start(t, b.url, "run", "--grace", "500ms", "--lock", name, "--", "sh", "-c", script)
			parseStarted(t, p.line(30*time.Second))
			if n := b.deleteRecords(t, name); n != 1 {
				t.Fatalf("deleted %d records of %q; want 1", n, name)
			}
			if tt.want != "" {
				if l := p.line(30 * time.Second); l != tt.want {
					t.Errorf("command said %q after the loss; want %q", l, tt.want)
				}
			}
			code, stderr := p.wait(30 * time.Second)
			if code != 76 {
				t.Errorf("run whose lease was lost: status = %d; want 76", code)
			}
			// The shell may report its killed sleep; fencelock's own
			// error is the last line.
			if i := strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n"); i >= 0 {
				stderr = stderr[i+1:]
			}
			oneLine(t, "run whose lease was lost", stderr, "lost lock")
		})
	}
}

// testLeaderWatch: leader --watch prints the leader and every change.
func testLeaderWatch(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	code, _, stderr := fencelock(t, b.url, "leader", name)
	if code != 3 {
		t.Errorf("leader of a free election: status = %d; want 3", code)
	}
	oneLine(t, "leader of a free election", stderr, "has no leader")

	w := start(t, b.url, "leader", name, "--watch")
	if l := w.line(30 * time.Second); l != "none" {
		t.Fatalf("watch's first line = %q; want none", l)
	}
	script := `echo "started $FENCING_TOKEN"; read x`
	a := start(t, b.url, "--identity", "leader-A", "run", "--lock", name, "--", "sh", "-c", script)
	tokA := parseStarted(t, a.line(30*time.Second))
	if l, want := w.line(30*time.Second), fmt.Sprintf("token=%d identity=leader-A", tokA); l != want {
		t.Fatalf("watch after A took over = %q; want %q", l, want)
	}
	code, stdout, _ := fencelock(t, b.url, "leader", name)
	if want := fmt.Sprintf("token=%d identity=leader-A\n", tokA); code != 0 || stdout != want {
		t.Errorf("leader = %d, %q; want 0, %q", code, stdout, want)
	}
	fmt.Fprintln(a.Stdin, "go")
	if code, stderr := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("A: status = %d (stderr %q); want 0", code, stderr)
	}
	if l := w.line(30 * time.Second); l != "none" {
		t.Errorf("watch after A released = %q; want none", l)
	}
	bp := start(t, b.url, "--identity", "leader-B", "run", "--lock", name, "--", "sh", "-c", script)
	tokB := parseStarted(t, bp.line(30*time.Second))
	m := tokenLine.FindStringSubmatch(w.line(30 * time.Second))
	if m == nil || m[1] != strconv.FormatUint(tokB, 10) || m[2] != "leader-B" {
		t.Errorf("watch after B took over = %q; want token=%d identity=leader-B", m, tokB)
	}
	fmt.Fprintln(bp.Stdin, "go")
	bp.wait(30 * time.Second)

	w.Cmd.Process.Signal(syscall.SIGINT)
	if code, stderr := w.wait(30 * time.Second); code != 0 || stderr != "" {
		t.Errorf("watch after SIGINT: status = %d, stderr %q; want 0, nothing", code, stderr)
	}
}

// TestCLIBadURL needs no cluster: every bad backend URL is one line on
// stderr and a non-zero status, without running the command.
func TestCLIBadURL(t *testing.T) {
	tests := []struct {
		url  string
		code int
		want string
	}{
		{"", 2, "give --url or set FENCELOCK_URL"},
		{"mysql://127.0.0.1:3306/db", 2, `unknown scheme "mysql"`},
		{"etcd://", 2, "no host"},
		{"etcd://127.0.0.1/x", 2, "not host:port"},
		{"etcd://127.0.0.1:2379?ttl=fast", 2, "invalid configuration"},
		{"zk://127.0.0.1:2181?colour=blue", 2, `unknown query key "colour"`},
		{"etcd://127.0.0.1:9/x?ttl=2s", 1, "cannot reach the backend"}, // the discard port: nothing answers
		{"zk://127.0.0.1:9/x", 1, "cannot connect"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			code, stdout, stderr := fencelock(t, tt.url, "--timeout", "2s", "run", "--lock", "jobs/x", "--", "sh", "-c", "echo ran")
			if code != tt.code {
				t.Errorf("fencelock run with URL %q: status = %d; want %d (stderr %q)", tt.url, code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q; want nothing (the command must not run)", stdout)
			}
			oneLine(t, "URL "+tt.url, stderr, tt.want)
		})
	}
}
