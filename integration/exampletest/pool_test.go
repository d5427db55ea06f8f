package exampletest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

var (
	// poolFirst is an instance's first line: its first job started at
	// once, or it found every permit taken.
	poolFirst   = regexp.MustCompile(`^(\w+): (?:job 1 started \(token (\d+), (\d+) of (\d+) running\)|all (\d+) permits of \S+ are taken; waiting in line)$`)
	poolStarted = regexp.MustCompile(`^(\w+): job 1 started \(token (\d+), (\d+) of (\d+) running\)$`)
)

// testPool: more instances of the pool example than its limit, each with
// several jobs. Each job holds its permit until the test closes the
// instances' standard input, so exactly limit instances start a job and
// the others report every permit taken; then all jobs run to the end. The
// pool's log, replayed in commit order, never has more than limit jobs
// running, and has limit running at once.
func testPool(t *testing.T, b backend) {
	const (
		limit     = 3
		instances = limit + 2
		jobs      = 3
	)
	pool := testutil.UniqueName(t)
	dbPath := filepath.Join(t.TempDir(), "pool.db")
	procs := make([]*proc, instances)
	for i := range procs {
		procs[i] = start(t, "pool", "--url", b.url, "--db", "sqlite:"+dbPath, "--pool", pool,
			"--limit", strconv.Itoa(limit), "--jobs", strconv.Itoa(jobs), "--work", "100ms", "--hold",
			"--id", fmt.Sprintf("I%d", i))
	}

	// Nobody gives a permit back before the test closes stdin, so what
	// each instance does first is decided: limit of them work, the
	// others wait in line.
	var working, waiting []string
	for _, p := range procs {
		m := p.expect(30*time.Second, poolFirst)
		if poolStarted.MatchString(m[0]) {
			working = append(working, m[1])
		} else {
			waiting = append(waiting, m[1])
		}
	}
	if len(working) != limit || len(waiting) != instances-limit {
		t.Fatalf("instances working = %v, waiting = %v; want %d working, %d waiting", working, waiting, limit, instances-limit)
	}
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var running int64
	if err := db.QueryRow(`SELECT running FROM pool_running WHERE pool = ?`, pool).Scan(&running); err != nil {
		t.Fatalf("query pool_running: %v", err)
	}
	if running != limit {
		t.Errorf("jobs running while the permits are held = %d; want %d", running, limit)
	}

	for _, p := range procs {
		p.Stdin.Close()
	}
	for _, p := range procs {
		if code := p.wait(time.Minute); code != 0 {
			t.Errorf("%s: status = %d; want 0", p.Cmd.Args, code)
		}
	}
	maxRunning := checkPoolLog(t, db, pool, limit, instances*jobs)
	if maxRunning != limit {
		t.Errorf("most jobs running at once = %d; want the limit, %d", maxRunning, limit)
	}
	t.Logf("%d instances, %d jobs each, at most %d running at once", instances, jobs, maxRunning)
}

// checkPoolLog replays the pool's log in commit order and checks that no
// more than limit jobs ran at once, that every job started once with a
// token of its own and ended, and that the running column agrees with the
// replay. It returns the most jobs that ran at once.
func checkPoolLog(t *testing.T, db *sql.DB, pool string, limit, wantJobs int) int {
	t.Helper()
	rows, err := db.Query(`SELECT seq, instance, job, token, event, running FROM pool_log WHERE pool = ? ORDER BY seq`, pool)
	if err != nil {
		t.Fatalf("query pool_log: %v", err)
	}
	defer rows.Close()
	var (
		running, maxRunning int
		seqs                int64
		tokens              = map[int64]string{}
		open                = map[string]int64{} // instance/job -> token
		ended               = map[string]bool{}
	)
	for rows.Next() {
		var (
			seq, job, token, recorded int64
			instance, event           string
		)
		if err := rows.Scan(&seq, &instance, &job, &token, &event, &recorded); err != nil {
			t.Fatal(err)
		}
		if seqs++; seq != seqs {
			t.Errorf("pool_log seq %d follows %d; want consecutive numbers", seq, seqs-1)
			seqs = seq
		}
		key := fmt.Sprintf("%s/job %d", instance, job)
		switch event {
		case "start":
			running++
			maxRunning = max(maxRunning, running)
			if running > limit {
				t.Errorf("seq %d: %s started with token %d while %d jobs ran; want at most %d", seq, key, token, running-1, limit)
			}
			if token == 0 {
				t.Errorf("seq %d: %s started with token 0", seq, key)
			}
			if other, ok := tokens[token]; ok {
				t.Errorf("seq %d: %s started with token %d, already given to %s", seq, key, token, other)
			}
			tokens[token] = key
			if _, ok := open[key]; ok || ended[key] {
				t.Errorf("seq %d: %s started twice", seq, key)
			}
			open[key] = token
		case "end", "abandoned":
			running--
			if got, ok := open[key]; !ok || got != token {
				t.Errorf("seq %d: %s %s with token %d; want the end of a started job (open with %d)", seq, key, event, token, got)
			}
			delete(open, key)
			if event == "abandoned" {
				t.Errorf("seq %d: %s abandoned (token %d): a permit ended during a job without faults", seq, key, token)
			} else {
				ended[key] = true
			}
		default:
			t.Errorf("seq %d: unknown event %q", seq, event)
		}
		if recorded != int64(running) {
			t.Errorf("seq %d: %s %s recorded %d running; the replay counts %d", seq, key, event, recorded, running)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ended) != wantJobs || len(open) != 0 {
		t.Errorf("jobs done = %d, still open = %v; want %d done, none open", len(ended), keys(open), wantJobs)
	}
	return maxRunning
}

func keys[V any](m map[string]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, ", ")
}
