package exutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestQ(t *testing.T) {
	tests := []struct {
		dialect sqlfence.Dialect
		in      string
		want    string
	}{
		{sqlfence.SQLite, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = ? AND c = ?"},
		{sqlfence.Postgres, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{sqlfence.Postgres, "SELECT 1", "SELECT 1"},
	}
	for _, tt := range tests {
		db := &DB{Dialect: tt.dialect}
		if got := db.Q(tt.in); got != tt.want {
			t.Errorf("Q(%v, %q) = %q; want %q", tt.dialect, tt.in, got, tt.want)
		}
	}
}

func TestWithIdentity(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"etcd://127.0.0.1:2379/app", "etcd://127.0.0.1:2379/app?identity=node-1"},
		{"zk://127.0.0.1:2181/app?session_timeout=5s", "zk://127.0.0.1:2181/app?identity=node-1&session_timeout=5s"},
		{"etcd://127.0.0.1:2379/app?identity=other", "etcd://127.0.0.1:2379/app?identity=other"},
	}
	for _, tt := range tests {
		got, err := WithIdentity(tt.in, "node-1")
		if err != nil || got != tt.want {
			t.Errorf("WithIdentity(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestOpenDBRejectsUnknown(t *testing.T) {
	for _, dsn := range []string{"mysql://x", "sqlite:", "cron.db"} {
		if db, err := OpenDB(dsn); err == nil {
			db.Close()
			t.Errorf("OpenDB(%q) = nil error; want an error", dsn)
		}
	}
}

// busyError returns the error SQLite gives a writer that finds the write
// lock taken and has no busy timeout.
func busyError(t *testing.T) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "busy.db")
	holder, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Exec(`INSERT INTO t VALUES (1)`)
	if err == nil {
		t.Fatal("INSERT while another connection holds the write lock = nil error; want SQLITE_BUSY")
	}
	return err
}

func TestSetupRetriesBusy(t *testing.T) {
	busy := busyError(t)
	if !isBusy(busy) {
		t.Fatalf("isBusy(%v) = false; want true", busy)
	}
	other := errors.New("no such table")
	tests := []struct {
		name      string
		dialect   sqlfence.Dialect
		errs      []error // what create returns, call by call; then nil
		wantErr   error
		wantCalls int
	}{
		{"busy twice", sqlfence.SQLite, []error{busy, busy}, nil, 3},
		{"other error", sqlfence.SQLite, []error{other, busy}, other, 1},
		{"busy on PostgreSQL", sqlfence.Postgres, []error{busy}, busy, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			db := &DB{Dialect: tt.dialect}
			err := db.Setup(context.Background(), func(context.Context) error {
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || calls != tt.wantCalls {
				t.Errorf("Setup() = %v after %d calls; want %v after %d", err, calls, tt.wantErr, tt.wantCalls)
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := (&DB{Dialect: sqlfence.SQLite}).Setup(ctx, func(context.Context) error { calls++; return busy })
	if !isBusy(err) || calls != 1 {
		t.Errorf("Setup(cancelled ctx) = %v after %d calls; want SQLITE_BUSY after 1", err, calls)
	}
}

// TestSetupConcurrentNewFile opens new files from several handles at once,
// as several example processes started together do, and sets each up.
func TestSetupConcurrentNewFile(t *testing.T) {
	const rounds, handles = 40, 5
	for round := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("new-%d.db", round))
		errs := make(chan error, handles)
		for range handles {
			go func() {
				db, err := OpenDB("sqlite:" + path)
				if err != nil {
					errs <- err
					return
				}
				defer db.Close()
				errs <- db.Setup(context.Background(), func(ctx context.Context) error {
					if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`); err != nil {
						return err
					}
					_, err := db.ExecContext(ctx, `INSERT INTO t (k, v) VALUES ('a', 0) ON CONFLICT (k) DO NOTHING`)
					return err
				})
			}()
		}
		failed := false
		for range handles {
			if err := <-errs; err != nil {
				t.Errorf("round %d: Setup() = %v; want nil", round, err)
				failed = true
			}
		}
		if failed {
			return
		}
	}
}
