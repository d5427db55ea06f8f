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
	barrier := testutil.ZKReadBarrier(t, conn)
	parent := func(name string) string { return "/" + prefix + "/" + name }
	children := func(t testing.TB, name string) []string {
		t.Helper()
		barrier(t)
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
	t.Run("Shared", func(t *testing.T) { testShared(t, b) })
	t.Run("Semaphore", func(t *testing.T) { testSemaphore(t, b) })
	t.Run("Queue", func(t *testing.T) { testQueue(t, b) })
	t.Run("Revoke", func(t *testing.T) { testRevoke(t, b) })
	t.Run("Metrics", func(t *testing.T) { testMetrics(t, b) })
	t.Run("SeveralLocks", func(t *testing.T) { testSeveral(t, b) })
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

// holdScript reports the command's token, then waits for a line on stdin
// before it ends: a command that said "started" is inside its grant until
// the test lets it go, so a second one that starts meanwhile overlaps it.
const holdScript = `echo "started $FENCING_TOKEN"; read x; echo "done $FENCING_TOKEN"`

// release lets a command started with holdScript end, and checks that it
// and its fencelock exit 0.
func release(t testing.TB, p *proc, token uint64) {
	t.Helper()
	fmt.Fprintln(p.Stdin, "go")
	if l := p.line(30 * time.Second); l != fmt.Sprintf("done %d", token) {
		t.Errorf("fencelock %q: command said %q; want done %d", p.Cmd.Args[1:], l, token)
	}
	if code, stderr := p.wait(30 * time.Second); code != 0 {
		t.Errorf("fencelock %q: status = %d (stderr %q); want 0", p.Cmd.Args[1:], code, stderr)
	}
}

// holders runs "fencelock holder name" and checks that it lists want, one
// line each, with status 0.
func holders(t testing.TB, b backend, name, when string, want ...string) {
	t.Helper()
	code, stdout, stderr := fencelock(t, b.url, "holder", name)
	if w := strings.Join(want, "\n") + "\n"; code != 0 || stdout != w {
		t.Errorf("holder %s = %d, %q (stderr %q); want 0, %q", when, code, stdout, stderr, w)
	}
}

// testShared: two run --shared hold the lock at once, an exclusive run
// waits for both, a reader that comes after the waiting writer does not
// overtake it, and holder lists every holder with its kind.
func testShared(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	r1 := start(t, b.url, "--identity", "reader-1", "run", "--shared", "--lock", name, "--", "sh", "-c", holdScript)
	tok1 := parseStarted(t, r1.line(30*time.Second))
	// Reader 1 stays inside its command until released below, so reader 2
	// saying "started" proves the two overlap; if it had to wait, line
	// fails after 30s.
	r2 := start(t, b.url, "--identity", "reader-2", "run", "--lock", name, "--shared", "--", "sh", "-c", holdScript)
	tok2 := parseStarted(t, r2.line(30*time.Second))
	if tok2 <= tok1 {
		t.Errorf("reader 2's token = %d; want greater than reader 1's %d", tok2, tok1)
	}
	readers := []string{
		fmt.Sprintf("token=%d identity=reader-1 shared", tok1),
		fmt.Sprintf("token=%d identity=reader-2 shared", tok2),
	}
	holders(t, b, name, "with two readers", readers...)

	w := start(t, b.url, "--identity", "writer", "run", "--lock", name, "--", "sh", "-c", holdScript)
	testutil.Eventually(t, 30*time.Second, "writer queued behind the readers", func() bool { return b.records(t, name) == 3 })
	holders(t, b, name, "with two readers and a waiting writer", readers...)

	// A reader that comes now queues behind the writer, so --try refuses
	// it although only readers hold the lock; a blocking one waits.
	code, stdout, stderr := fencelock(t, b.url, "run", "--shared", "--try", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 || stdout != "" {
		t.Errorf("run --shared --try behind a waiting writer = %d, stdout %q; want 75, nothing", code, stdout)
	}
	oneLine(t, "run --shared --try behind a waiting writer", stderr, "held by 2 readers and a writer waits for it")
	code, _, stderr = fencelock(t, b.url, "run", "--try", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 {
		t.Errorf("run --try while readers hold = %d; want 75", code)
	}
	oneLine(t, "run --try while readers hold", stderr, "held by 2 readers")
	r3 := start(t, b.url, "--identity", "reader-3", "run", "--shared", "--lock", name, "--", "sh", "-c", holdScript)
	testutil.Eventually(t, 30*time.Second, "reader 3 queued behind the writer", func() bool { return b.records(t, name) == 4 })

	// Reader 1 leaves; the writer still waits for reader 2.
	release(t, r1, tok1)
	testutil.Eventually(t, 30*time.Second, "reader 1's record removed", func() bool { return b.records(t, name) == 3 })
	if !w.Running() || w.Stdout.String() != "" {
		t.Fatalf("writer while reader 2 holds: running %v, stdout %q; want running and silent", w.Running(), w.Stdout.String())
	}
	release(t, r2, tok2)
	tokW := parseStarted(t, w.line(30*time.Second))
	if tokW <= tok2 {
		t.Errorf("writer's token = %d; want greater than the readers' %d", tokW, tok2)
	}
	// The writer's line is the exclusive one, without a marker.
	holders(t, b, name, "while the writer holds", fmt.Sprintf("token=%d identity=writer", tokW))
	code, _, stderr = fencelock(t, b.url, "run", "--shared", "--wait", "300ms", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 {
		t.Errorf("run --shared --wait 300ms while the writer holds = %d; want 75", code)
	}
	oneLine(t, "run --shared --wait while the writer holds", stderr, fmt.Sprintf("held by token=%d identity=writer", tokW))
	if !r3.Running() || r3.Stdout.String() != "" {
		t.Fatalf("reader 3 while the writer holds: running %v, stdout %q; want running and silent", r3.Running(), r3.Stdout.String())
	}
	release(t, w, tokW)
	tok3 := parseStarted(t, r3.line(30*time.Second))
	holders(t, b, name, "with reader 3", fmt.Sprintf("token=%d identity=reader-3 shared", tok3))
	release(t, r3, tok3)
	if n := b.records(t, name); n != 0 {
		t.Errorf("records of %q after every run = %d; want 0", name, n)
	}
	if code, _, _ := fencelock(t, b.url, "holder", name); code != 3 {
		t.Errorf("holder after every run = %d; want 3 (free)", code)
	}
}

// testSemaphore: run --limit 2 admits two commands at once and refuses a
// third with --try; a waiting third gets the permit the first to leave
// frees; a run with another limit is refused.
func testSemaphore(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	run := func(id string) *proc {
		return start(t, b.url, "--identity", id, "run", "--limit", "2", "--lock", name, "--", "sh", "-c", holdScript)
	}
	p1 := run("permit-1")
	tok1 := parseStarted(t, p1.line(30*time.Second))
	// As in testShared: p1 is inside its command, so p2 starting proves
	// two at once.
	p2 := run("permit-2")
	tok2 := parseStarted(t, p2.line(30*time.Second))
	holders(t, b, name, "with two permits",
		fmt.Sprintf("token=%d identity=permit-1 permit limit=2", tok1),
		fmt.Sprintf("token=%d identity=permit-2 permit limit=2", tok2))

	code, stdout, stderr := fencelock(t, b.url, "run", "--limit", "2", "--try", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 || stdout != "" {
		t.Errorf("third run --limit 2 --try = %d, stdout %q; want 75, nothing", code, stdout)
	}
	oneLine(t, "third run --limit 2 --try", stderr, fmt.Sprintf("semaphore %q has no free permit (2 of 2 held)", name))
	code, _, stderr = fencelock(t, b.url, "run", "--limit", "2", "--wait", "300ms", "--lock", name, "--", "sh", "-c", "echo ran")
	if code != 75 {
		t.Errorf("third run --limit 2 --wait 300ms = %d (stderr %q); want 75", code, stderr)
	}
	for _, flags := range [][]string{{"--limit", "3"}, {"--shared"}, nil} {
		args := append(append([]string{"run", "--try", "--lock", name}, flags...), "--", "sh", "-c", "echo ran")
		code, stdout, stderr := fencelock(t, b.url, args...)
		if code != 1 || stdout != "" {
			t.Errorf("fencelock %q on a semaphore of limit 2 = %d, stdout %q; want 1, nothing", args, code, stdout)
		}
		oneLine(t, fmt.Sprintf("fencelock %q on a semaphore of limit 2", args), stderr, "incompatible request")
	}
	if n := b.records(t, name); n != 2 {
		t.Errorf("records of %q after the refused runs = %d; want the 2 permits", name, n)
	}

	// A third that waits gets the permit of whichever holder leaves first,
	// here the later one.
	p3 := run("permit-3")
	testutil.Eventually(t, 30*time.Second, "third queued", func() bool { return b.records(t, name) == 3 })
	release(t, p2, tok2)
	tok3 := parseStarted(t, p3.line(30*time.Second))
	holders(t, b, name, "after the second left",
		fmt.Sprintf("token=%d identity=permit-1 permit limit=2", tok1),
		fmt.Sprintf("token=%d identity=permit-3 permit limit=2", tok3))
	release(t, p1, tok1)
	release(t, p3, tok3)
	if n := b.records(t, name); n != 0 {
		t.Errorf("records of %q after every run = %d; want 0", name, n)
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
