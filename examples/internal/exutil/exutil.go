// Package exutil holds the plumbing the example programs share: opening the
// SQL database they fence their writes in, and stopping on a signal.
package exutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"modernc.org/sqlite"               // registers "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock"
)

// DB is an open database and the SQL spelling it needs.
type DB struct {
	*sql.DB
	Dialect sqlfence.Dialect
}

// OpenDB opens "sqlite:PATH" (a file, created if missing) or a PostgreSQL
// URL ("postgres://..."). SQLite is opened so that several processes can
// share the file: a busy timeout, and transactions that take the write lock
// at BEGIN, so concurrent writers queue instead of failing.
func OpenDB(dsn string) (*DB, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return nil, errors.New("--db sqlite:PATH: empty path")
		}
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(20000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
		db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, err
		}
		return &DB{DB: db, Dialect: sqlfence.SQLite}, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, err
		}
		return &DB{DB: db, Dialect: sqlfence.Postgres}, nil
	default:
		return nil, fmt.Errorf("--db %q: want sqlite:PATH or postgres://...", dsn)
	}
}

// setupRetryFor bounds how long Setup retries a busy SQLite file: as long
// as the busy timeout OpenDB sets.
const setupRetryFor = 20 * time.Second

// Setup runs create, a program's idempotent creation of its tables and
// rows, and runs it again while SQLite answers SQLITE_BUSY, for up to
// 20 seconds.
//
// The busy timeout does not cover every case: when several processes open
// a new SQLite file at the same moment, SQLite answers SQLITE_BUSY at once
// to some of them while the file is switched into WAL mode (seen about
// once in 200 processes started five at a time on new files). Once the
// tables exist, transactions wait for the write lock as usual.
func (db *DB) Setup(ctx context.Context, create func(context.Context) error) error {
	deadline := time.Now().Add(setupRetryFor)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := create(ctx)
		if err == nil || db.Dialect != sqlfence.SQLite || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY, in any of its
// extended forms.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Q rewrites the ? placeholders of query into $1, $2... for PostgreSQL.
func (db *DB) Q(query string) string {
	if db.Dialect != sqlfence.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SignalContext returns a context cancelled by SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// URL returns flagValue, or else $FENCELOCK_URL, or an error.
func URL(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := os.Getenv("FENCELOCK_URL"); v != "" {
		return v, nil
	}
	return "", errors.New("no backend: give --url (etcd://host:port/prefix or zk://host:port/root) or set FENCELOCK_URL")
}

// DefaultID is the instance name used when --id is not given: the
// library's default identity, "hostname/pid/random".
func DefaultID() string { return lock.DefaultIdentity() }

// WithIdentity returns rawURL with its identity query key set to id, so that
// the lock records name this instance, unless the URL already sets one.
func WithIdentity(rawURL, id string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", err
	}
	if !q.Has("identity") {
		q.Set("identity", id)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
