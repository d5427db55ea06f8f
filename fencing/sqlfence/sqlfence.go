// Package sqlfence enforces fencing tokens in a SQL database, in the same
// transaction as the write they protect.
//
// A [Store] keeps the highest accepted token of each resource in a table
// (by default [DefaultTable]: resource TEXT PRIMARY KEY, token BIGINT). Its
// check is one conditional upsert, not a read followed by a write, and
// [Store.Apply] commits it together with the caller's write: a write with
// a stale token is never committed, and no write with a lower token can
// commit after one with a higher token (docs/design/fencing.md says why).
//
// On PostgreSQL at the default READ COMMITTED isolation, concurrent
// writers of one resource wait for each other; at REPEATABLE READ or
// SERIALIZABLE ([WithTxOptions]) the waiting transaction fails with a
// serialization error (SQLSTATE 40001) instead, and the caller retries
// it. SQLite has one writer at a time: open the database with a busy
// timeout (and preferably immediate transactions) so that concurrent
// writers wait rather than fail with SQLITE_BUSY.
//
// Tokens above [math.MaxInt64] (SQL BIGINT is signed) are rejected with an
// error wrapping [fencing.ErrInvalidToken]; etcd revisions and ZooKeeper
// zxids are far below. PostgreSQL and SQLite 3.24 or later are supported;
// MySQL, which lacks ON CONFLICT ... DO UPDATE ... WHERE, is not.
// sqlfence imports no driver: register one yourself (for example
// github.com/jackc/pgx/v5/stdlib or modernc.org/sqlite).
package sqlfence

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/telemetry"
)

// DefaultTable is the token table used unless [WithTable] names another.
const DefaultTable = "fencing_tokens"

// savepoint separates the token check from the caller's write, so that a
// failed write can be undone while the token stays.
const savepoint = "fencing_write"

// Dialect selects the SQL spelling of a database.
type Dialect int

const (
	// Postgres is PostgreSQL: $1, $2 placeholders.
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or later: ? placeholders.
	SQLite
)

// String returns the dialect's name.
func (d Dialect) String() string {
	if names := [...]string{Postgres: "postgres", SQLite: "sqlite"}; d > 0 && int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Option configures a [Store].
type Option func(*options)

type options struct {
	table  string
	txOpts *sql.TxOptions
	tel    telemetry.Config
	err    error // the first bad option's
}

// WithMeterProvider makes the Store count its decisions on
// fencelock.fencing.decisions (see lock.WithMeterProvider). It must not be
// nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.err = cmp.Or(o.err, o.tel.SetMeterProvider(mp)) }
}

// WithTracerProvider makes [Store.Apply] record a span,
// fencelock.fenced_write. It must not be nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.err = cmp.Or(o.err, o.tel.SetTracerProvider(tp)) }
}

// helper is the helper attribute of a Store's decisions.
const helper = "sqlfence"

// WithTable sets the token table (default [DefaultTable]): a plain SQL
// identifier of at most 63 bytes, optionally schema-qualified
// ("app.fencing_tokens"), used unquoted, so PostgreSQL folds it to lower
// case. Anything else makes [New] fail with [fencing.ErrInvalidConfig].
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithTxOptions sets the options of the transactions [Store.Apply] begins
// (default: the driver's, READ COMMITTED on PostgreSQL).
func WithTxOptions(opts sql.TxOptions) Option {
	return func(o *options) { o.txOpts = &opts }
}

// Store checks and records fencing tokens in one table of one database. It
// is safe for concurrent use.
type Store struct {
	db     *sql.DB
	table  string
	txOpts *sql.TxOptions
	tel    *telemetry.Telemetry

	upsert, selectToken string
}

// New returns a Store for db, which must hold the token table (see
// [Store.CreateTable]). A nil db, an unknown dialect or a bad table name is
// an error wrapping [fencing.ErrInvalidConfig], and so is a nil option.
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Store, error) {
	o := options{table: DefaultTable}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("sqlfence: new: %w: option %d is nil", fencing.ErrInvalidConfig, i)
		}
		opt(&o)
	}
	if o.err != nil {
		return nil, fmt.Errorf("sqlfence: new: %w: %w", fencing.ErrInvalidConfig, o.err)
	}
	if db == nil {
		return nil, fmt.Errorf("sqlfence: new: %w: nil database", fencing.ErrInvalidConfig)
	}
	var p1, p2 string
	switch dialect {
	case Postgres:
		p1, p2 = "$1", "$2"
	case SQLite:
		p1, p2 = "?", "?"
	default:
		return nil, fmt.Errorf("sqlfence: new: %w: unknown dialect %v", fencing.ErrInvalidConfig, dialect)
	}
	if !tableName.MatchString(o.table) {
		return nil, fmt.Errorf("sqlfence: new: %w: table %q: want an identifier of letters, digits and '_' (at most 63 bytes, no leading digit), optionally schema-qualified",
			fencing.ErrInvalidConfig, o.table)
	}
	// Inside DO UPDATE the target row is named by the bare table name.
	bare := o.table[strings.LastIndexByte(o.table, '.')+1:]
	tel, _ := telemetry.New("", o.tel) // a refused instrument stays a no-op
	return &Store{
		db:     db,
		table:  o.table,
		txOpts: o.txOpts,
		tel:    tel,
		upsert: "INSERT INTO " + o.table + " (resource, token) VALUES (" + p1 + ", " + p2 + ") " +
			"ON CONFLICT (resource) DO UPDATE SET token = excluded.token " +
			"WHERE " + bare + ".token <= excluded.token",
		selectToken: "SELECT token FROM " + o.table + " WHERE resource = " + p1,
	}, nil
}

// tableName is an identifier of at most 63 bytes, optionally qualified by
// one schema identifier.
var tableName = regexp.MustCompile(`\A[A-Za-z_]\w{0,62}(\.[A-Za-z_]\w{0,62})?\z`)

// Table returns the name of the token table ("" for a nil Store).
func (s *Store) Table() string {
	if s == nil {
		return ""
	}
	return s.table
}

// usable refuses a Store not made by [New] and a nil ctx.
func (s *Store) usable(ctx context.Context, op, resource string) error {
	switch {
	case s == nil || s.db == nil:
		return fmt.Errorf("sqlfence: %s %q: %w: store not created by New", op, resource, fencing.ErrInvalidConfig)
	case ctx == nil:
		return fmt.Errorf("sqlfence: %s %q: %w: nil context", op, resource, fencing.ErrInvalidConfig)
	}
	return nil
}

// CreateTable creates the token table if it does not exist.
func (s *Store) CreateTable(ctx context.Context) error {
	if err := s.usable(ctx, "create table", ""); err != nil {
		return err
	}
	q := "CREATE TABLE IF NOT EXISTS " + s.table +
		" (resource TEXT PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0))"
	if _, err := s.db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("sqlfence: create table %s: %w", s.table, err)
	}
	return nil
}

// Apply runs fn in a transaction that first records token for resource,
// and commits the two together. If a higher token was already recorded,
// nothing is written and Apply returns a [*fencing.StaleTokenError] whose
// Highest was read in the same transaction.
//
// If fn returns an error, its writes are rolled back to a savepoint taken
// after the check, the token alone is committed (a failed write still
// fences, as with [fencing.Guard]), and Apply returns fn's error unchanged,
// joined with a second error if recording the token failed too. If fn
// panics, the whole transaction is rolled back. fn must use tx for every
// statement the token protects, and must not commit or roll it back.
//
// A zero token or one above [math.MaxInt64] is an error wrapping
// [fencing.ErrInvalidToken]; a nil fn one wrapping
// [fencing.ErrInvalidConfig].
func (s *Store) Apply(ctx context.Context, resource string, token fencing.Token, fn func(tx *sql.Tx) error) error {
	return s.ApplyAll(ctx, map[string]fencing.Token{resource: token}, fn)
}

// ApplyAll is [Store.Apply] for a write that several resources protect:
// one transaction records the token of every resource in tokens, in sorted
// order (so writers of overlapping sets lock the rows in one order and
// never deadlock), and runs fn only if every check passed. A stale token
// rejects the whole write, with the [*fencing.StaleTokenError] of its
// resource, and records no token. No tokens is an error wrapping
// [fencing.ErrInvalidConfig].
func (s *Store) ApplyAll(ctx context.Context, tokens map[string]fencing.Token, fn func(tx *sql.Tx) error) error {
	resources := slices.Sorted(maps.Keys(tokens))
	label := strings.Trim(fmt.Sprintf("%q", resources), "[]")
	for _, r := range resources {
		if err := s.usableFor(ctx, "apply", r, tokens[r]); err != nil {
			return err
		}
	}
	switch {
	case len(resources) == 0:
		return fmt.Errorf("sqlfence: apply: %w: no tokens", fencing.ErrInvalidConfig)
	case fn == nil:
		return fmt.Errorf("sqlfence: apply %s: %w: nil write function", label, fencing.ErrInvalidConfig)
	}
	ctx, w := s.tel.StartWrite(ctx, helper, "", uint64(tokens[resources[0]]))
	decision, err := s.apply(ctx, label, resources, tokens, fn)
	w.End(decision, err)
	return err
}

// apply is ApplyAll after its checks; it also returns the decision made.
func (s *Store) apply(ctx context.Context, label string, resources []string, tokens map[string]fencing.Token, fn func(tx *sql.Tx) error) (string, error) {
	tx, err := s.db.BeginTx(ctx, s.txOpts)
	if err != nil {
		return "", fmt.Errorf("sqlfence: apply %s: begin: %w", label, err)
	}
	defer tx.Rollback() // after Commit, a no-op
	for _, r := range resources {
		if err := s.check(ctx, tx, r, tokens[r]); err != nil {
			return decisionOf(err), err
		}
	}
	return telemetry.Accepted, s.write(ctx, tx, label, fn)
}

// write runs fn in tx after passed checks, and commits.
func (s *Store) write(ctx context.Context, tx *sql.Tx, label string, fn func(tx *sql.Tx) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return fmt.Errorf("sqlfence: apply %s: savepoint: %w", label, err)
	}
	if werr := fn(tx); werr != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
			return errors.Join(werr, fmt.Errorf("sqlfence: apply %s: tokens not recorded: rollback to savepoint: %w", label, err))
		}
		if err := tx.Commit(); err != nil {
			return errors.Join(werr, fmt.Errorf("sqlfence: apply %s: tokens not recorded: commit: %w", label, err))
		}
		return werr
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: apply %s: commit: %w", label, err)
	}
	return nil
}

// Check records token for resource inside the caller's transaction tx, or
// returns a [*fencing.StaleTokenError] if a higher token is recorded: call
// it before the writes it protects, and commit only if it returned nil.
// Bad tokens are rejected as by [Store.Apply].
func (s *Store) Check(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token) error {
	if err := s.usableFor(ctx, "check", resource, token); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("sqlfence: check %q: %w: nil transaction", resource, fencing.ErrInvalidConfig)
	}
	err := s.check(ctx, tx, resource, token)
	if d := decisionOf(err); d != "" {
		s.tel.Decide(ctx, helper, d)
	}
	return err
}

// decisionOf returns the decision a check that returned err made: "" when
// it failed before deciding.
func decisionOf(err error) string {
	switch {
	case err == nil:
		return telemetry.Accepted
	case errors.Is(err, fencing.ErrStaleToken):
		return telemetry.Rejected
	}
	return ""
}

// check is Check after its argument checks, without counting.
func (s *Store) check(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token) error {
	res, err := tx.ExecContext(ctx, s.upsert, resource, int64(token))
	if err != nil {
		return fmt.Errorf("sqlfence: check %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlfence: check %q: rows affected: %w", resource, err)
	}
	if n > 0 {
		return nil
	}
	// The row exists and holds a higher token; on PostgreSQL the upsert
	// locked it, so this read sees the token that rejected us.
	var highest int64
	if err := tx.QueryRowContext(ctx, s.selectToken, resource).Scan(&highest); err != nil {
		return fmt.Errorf("sqlfence: check %q: token %d rejected, reading the highest: %w", resource, token, err)
	}
	return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: fencing.Token(highest)}
}

// Highest returns the highest token recorded for resource, or zero if none
// is. It is a plain read: use it for display and monitoring, never as the
// check before a write.
func (s *Store) Highest(ctx context.Context, resource string) (fencing.Token, error) {
	if err := s.usable(ctx, "highest", resource); err != nil {
		return 0, err
	}
	var highest int64
	err := s.db.QueryRowContext(ctx, s.selectToken, resource).Scan(&highest)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("sqlfence: highest %q: %w", resource, err)
	}
	return fencing.Token(highest), nil
}

// usableFor is usable, and refuses a token that is zero or does not fit a
// signed BIGINT.
func (s *Store) usableFor(ctx context.Context, op, resource string, token fencing.Token) error {
	if err := s.usable(ctx, op, resource); err != nil {
		return err
	}
	switch {
	case token == 0:
		return fmt.Errorf("sqlfence: %s %q: %w: zero is not a token", op, resource, fencing.ErrInvalidToken)
	case token > math.MaxInt64:
		return fmt.Errorf("sqlfence: %s %q: %w: token %d does not fit a signed BIGINT (at most %d)", op, resource, fencing.ErrInvalidToken, token, int64(math.MaxInt64))
	}
	return nil
}
