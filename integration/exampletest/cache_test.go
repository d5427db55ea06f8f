package exampletest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

var (
	cacheRead       = regexp.MustCompile(`^(\w+): read generation (\d+) of \S+: (\d+) entries, consistent \(token (\d+)\)$`)
	cacheHolding    = regexp.MustCompile(`^(\w+): holding the read lock; press Enter to release it$`)
	cacheReadWait   = regexp.MustCompile(`^(\w+): \S+ is being rebuilt; waiting for the read lock$`)
	cacheWriteWait  = regexp.MustCompile(`^(\w+): \S+ is in use; waiting for the write lock$`)
	cacheRebuilding = regexp.MustCompile(`^(\w+): rebuilding generation (\d+) of \S+ \(token (\d+)\)$`)
	cachePaused     = regexp.MustCompile(`^(\w+): paused halfway through generation (\d+); press Enter to go on$`)
	cacheRebuilt    = regexp.MustCompile(`^(\w+): rebuilt generation (\d+) of \S+: (\d+) entries \(token (\d+)\)$`)
)

// cacheSize is the number of entries the tests' rebuilds write.
const cacheSize = 20

// cacheEnv is one cache of the cache example in a database of its own.
type cacheEnv struct {
	t      *testing.T
	b      backend
	name   string
	dbPath string
}

func newCacheEnv(t *testing.T, b backend) *cacheEnv {
	return &cacheEnv{t: t, b: b, name: testutil.UniqueName(t), dbPath: filepath.Join(t.TempDir(), "cache.db")}
}

func (e *cacheEnv) args(id string, extra ...string) []string {
	return append([]string{"--url", e.b.url, "--db", "sqlite:" + e.dbPath, "--cache", e.name,
		"--size", fmt.Sprint(cacheSize), "--id", id}, extra...)
}

// rebuild runs one rebuild to its end and returns the generation it built.
func (e *cacheEnv) rebuild(id string) int64 {
	e.t.Helper()
	code, stdout, stderr := runProgram(e.t, time.Minute, "cache", e.args(id, "--rebuild")...)
	m := cacheRebuilt.FindStringSubmatch(lastLine(stdout))
	if code != 0 || m == nil {
		e.t.Fatalf("%s --rebuild: status %d, last line %q; want 0 and a rebuilt generation\nstderr:\n%s", id, code, lastLine(stdout), stderr)
	}
	return atoi(e.t, m[2])
}

func testCache(t *testing.T, b backend) {
	t.Run("Queue", func(t *testing.T) { testCacheQueue(t, b) })
	t.Run("Concurrent", func(t *testing.T) { testCacheConcurrent(t, b) })
	t.Run("StaleRebuilder", func(t *testing.T) { testCacheStale(t, b) })
}

// testCacheQueue walks the read-write lock's queue one step at a time:
// two readers hold the lock together; a rebuilder arriving then waits; a
// reader arriving after the rebuilder is queued waits behind it, although
// only readers hold; the readers leave and the rebuilder runs; halfway through,
// a reader without the lock sees the half-built table, while the queued
// reader is still waiting; the rebuild ends and the queued reader reads
// the new generation, whole.
func testCacheQueue(t *testing.T, b backend) {
	e := newCacheEnv(t, b)
	if gen := e.rebuild("W0"); gen != 1 {
		t.Fatalf("first rebuild built generation %d; want 1", gen)
	}

	r1 := start(t, "cache", e.args("R1", "--pause")...)
	m := r1.expect(30*time.Second, cacheRead)
	tokR1 := atoi(t, m[4])
	if m[2] != "1" || m[3] != fmt.Sprint(cacheSize) {
		t.Errorf("R1 read generation %s with %s entries; want 1 with %d", m[2], m[3], cacheSize)
	}
	r1.expect(30*time.Second, cacheHolding)
	r2 := start(t, "cache", e.args("R2", "--pause")...)
	tokR2 := atoi(t, r2.expect(30*time.Second, cacheRead)[4]) // while R1 holds
	r2.expect(30*time.Second, cacheHolding)

	w := start(t, "cache", e.args("W", "--rebuild", "--pause")...)
	w.expect(30*time.Second, cacheWriteWait)
	r3 := lateReader(t, e)
	if out := w.Stdout.String(); strings.Contains(out, "rebuilding") {
		t.Errorf("W started its rebuild while R1 and R2 held the read lock:\n%s", out)
	}

	for _, r := range []*proc{r1, r2} {
		r.Stdin.Close()
		if code := r.wait(30 * time.Second); code != 0 {
			t.Errorf("%s: status = %d; want 0", r.Cmd.Args, code)
		}
	}
	m = w.expect(30*time.Second, cacheRebuilding)
	tokW := atoi(t, m[3])
	if m[2] != "2" {
		t.Errorf("W rebuilds generation %s; want 2", m[2])
	}
	if tokW <= tokR1 || tokW <= tokR2 {
		t.Errorf("W's token = %d; want greater than the readers' before it (%d, %d)", tokW, tokR1, tokR2)
	}
	w.expect(30*time.Second, cachePaused)

	// The table is half built now, as a reader that takes no lock sees.
	code, stdout, stderr := runProgram(t, time.Minute, "cache", e.args("N", "--no-lock")...)
	if code != 4 || !strings.Contains(stderr, "half-built") {
		t.Errorf("reader without the lock during the rebuild: status %d, stderr %q; want 4 (half-built)\nstdout:\n%s", code, stderr, stdout)
	}
	if out := r3.Stdout.String(); strings.Contains(out, "read generation") {
		t.Errorf("%s read while W was rebuilding:\n%s", r3.id, out)
	}

	w.Stdin.Close()
	if m := w.expect(30*time.Second, cacheRebuilt); m[2] != "2" {
		t.Errorf("W rebuilt generation %s; want 2", m[2])
	}
	if code := w.wait(30 * time.Second); code != 0 {
		t.Errorf("W: status = %d; want 0", code)
	}
	m = r3.expect(30*time.Second, cacheRead)
	if m[2] != "2" {
		t.Errorf("%s read generation %s; want 2", r3.id, m[2])
	}
	if tokR3 := atoi(t, m[4]); tokR3 <= tokW {
		t.Errorf("%s's token = %d; want greater than W's %d", r3.id, tokR3, tokW)
	}
	if code := r3.wait(30 * time.Second); code != 0 {
		t.Errorf("%s: status = %d; want 0", r3.id, code)
	}

	log := e.log()
	if readers := checkCacheLog(t, log); readers < 2 {
		t.Errorf("most readers holding at once = %d; want R1 and R2 together", readers)
	}
	order := []struct{ before, after string }{
		{"R1 read-begin", "R2 read-begin"},
		{"R2 read-begin", "R1 read-end"}, // R1 and R2 held together
		{"R1 read-end", "W rebuild-begin"},
		{"R2 read-end", "W rebuild-begin"},
		{"W rebuild-end", r3.id + " read-begin"},
	}
	for _, o := range order {
		if b, a := log.seq(t, o.before), log.seq(t, o.after); b > a {
			t.Errorf("cache_log: %q (seq %d) after %q (seq %d); want it before", o.before, b, o.after, a)
		}
	}
}

// lateReader starts readers until one has to wait for the read lock
// because the rebuilder W, which found the lock in use by readers, is
// queued: W announces that it waits before its blocking request is queued,
// so a reader started right after the announcement can still get in ahead
// of it (and read the old generation, which the log check accepts).
func lateReader(t *testing.T, e *cacheEnv) *namedProc {
	t.Helper()
	first := regexp.MustCompile(cacheRead.String() + "|" + cacheReadWait.String())
	for i := 1; i <= 20; i++ {
		id := fmt.Sprintf("R3x%d", i)
		p := start(t, "cache", e.args(id)...)
		if m := p.expect(30*time.Second, first); cacheReadWait.MatchString(m[0]) {
			return &namedProc{proc: p, id: id}
		}
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("%s: status = %d; want 0", id, code)
		}
		t.Logf("%s got the read lock before W was queued; starting another reader", id)
	}
	t.Fatalf("20 readers in turn got the read lock while W waited for the write lock; want W queued ahead of later readers")
	return nil
}

// namedProc is a proc and the --id it was given.
type namedProc struct {
	*proc
	id string
}

// testCacheConcurrent runs four looping readers and a rebuilder that
// rebuilds five times, all at once, each rebuild taking long enough
// (about 100ms) for several reads to be requested during it. Each reader starts on generation 1 and
// reads until it has read the last generation; every read must be of one
// whole generation (a half-built read exits with status 4), and the log
// must show no read overlapping a rebuild.
func testCacheConcurrent(t *testing.T, b backend) {
	const readers, rebuilds = 4, 5
	e := newCacheEnv(t, b)
	e.rebuild("W0")
	last := fmt.Sprint(1 + rebuilds)

	rs := make([]*proc, readers)
	for i := range rs {
		rs[i] = start(t, "cache", e.args(fmt.Sprintf("R%d", i), "--until-generation", last, "--every", "10ms")...)
		if m := rs[i].expect(30*time.Second, cacheRead); m[2] != "1" {
			t.Fatalf("R%d's first read is of generation %s; want 1", i, m[2])
		}
	}
	// A rebuild takes a while (--fetch), so that readers keep arriving
	// during it: only the lock keeps them out.
	w := start(t, "cache", e.args("W", "--rebuild", "--times", fmt.Sprint(rebuilds), "--fetch", "5ms")...)
	for _, p := range append(rs, w) {
		if code := p.wait(2 * time.Minute); code != 0 {
			t.Errorf("%s: status = %d; want 0\nstderr:\n%s", p.Cmd.Args, code, p.Stderr.String())
		}
	}

	log := e.log()
	checkCacheLog(t, log)
	reads, rebuildsDone := 0, 0
	gens := map[string]map[int64]bool{}
	for _, ev := range log {
		switch ev.event {
		case "read-end":
			reads++
			if gens[ev.instance] == nil {
				gens[ev.instance] = map[int64]bool{}
			}
			gens[ev.instance][ev.gen] = true
		case "rebuild-end":
			rebuildsDone++
		}
	}
	if rebuildsDone != 1+rebuilds {
		t.Errorf("rebuilds in the log = %d; want %d", rebuildsDone, 1+rebuilds)
	}
	for i := range readers {
		id := fmt.Sprintf("R%d", i)
		if g := gens[id]; !g[1] || !g[1+rebuilds] {
			t.Errorf("%s read generations %v; want 1 and %d among them", id, g, 1+rebuilds)
		}
	}
	waits := strings.Count(w.Stdout.String(), "waiting for the write lock")
	for _, r := range rs {
		waits += strings.Count(r.Stdout.String(), "waiting for the read lock")
	}
	t.Logf("%d reads and %d rebuilds; %d requests had to wait for the lock", reads, rebuildsDone, waits)
}

// testCacheStale freezes a rebuilder halfway through its rebuild until its
// lease expires; another, waiting for the write lock until then, rebuilds
// the cache from scratch; the first is
// resumed and its next write, with the older token, is refused, so the
// cache stays whole.
func testCacheStale(t *testing.T, b backend) {
	e := newCacheEnv(t, b)
	e.rebuild("W0")

	w1 := start(t, "cache", e.args("W1", "--rebuild", "--pause")...)
	m := w1.expect(30*time.Second, cacheRebuilding)
	tok1 := atoi(t, m[3])
	w1.expect(30*time.Second, cachePaused)
	w1.signal(syscall.SIGSTOP)
	frozen := time.Now()

	code, stdout, stderr := runProgram(t, time.Minute, "cache", e.args("W2", "--rebuild")...)
	m = cacheRebuilt.FindStringSubmatch(lastLine(stdout))
	if code != 0 || m == nil {
		t.Fatalf("W2: status %d, last line %q; want 0 and a rebuilt generation\nstderr:\n%s", code, lastLine(stdout), stderr)
	}
	if tok2 := atoi(t, m[4]); tok2 <= tok1 {
		t.Errorf("W2's token = %d; want greater than W1's %d", tok2, tok1)
	}
	if !strings.Contains(stdout, "waiting for the write lock") {
		t.Errorf("W2 did not wait for the write lock that frozen W1 held:\n%s", stdout)
	}
	gen := m[2]
	t.Logf("W2 rebuilt generation %s %v after W1 was frozen", gen, time.Since(frozen).Round(time.Millisecond))

	w1.signal(syscall.SIGCONT)
	w1.Stdin.Close()
	if code := w1.wait(30 * time.Second); code != 3 {
		t.Errorf("W1 after resuming: status = %d; want 3 (write refused)", code)
	}
	if want := fmt.Sprintf("fencing: stale token %d", tok1); !strings.Contains(w1.Stderr.String(), want) {
		t.Errorf("W1's stderr = %q; want it to contain %q", w1.Stderr.String(), want)
	}

	code, stdout, stderr = runProgram(t, time.Minute, "cache", e.args("R")...)
	m = cacheRead.FindStringSubmatch(lastLine(stdout))
	if code != 0 || m == nil || m[2] != gen {
		t.Errorf("reader after both rebuilds: status %d, %q (stderr %q); want 0 and generation %s whole", code, lastLine(stdout), stderr, gen)
	}
}

// cacheEvent is a row of the cache example's log.
type cacheEvent struct {
	seq             int64
	instance, event string
	token, gen      int64
}

// cacheLog is a cache's log in commit order.
type cacheLog []cacheEvent

// log reads the cache's log.
func (e *cacheEnv) log() cacheLog {
	e.t.Helper()
	db, err := sql.Open("sqlite", e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT seq, instance, event, token, generation FROM cache_log WHERE cache = ? ORDER BY seq`, e.name)
	if err != nil {
		e.t.Fatalf("query cache_log: %v", err)
	}
	defer rows.Close()
	var log cacheLog
	for rows.Next() {
		var ev cacheEvent
		if err := rows.Scan(&ev.seq, &ev.instance, &ev.event, &ev.token, &ev.gen); err != nil {
			e.t.Fatal(err)
		}
		log = append(log, ev)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return log
}

// seq returns the seq of the only event "INSTANCE EVENT" in the log.
func (l cacheLog) seq(t *testing.T, what string) int64 {
	t.Helper()
	instance, event, _ := strings.Cut(what, " ")
	var found []int64
	for _, ev := range l {
		if ev.instance == instance && ev.event == event {
			found = append(found, ev.seq)
		}
	}
	if len(found) != 1 {
		t.Fatalf("cache_log has %d events %q; want 1", len(found), what)
	}
	return found[0]
}

// checkCacheLog replays a cache's log and checks the read-write lock's
// exclusion: no read begins while a rebuild runs, no rebuild begins while
// a read or another rebuild runs, every grant ends, and seq has no gaps.
// It returns the most readers that held the lock at once.
func checkCacheLog(t *testing.T, log cacheLog) int {
	t.Helper()
	readers := map[string]bool{}
	writer := ""
	most := 0
	for i, ev := range log {
		if ev.seq != int64(i+1) {
			t.Errorf("cache_log seq %d at position %d; want consecutive numbers from 1", ev.seq, i)
		}
		key := fmt.Sprintf("%s (token %d)", ev.instance, ev.token)
		switch ev.event {
		case "read-begin":
			if writer != "" {
				t.Errorf("seq %d: %s began a read while %s was rebuilding", ev.seq, key, writer)
			}
			readers[key] = true
			most = max(most, len(readers))
		case "read-end":
			if !readers[key] {
				t.Errorf("seq %d: %s ended a read it had not begun", ev.seq, key)
			}
			delete(readers, key)
		case "rebuild-begin":
			if writer != "" || len(readers) > 0 {
				t.Errorf("seq %d: %s began a rebuild while %q rebuilt and %d readers read (%s)", ev.seq, key, writer, len(readers), keys(readers))
			}
			writer = key
		case "rebuild-end":
			if writer != key {
				t.Errorf("seq %d: %s ended a rebuild it had not begun (rebuilding: %q)", ev.seq, key, writer)
			}
			writer = ""
		default:
			t.Errorf("seq %d: unknown event %q", ev.seq, ev.event)
		}
	}
	if writer != "" || len(readers) > 0 {
		t.Errorf("cache_log ends with %q rebuilding and readers %s; want every grant ended", writer, keys(readers))
	}
	if len(log) == 0 {
		t.Errorf("cache_log is empty")
	}
	return most
}
