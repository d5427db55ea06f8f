package exampletest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/integration/postgres"
)

// backend is a running cluster as the examples see it.
type backend struct {
	kind cluster.Kind
	// url is the lock.Open URL, with a short TTL so that takeovers after
	// a crash or a freeze take a few seconds.
	url string
	// demoArgs point the demo at the cluster.
	demoArgs []string
}

func TestExampleEtcd(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.Etcd)
	eps := strings.Join(c.Endpoints(), ",")
	testExamples(t, backend{
		kind:     cluster.Etcd,
		url:      "etcd://" + eps + "/examples?ttl=3s",
		demoArgs: []string{"--etcd", eps},
	})
}

func TestExampleZooKeeper(t *testing.T) {
	c := cluster.FromEnv(t).Start(t, cluster.ZooKeeper)
	eps := strings.Join(c.Endpoints(), ",")
	testExamples(t, backend{
		kind:     cluster.ZooKeeper,
		url:      "zk://" + eps + "/examples?session_timeout=3s",
		demoArgs: []string{"--zk", eps, "--ttl", "2s"},
	})
}

func testExamples(t *testing.T, b backend) {
	t.Run("Demo", func(t *testing.T) { testDemo(t, b) })
	t.Run("Cron", func(t *testing.T) { testCron(t, b) })
	t.Run("Inventory", func(t *testing.T) { testInventory(t, b) })
	t.Run("Leader", func(t *testing.T) { testLeader(t, b) })
	t.Run("Guarded", func(t *testing.T) { testGuarded(t, b) })
	t.Run("Pool", func(t *testing.T) { testPool(t, b) })
	t.Run("Cache", func(t *testing.T) { testCache(t, b) })
	t.Run("Metrics", func(t *testing.T) { testMetrics(t, b) })
}

// testDemo runs "make demo"'s program against the cluster: in the fenced
// run the frozen worker's write is rejected, in the unfenced run it
// overwrites the other worker's.
func testDemo(t *testing.T, b backend) {
	code, stdout, stderr := runProgram(t, 2*time.Minute, "demo", b.demoArgs...)
	if code != 0 {
		t.Fatalf("demo %q: status = %d; want 0\nstdout:\n%s\nstderr:\n%s", b.demoArgs, code, stdout, stderr)
	}
	t.Logf("demo %s:\n%s", strings.Join(b.demoArgs, " "), stdout)
	fenced, unfenced, ok := strings.Cut(stdout, "== 2.")
	if !ok {
		t.Fatalf("demo output has no unfenced run:\n%s", stdout)
	}
	if !strings.Contains(fenced, "REJECTED: fencing: stale token") || !strings.Contains(fenced, "B's write is safe") {
		t.Errorf("demo's fenced run does not show the stale write rejected:\n%s", fenced)
	}
	if !strings.Contains(unfenced, `report = "A's stale report". B's write is lost`) {
		t.Errorf("demo's unfenced run does not show the corruption:\n%s", unfenced)
	}
}

var (
	cronScheduler = regexp.MustCompile(`^cron: (\w+) is the scheduler of \S+ \(token (\d+)\)$`)
	cronRan       = regexp.MustCompile(`^cron: (\w+) ran \S+ for period (\d+) \(token (\d+)\)$`)
)

// testCron: two instances of the cron example compete; the scheduler is
// killed with SIGKILL, the other takes over, and every period from the
// first to the last ran exactly once.
func testCron(t *testing.T, b backend) {
	job := testutil.UniqueName(t)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "cron.db")
	args := func(id string) []string {
		return []string{"--url", b.url, "--db", dsn, "--job", job, "--every", "300ms", "--catch-up", "1000", "--id", id}
	}
	a := start(t, "cron", args("A")...)
	a.expect(30*time.Second, cronScheduler)
	bp := start(t, "cron", args("B")...)
	for i := 0; i < 3; i++ {
		a.expect(30*time.Second, cronRan)
	}
	if strings.Contains(bp.Stdout.String(), "scheduler") {
		t.Fatalf("B became scheduler while A ran:\n%s", bp.Stdout.String())
	}

	a.signal(syscall.SIGKILL)
	if code := a.wait(10 * time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("A after SIGKILL: status = %d; want %d", code, 128+int(syscall.SIGKILL))
	}
	killed := time.Now()
	bp.expect(30*time.Second, cronScheduler)
	t.Logf("B took over %v after A was killed", time.Since(killed).Round(time.Millisecond))
	for i := 0; i < 3; i++ {
		bp.expect(30*time.Second, cronRan)
	}
	bp.signal(syscall.SIGTERM)
	if code := bp.wait(30 * time.Second); code != 0 {
		t.Errorf("B after SIGTERM: status = %d; want 0", code)
	}

	db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT period, instance, token FROM cron_runs WHERE job = ? ORDER BY period, rowid`, job)
	if err != nil {
		t.Fatalf("query cron_runs: %v", err)
	}
	defer rows.Close()
	type run struct {
		period   int64
		instance string
		token    int64
	}
	var runs []run
	for rows.Next() {
		var r run
		if err := rows.Scan(&r.period, &r.instance, &r.token); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	byInstance := map[string]int{}
	for i, r := range runs {
		byInstance[r.instance]++
		if i == 0 {
			continue
		}
		prev := runs[i-1]
		if r.period != prev.period+1 {
			t.Errorf("runs %d and %d: periods %d then %d; want each period exactly once, none skipped", i-1, i, prev.period, r.period)
		}
		if prev.instance == "B" && r.instance == "A" {
			t.Errorf("period %d ran on A after B had taken over", r.period)
		}
		if r.token < prev.token {
			t.Errorf("period %d ran with token %d after period %d with token %d", r.period, r.token, prev.period, prev.token)
		}
	}
	if byInstance["A"] < 3 || byInstance["B"] < 3 {
		t.Errorf("runs per instance = %v; want at least 3 each", byInstance)
	}
	t.Logf("%d periods, each run once: %v", len(runs), byInstance)
}

var (
	invHolding = regexp.MustCompile(`^(\w+): holding inventory/\S+ with token (\d+)$`)
	invPaused  = regexp.MustCompile(`^A: paused; press Enter to write$`)
	invWritten = regexp.MustCompile(`^B: \S+ in stock: (\d+) \(written with token (\d+)\)$`)
	invStock   = regexp.MustCompile(`^C: \S+ in stock: (\d+); taking 0$`)
)

// testInventory: instance A reads the stock and is frozen (SIGSTOP) before
// writing; its session expires; B takes the lock and updates the stock; A
// resumes and its write, with the older token, is refused. The stock shows
// B's update only. On etcd the store is PostgreSQL, on ZooKeeper SQLite.
func testInventory(t *testing.T, b backend) {
	var dsn string
	if b.kind == cluster.Etcd {
		dsn = postgres.Start(t).URL
	} else {
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	}
	sku := testutil.UniqueName(t)
	args := func(id string, take int) []string {
		return []string{"--url", b.url, "--db", dsn, "--sku", sku, "--stock", "10", "--take", strconv.Itoa(take), "--id", id}
	}

	a := start(t, "inventory", append(args("A", 1), "--pause")...)
	tokA := atoi(t, a.expect(30*time.Second, invHolding)[2])
	a.expect(30*time.Second, invPaused)
	a.signal(syscall.SIGSTOP)
	frozen := time.Now()

	code, stdout, stderr := runProgram(t, time.Minute, "inventory", args("B", 2)...)
	if code != 0 {
		t.Fatalf("B: status = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := invWritten.FindStringSubmatch(lastLine(stdout))
	if m == nil || m[1] != "8" {
		t.Fatalf("B's last line = %q; want the stock written as 8", lastLine(stdout))
	}
	if tokB := atoi(t, m[2]); tokB <= tokA {
		t.Errorf("B's token = %d; want greater than A's %d", tokB, tokA)
	}
	t.Logf("B updated the stock %v after A was frozen", time.Since(frozen).Round(time.Millisecond))

	a.signal(syscall.SIGCONT)
	fmt.Fprintln(a.Stdin, "")
	if code := a.wait(30 * time.Second); code != 3 {
		t.Errorf("A after resuming: status = %d; want 3 (write refused)", code)
	}
	if want := fmt.Sprintf("fencing: stale token %d", tokA); !strings.Contains(a.Stderr.String(), want) {
		t.Errorf("A's stderr = %q; want it to contain %q", a.Stderr.String(), want)
	}

	code, stdout, _ = runProgram(t, time.Minute, "inventory", args("C", 0)...)
	m = invStock.FindStringSubmatch(lastLine(stdout))
	if code != 0 || m == nil || m[1] != "8" {
		t.Errorf("stock after both = status %d, %q; want 0, 8 (B's update, not A's stale 9)", code, lastLine(stdout))
	}
}

var (
	leaderLeading = regexp.MustCompile(`^(\w+): leading \(term (\d+)\)$`)
	leaderIs      = regexp.MustCompile(`^(\w+): the leader is (\w+) \(term (\d+)\)$`)
)

// testLeader: A leads; B and C follow; A resigns on SIGTERM and B is
// elected; B is killed and C is elected once B's session expires.
func testLeader(t *testing.T, b backend) {
	election := "examples/" + testutil.UniqueName(t)
	args := func(id string) []string {
		return []string{"--url", b.url, "--election", election, "--tick", "200ms", "--id", id}
	}
	a := start(t, "leader", args("A")...)
	term1 := atoi(t, a.expect(30*time.Second, leaderLeading)[2])
	bp := start(t, "leader", args("B")...)
	if m := bp.expect(30*time.Second, leaderIs); m[2] != "A" || atoi(t, m[3]) != term1 {
		t.Fatalf("B sees leader %s (term %s); want A (term %d)", m[2], m[3], term1)
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(30 * time.Second); code != 0 {
		t.Errorf("A after SIGTERM: status = %d; want 0", code)
	}
	if !strings.Contains(a.Stdout.String(), fmt.Sprintf("A: stepped down (term %d)\n", term1)) {
		t.Errorf("A did not report stepping down:\n%s", a.Stdout.String())
	}
	term2 := atoi(t, bp.expect(30*time.Second, leaderLeading)[2])
	if term2 <= term1 {
		t.Errorf("B's term = %d; want greater than A's %d", term2, term1)
	}

	c := start(t, "leader", args("C")...)
	if m := c.expect(30*time.Second, leaderIs); m[2] != "B" {
		t.Fatalf("C sees leader %s; want B", m[2])
	}
	bp.signal(syscall.SIGKILL)
	bp.wait(10 * time.Second)
	term3 := atoi(t, c.expect(30*time.Second, leaderLeading)[2])
	if term3 <= term2 {
		t.Errorf("C's term = %d; want greater than B's %d", term3, term2)
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(30 * time.Second); code != 0 {
		t.Errorf("C after SIGTERM: status = %d; want 0", code)
	}
}

// testGuarded: a write into the lock service itself, guarded by a lease
// whose session has ended, is refused.
func testGuarded(t *testing.T, b backend) {
	code, stdout, stderr := runProgram(t, time.Minute, "guarded", "--url", b.url)
	t.Logf("guarded:\n%s", stdout)
	if code != 0 {
		t.Fatalf("guarded: status = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		`A (token `,
		`writes "late write by A": refused: `,
		`: lease lost`,
		`value = "set by B"`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("guarded output lacks %q:\n%s", want, stdout)
		}
	}
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}
