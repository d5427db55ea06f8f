package fencingtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock/locktest"
)

// fixture is a token table plus the data it protects: a register (one value
// per resource) and an append-only log of applied writes, in commit order
// per resource.
type fixture struct {
	b     backend
	db    *sql.DB
	store *sqlfence.Store
	reg   string // register table
	log   string // log table
}

func newFixture(t *testing.T, b backend) *fixture {
	t.Helper()
	db := b.open(t)
	store := freshStore(t, db, b.dialect, tableName(t, "fence_"))
	ctx := t.Context()
	f := &fixture{b: b, db: db, store: store, reg: tableName(t, "reg_"), log: tableName(t, "log_")}
	serial := "BIGSERIAL PRIMARY KEY"
	if b.dialect == sqlfence.SQLite {
		serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
	}
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + f.reg,
		"DROP TABLE IF EXISTS " + f.log,
		"CREATE TABLE " + f.reg + " (resource TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE " + f.log + " (id " + serial + ", resource TEXT NOT NULL, token BIGINT NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return f
}

// freshStore returns a Store on an empty token table: the PostgreSQL server
// outlives a test (and go test -count=N runs it again).
func freshStore(t *testing.T, db *sql.DB, dialect sqlfence.Dialect, table string) *sqlfence.Store {
	t.Helper()
	store, err := sqlfence.New(db, dialect, sqlfence.WithTable(table))
	if err != nil {
		t.Fatalf("sqlfence.New(WithTable(%q)) = %v", table, err)
	}
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Fatalf("drop %s: %v", table, err)
	}
	if err := store.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	return store
}

// q rewrites ? placeholders for the backend.
func (f *fixture) q(query string) string {
	if f.b.dialect != sqlfence.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// put writes value to the register and logs the token that wrote it.
func (f *fixture) put(ctx context.Context, x execer, resource, value string, token fencing.Token) error {
	if _, err := x.ExecContext(ctx, f.q("INSERT INTO "+f.reg+" (resource, value) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE SET value = excluded.value"), resource, value); err != nil {
		return err
	}
	_, err := x.ExecContext(ctx, f.q("INSERT INTO "+f.log+" (resource, token) VALUES (?, ?)"), resource, int64(token))
	return err
}

// apply is a fenced put.
func (f *fixture) apply(ctx context.Context, resource, value string, token fencing.Token) error {
	return f.store.Apply(ctx, resource, token, func(tx *sql.Tx) error {
		return f.put(ctx, tx, resource, value, token)
	})
}

func (f *fixture) value(t *testing.T, resource string) string {
	t.Helper()
	var v string
	err := f.db.QueryRowContext(t.Context(), f.q("SELECT value FROM "+f.reg+" WHERE resource = ?"), resource).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read register %q: %v", resource, err)
	}
	return v
}

func (f *fixture) highest(t *testing.T, resource string) fencing.Token {
	t.Helper()
	h, err := f.store.Highest(t.Context(), resource)
	if err != nil {
		t.Fatalf("Highest(%q) = %v", resource, err)
	}
	return h
}

// logged returns the tokens of the applied writes to resource, in commit
// order.
func (f *fixture) logged(t *testing.T, resource string) []fencing.Token {
	t.Helper()
	rows, err := f.db.QueryContext(t.Context(), f.q("SELECT token FROM "+f.log+" WHERE resource = ? ORDER BY id"), resource)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	defer rows.Close()
	var out []fencing.Token
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatalf("read log: %v", err)
		}
		out = append(out, fencing.Token(tok))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read log: %v", err)
	}
	return out
}

func wantStale(t *testing.T, err error, resource string, token, highest fencing.Token) {
	t.Helper()
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("Apply(%q, %d) = %v; want *StaleTokenError", resource, token, err)
	}
	want := fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	if *stale != want {
		t.Fatalf("Apply(%q, %d) = %+v; want %+v", resource, token, *stale, want)
	}
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("errors.Is(%v, ErrStaleToken) = false; want true", err)
	}
}

var errWrite = errors.New("write failed")

func TestSQLApply(t *testing.T) {
	type step struct {
		token fencing.Token
		value string
		fail  bool          // the write returns errWrite after writing
		stale fencing.Token // nonzero: rejected with this Highest
		want  string        // register value afterwards
		high  fencing.Token // Highest afterwards
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"rising", []step{{5, "a", false, 0, "a", 5}, {6, "b", false, 0, "b", 6}, {100, "c", false, 0, "c", 100}}},
		{"equal accepted", []step{{5, "a", false, 0, "a", 5}, {5, "b", false, 0, "b", 5}}},
		{"lower rejected", []step{{8, "new", false, 0, "new", 8}, {7, "old", false, 8, "new", 8}, {8, "again", false, 0, "again", 8}}},
		{"failed write still fences", []step{{3, "a", false, 0, "a", 3}, {8, "lost", true, 0, "a", 8}, {7, "old", false, 8, "a", 8}, {8, "retry", false, 0, "retry", 8}}},
		{"largest bigint", []step{{math.MaxInt64, "max", false, 0, "max", math.MaxInt64}, {math.MaxInt64 - 1, "old", false, math.MaxInt64, "max", math.MaxInt64}}},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t, b)
				ctx := t.Context()
				for i, s := range tt.steps {
					ran := false
					err := f.store.Apply(ctx, "res", s.token, func(tx *sql.Tx) error {
						ran = true
						if err := f.put(ctx, tx, "res", s.value, s.token); err != nil {
							return err
						}
						if s.fail {
							return errWrite
						}
						return nil
					})
					switch {
					case s.stale != 0:
						wantStale(t, err, "res", s.token, s.stale)
						if ran {
							t.Errorf("step %d: stale write ran", i)
						}
					case s.fail:
						if !errors.Is(err, errWrite) {
							t.Fatalf("step %d: Apply() = %v; want errWrite", i, err)
						}
					case err != nil:
						t.Fatalf("step %d: Apply(%d) = %v; want nil", i, s.token, err)
					}
					if v := f.value(t, "res"); v != s.want {
						t.Errorf("step %d: register = %q; want %q", i, v, s.want)
					}
					if h := f.highest(t, "res"); h != s.high {
						t.Errorf("step %d: Highest() = %d; want %d", i, h, s.high)
					}
				}
			})
		}
	})
}

// TestSQLPausedHolder is the scenario fencing exists for: holder A gets the
// lock, pauses before its write reaches the database, loses the lock; B
// gets it with a higher token and writes; then A's write arrives. It must be
// rejected and B's write must survive. The tokens come from real leases of
// the in-memory Locker.
func TestSQLPausedHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		tokA, tokB := pausedHolderTokens(t)

		// A's write is prepared but held back (the pause).
		writeA := func() error { return f.apply(ctx, "job", "from A", tokA) }
		if err := f.apply(ctx, "job", "from B", tokB); err != nil {
			t.Fatalf("B: Apply(%d) = %v; want nil", tokB, err)
		}
		err := writeA()
		wantStale(t, err, "job", tokA, tokB)
		if v := f.value(t, "job"); v != "from B" {
			t.Errorf("register = %q; want %q (B's write survives)", v, "from B")
		}
		if got := f.logged(t, "job"); len(got) != 1 || got[0] != tokB {
			t.Errorf("applied writes = %v; want [%d]", got, tokB)
		}
	})
}

// TestSQLPausedHolderControl runs the same schedule with the fencing
// bypassed, once as a plain write and once as a separate check followed by
// a write: both times the stale write lands on top of B's. This is what the
// fenced test above would see if the helper did nothing.
func TestSQLPausedHolderControl(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		tokA, tokB := pausedHolderTokens(t)

		t.Run("plain write", func(t *testing.T) {
			if err := f.apply(ctx, "plain", "from B", tokB); err != nil {
				t.Fatalf("B: Apply(%d) = %v; want nil", tokB, err)
			}
			if err := f.put(ctx, f.db, "plain", "from A", tokA); err != nil {
				t.Fatalf("A: plain write = %v; want nil", err)
			}
			if v := f.value(t, "plain"); v != "from A" {
				t.Fatalf("register = %q; want %q (unfenced stale write lands)", v, "from A")
			}
		})
		t.Run("check then write", func(t *testing.T) {
			// A checks while its token is still the highest...
			if h := f.highest(t, "checked"); h > tokA {
				t.Fatalf("Highest() = %d; want at most %d before B writes", h, tokA)
			}
			// ...pauses; B writes through the helper...
			if err := f.apply(ctx, "checked", "from B", tokB); err != nil {
				t.Fatalf("B: Apply(%d) = %v; want nil", tokB, err)
			}
			// ...and A's write, already checked, lands.
			if err := f.put(ctx, f.db, "checked", "from A", tokA); err != nil {
				t.Fatalf("A: write = %v; want nil", err)
			}
			if v := f.value(t, "checked"); v != "from A" {
				t.Fatalf("register = %q; want %q (check-then-write lets the stale write land)", v, "from A")
			}
		})
	})
}

// pausedHolderTokens acquires a lease as A, expires A's session (A is
// paused and does not notice), and acquires as B. It returns both tokens.
func pausedHolderTokens(t *testing.T) (a, b fencing.Token) {
	t.Helper()
	ctx := t.Context()
	m := locktest.NewMemory()
	la, lb := m.NewLocker("A"), m.NewLocker("B")
	t.Cleanup(func() { la.Close(); lb.Close() })
	leaseA, err := la.Acquire(ctx, "job")
	if err != nil {
		t.Fatalf("A: Acquire() = %v", err)
	}
	m.ExpireSession(la)
	<-leaseA.Done()
	leaseB, err := lb.Acquire(ctx, "job")
	if err != nil {
		t.Fatalf("B: Acquire() = %v", err)
	}
	if leaseB.Token() <= leaseA.Token() {
		t.Fatalf("tokens A=%d B=%d; want B > A", leaseA.Token(), leaseB.Token())
	}
	return leaseA.Token(), leaseB.Token()
}

// TestSQLStaleWaitsForOpenWrite opens B's transaction (token 8) and holds it
// inside its write; A (token 7) arrives meanwhile. On PostgreSQL the test
// waits until A's statement is blocked on B's row lock, so A is re-evaluated
// after B commits; on SQLite, A waits for the write lock. Either way A is
// rejected with Highest 8 once B commits, and B's write stands.
func TestSQLStaleWaitsForOpenWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		inB, releaseB := make(chan struct{}), make(chan struct{})
		doneB := make(chan error, 1)
		go func() {
			doneB <- f.store.Apply(ctx, "row", 8, func(tx *sql.Tx) error {
				if err := f.put(ctx, tx, "row", "from 8", 8); err != nil {
					return err
				}
				close(inB)
				<-releaseB
				return nil
			})
		}()
		select {
		case <-inB:
		case err := <-doneB:
			t.Fatalf("B: Apply(8) = %v before its write ran", err)
		}
		doneA := make(chan error, 1)
		go func() { doneA <- f.apply(ctx, "row", "from 7", 7) }()
		if b.dialect == sqlfence.Postgres {
			waitForLockWait(t, f)
		}
		select {
		case err := <-doneA:
			close(releaseB)
			<-doneB
			t.Fatalf("A: Apply(7) = %v while B's transaction was open; want it to wait", err)
		default:
		}
		close(releaseB)
		if err := <-doneB; err != nil {
			t.Fatalf("B: Apply(8) = %v; want nil", err)
		}
		wantStale(t, <-doneA, "row", 7, 8)
		if v := f.value(t, "row"); v != "from 8" {
			t.Errorf("register = %q; want %q", v, "from 8")
		}
	})
}

// waitForLockWait polls until a PostgreSQL backend is waiting for a lock in
// a statement on the fixture's token table.
func waitForLockWait(t *testing.T, f *fixture) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "a statement on "+f.store.Table()+" waiting for a lock", func() bool {
		var n int
		err := f.db.QueryRowContext(t.Context(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
			f.store.Table()).Scan(&n)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		return n > 0
	})
}

// TestSQLConcurrent runs writers with tokens from a shared grant counter on
// two resources, fresh and stale mixed, and checks in the database that the
// writes committed in non-decreasing token order per resource, that every
// rejection named a higher token, and that the highest token is the largest
// applied one.
func TestSQLConcurrent(t *testing.T) {
	const (
		writers   = 8
		perWriter = 25
	)
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		resources := []string{"r0", "r1"}
		var grants atomic.Uint64
		var accepted, rejected atomic.Int64
		maxApplied := make([]atomic.Uint64, len(resources))
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				var mine fencing.Token
				for range perWriter {
					if mine == 0 || rng.IntN(3) == 0 {
						mine = fencing.Token(grants.Add(1))
					}
					r := rng.IntN(len(resources))
					err := f.apply(ctx, resources[r], fmt.Sprintf("w%d", w), mine)
					var stale *fencing.StaleTokenError
					switch {
					case err == nil:
						accepted.Add(1)
						for {
							cur := maxApplied[r].Load()
							if uint64(mine) <= cur || maxApplied[r].CompareAndSwap(cur, uint64(mine)) {
								break
							}
						}
					case errors.As(err, &stale) && stale.Token == mine && stale.Highest > mine:
						rejected.Add(1)
					default:
						errs <- fmt.Errorf("writer %d: Apply(%d) = %v; want nil or stale with Highest > Token", w, mine, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		total := 0
		for i, r := range resources {
			got := f.logged(t, r)
			total += len(got)
			for j := 1; j < len(got); j++ {
				if got[j] < got[j-1] {
					t.Fatalf("resource %s: write %d committed token %d after %d; want non-decreasing", r, j, got[j], got[j-1])
				}
			}
			if h, want := f.highest(t, r), fencing.Token(maxApplied[i].Load()); h != want {
				t.Errorf("Highest(%s) = %d; want %d (largest applied)", r, h, want)
			}
		}
		if int64(total) != accepted.Load() {
			t.Errorf("log holds %d writes; want %d (accepted)", total, accepted.Load())
		}
		if accepted.Load() == 0 || rejected.Load() == 0 {
			t.Errorf("accepted %d, rejected %d; want both nonzero", accepted.Load(), rejected.Load())
		}
		t.Logf("%s: %d accepted, %d rejected as stale", b.name, accepted.Load(), rejected.Load())
	})
}

// TestSQLCheckInOwnTransaction uses Check inside a transaction the caller
// manages: a rolled-back transaction records nothing, a committed one
// fences lower tokens.
func TestSQLCheckInOwnTransaction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx() = %v", err)
		}
		if err := f.store.Check(ctx, tx, "own", 9); err != nil {
			t.Fatalf("Check(9) = %v; want nil", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatalf("Rollback() = %v", err)
		}
		if h := f.highest(t, "own"); h != 0 {
			t.Fatalf("Highest() after rollback = %d; want 0", h)
		}

		tx, err = f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx() = %v", err)
		}
		if err := f.store.Check(ctx, tx, "own", 9); err != nil {
			t.Fatalf("Check(9) = %v; want nil", err)
		}
		if err := f.put(ctx, tx, "own", "nine", 9); err != nil {
			t.Fatalf("write = %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("Commit() = %v", err)
		}
		tx, err = f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx() = %v", err)
		}
		defer tx.Rollback()
		wantStale(t, f.store.Check(ctx, tx, "own", 4), "own", 4, 9)
	})
}

func TestSQLSchemaQualifiedTable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		schema := "public"
		if b.dialect == sqlfence.SQLite {
			schema = "main"
		}
		store := freshStore(t, db, b.dialect, schema+"."+tableName(t, "fence_"))
		ctx := t.Context()
		noop := func(*sql.Tx) error { return nil }
		if err := store.Apply(ctx, "q", 2, noop); err != nil {
			t.Fatalf("Apply(2) = %v; want nil", err)
		}
		wantStale(t, store.Apply(ctx, "q", 1, noop), "q", 1, 2)
	})
}

func TestSQLBadInput(t *testing.T) {
	db := openSQLite(t)
	for _, tc := range []struct {
		name    string
		db      *sql.DB
		dialect sqlfence.Dialect
		table   string
	}{
		{"nil db", nil, sqlfence.SQLite, "t"},
		{"no dialect", db, 0, "t"},
		{"unknown dialect", db, 99, "t"},
		{"empty table", db, sqlfence.SQLite, ""},
		{"leading digit", db, sqlfence.SQLite, "1t"},
		{"quote", db, sqlfence.SQLite, `t"; DROP TABLE x; --`},
		{"space", db, sqlfence.SQLite, "my table"},
		{"two dots", db, sqlfence.SQLite, "a.b.c"},
		{"empty schema", db, sqlfence.SQLite, ".t"},
		{"too long", db, sqlfence.SQLite, strings.Repeat("t", 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlfence.New(tc.db, tc.dialect, sqlfence.WithTable(tc.table))
			if !errors.Is(err, fencing.ErrInvalidConfig) || s != nil {
				t.Errorf("New(%q) = %v, %v; want nil, ErrInvalidConfig", tc.table, s, err)
			}
		})
	}

	store, err := sqlfence.New(db, sqlfence.SQLite)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if store.Table() != sqlfence.DefaultTable {
		t.Errorf("Table() = %q; want %q", store.Table(), sqlfence.DefaultTable)
	}
	ctx := t.Context()
	if err := store.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	ran := false
	noop := func(*sql.Tx) error { ran = true; return nil }
	for _, tc := range []struct {
		name  string
		token fencing.Token
		fn    func(*sql.Tx) error
		want  error
	}{
		{"zero token", 0, noop, fencing.ErrInvalidToken},
		{"token above MaxInt64", math.MaxInt64 + 1, noop, fencing.ErrInvalidToken},
		{"largest uint64", math.MaxUint64, noop, fencing.ErrInvalidToken},
		{"nil fn", 1, nil, fencing.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := store.Apply(ctx, "bad", tc.token, tc.fn); !errors.Is(err, tc.want) {
				t.Errorf("Apply(%d) = %v; want %v", tc.token, err, tc.want)
			}
		})
	}
	if ran {
		t.Error("a rejected Apply ran its write")
	}
	if h, err := store.Highest(ctx, "bad"); err != nil || h != 0 {
		t.Errorf("Highest() = %d, %v; want 0, nil", h, err)
	}
}
