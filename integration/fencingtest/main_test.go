// Package fencingtest tests the resource-side fencing helpers against real
// databases: a PostgreSQL server started for the test binary and SQLite
// files, through their usual drivers.
package fencingtest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/integration/postgres"
)

// One PostgreSQL server serves every test of the binary; tests keep apart
// by table names. It starts with the first test that needs it.
var (
	pgOnce   sync.Once
	pgServer *postgres.Server
	pgErr    error
)

func TestMain(m *testing.M) {
	testutil.Main(m, func() error {
		if pgServer == nil {
			return nil
		}
		if err := pgServer.Stop(); err != nil {
			return fmt.Errorf("postgres: stop: %w", err)
		}
		return nil
	})
}

// backend is a database the SQL helper is tested on.
type backend struct {
	name    string
	dialect sqlfence.Dialect
	open    func(t *testing.T) *sql.DB
}

var backends = []backend{
	{"postgres", sqlfence.Postgres, openPostgres},
	{"sqlite", sqlfence.SQLite, openSQLite},
}

// forEachBackend runs f as a subtest on every backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	pgOnce.Do(func() { pgServer, pgErr = postgres.Launch() })
	if pgErr != nil {
		postgres.Unavailable(t, pgErr)
	}
	db, err := sql.Open("pgx", pgServer.URL)
	if err != nil {
		t.Fatalf("sql.Open(pgx) = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openSQLite opens a fresh database file. Writers wait for each other (busy
// timeout, immediate transactions) instead of failing with SQLITE_BUSY.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fencing.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("sql.Open(sqlite) = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tableName turns the test's name into a table name unique to the test.
func tableName(t *testing.T, prefix string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range strings.ToLower(t.Name()) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:50] + fmt.Sprintf("_%x", hash(s))
	}
	return s
}

func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
