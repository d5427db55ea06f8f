// Command cache serves a cache kept in a SQL table and rebuilds it in
// place, with a read-write lock (lock.SharedLocker) so that readers never
// see it half built, and with fencing (package sqlfence) so that a
// rebuilder that lost its lock cannot tear a cache that a newer rebuild
// completed.
//
//	cache --url etcd://127.0.0.1:2379/myapp --db sqlite:cache.db --cache prices --rebuild
//	cache --url etcd://127.0.0.1:2379/myapp --db sqlite:cache.db --cache prices --times 10 --every 1s
//
// The cache is --size entries in the table cache_entries, and one row in
// cache_state that says which generation they are and whether it is ready.
// A rebuild (--rebuild) makes the next generation: it marks the state
// "building", deletes the entries, writes the new ones one transaction at a
// time, and marks the state "ready". A real rebuild is written in steps
// because it is too large for one transaction or fetches its data between
// writes (--fetch makes each entry take that long to fetch); in between,
// the table holds a mix of nothing, old and new.
//
// Readers take the lock "cache/NAME" shared (SharedLocker.AcquireShared),
// many at once, and the rebuilder takes it exclusively (Locker.Acquire).
// So a rebuild waits until the readers holding the lock have finished, and
// readers that arrive while it waits or runs wait until it has finished:
// grants are first come, first served, so a stream of readers cannot
// starve the rebuilder. Each read checks what it read: the state is
// "ready", there are exactly the entries it announces, and each one is the
// entry of its key for that generation. A reader that sees anything else
// has read a half-built cache, says so and exits with status 4. With
// --no-lock a reader reads without the lock, to show what the lock
// prevents.
//
// The lock alone is not enough. A rebuilder can be paused in the middle of
// its rebuild (a GC pause, a frozen VM) past its lease, while another
// rebuilds the cache from scratch and readers serve it. When the first
// resumes, its remaining writes would put entries of its generation into
// the other's cache. Every write of a rebuild therefore goes through
// sqlfence.Store.Apply with the write lock's fencing token, checked in the
// same transaction: once a newer rebuilder has written, the older one's
// writes are refused, and it exits with status 3. As in the inventory
// example, the rebuild deliberately does not stop when its lease ends: a
// check of the lease before each write could not close the window between
// the check and the write; the token in the transaction does. Readers only
// read, so they need no fencing; a reader whose read lock ended while it
// read discards what it read.
//
// A rebuild that has begun runs to its end: Ctrl-C or SIGTERM stops the
// program after it, not in the middle.
//
// What is not guaranteed: a rebuilder that stops in the middle (killed,
// or its lease lost) leaves the cache half built until the next rebuild.
// Readers see the state row say "building" and refuse to serve it; no lock
// can prevent that, the state row makes it detectable.
//
// Every grant is recorded in the table cache_log, (cache, seq, instance,
// event, token, generation), with the events read-begin and read-end
// (written after a read lock is granted and before it is released) and
// rebuild-begin and rebuild-end (written in the first and the last fenced
// transaction of a rebuild). seq numbers a cache's events in the order
// their transactions committed, from a counter row (cache_seq) that each
// event updates, so that the log shows which grants overlapped.
//
// The program prints
//
//	<id>: <cache> is being rebuilt; waiting for the read lock
//	<id>: read generation <G> of <cache>: <N> entries, consistent (token <T>)
//	<id>: holding the read lock; press Enter to release it               (--pause)
//	<id>: <cache> is in use; waiting for the write lock
//	<id>: rebuilding generation <G> of <cache> (token <T>)
//	<id>: paused halfway through generation <G>; press Enter to go on   (--pause)
//	<id>: rebuilt generation <G> of <cache>: <N> entries (token <T>)
//
// --pause makes a reader wait for a line on standard input while it holds
// the read lock, and a rebuilder halfway through its rebuild, so that you
// can watch the others wait, read the table while it is half built, or
// freeze the rebuilder (kill -STOP PID) until its lease expires.
//
// Exit status: 0 every read or rebuild succeeded; 3 a rebuild's write was
// refused as stale; 4 a read saw a half-built cache; 1 other errors.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	_ "github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/examples/internal/exutil"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock"
)

// Exit statuses besides 0 and 1.
const (
	exitStale     = 3
	exitHalfBuilt = 4
)

// errHalfBuilt is wrapped by a read that saw a cache in the middle of a
// rebuild.
var errHalfBuilt = errors.New("read a half-built cache")

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, fencing.ErrStaleToken):
		fmt.Fprintln(os.Stderr, "cache: rebuild refused:", err)
		os.Exit(exitStale)
	case errors.Is(err, errHalfBuilt):
		fmt.Fprintln(os.Stderr, "cache:", err)
		os.Exit(exitHalfBuilt)
	default:
		fmt.Fprintln(os.Stderr, "cache:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	url, dsn, cache, id    string
	rebuild, pause, noLock bool
	size, times            int
	until                  int64
	every, fetch           time.Duration
}

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("cache", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "lock backend URL (default $FENCELOCK_URL)")
	fs.StringVar(&cfg.dsn, "db", "sqlite:cache.db", "database: sqlite:PATH or postgres://...")
	fs.StringVar(&cfg.cache, "cache", "prices", "cache name (a lock name segment)")
	fs.StringVar(&cfg.id, "id", exutil.DefaultID(), "this instance's name")
	fs.BoolVar(&cfg.rebuild, "rebuild", false, "rebuild the cache instead of reading it")
	fs.IntVar(&cfg.size, "size", 20, "entries of a rebuilt cache")
	fs.IntVar(&cfg.times, "times", 1, "how many reads or rebuilds, one after the other")
	fs.Int64Var(&cfg.until, "until-generation", 0, "a reader reads until it has read this generation or a later one (instead of --times)")
	fs.DurationVar(&cfg.every, "every", 0, "wait between two reads or rebuilds")
	fs.DurationVar(&cfg.fetch, "fetch", 0, "how long a rebuild takes to fetch each entry before it writes it")
	fs.BoolVar(&cfg.pause, "pause", false, "wait for a line on stdin while holding the read lock, or halfway through a rebuild")
	fs.BoolVar(&cfg.noLock, "no-lock", false, "read without taking the read lock (to see what it prevents)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(cfg.url)
	if err != nil {
		return err
	}
	switch {
	case cfg.size < 1 || cfg.times < 0 || cfg.every < 0 || cfg.fetch < 0:
		return errors.New("--size must be positive, --times, --every and --fetch not negative")
	case cfg.rebuild && (cfg.noLock || cfg.until != 0):
		return errors.New("--no-lock and --until-generation are for readers, not with --rebuild")
	}
	if url, err = exutil.WithIdentity(url, cfg.id); err != nil {
		return err
	}

	db, err := exutil.OpenDB(cfg.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	fence, err := sqlfence.New(db.DB, db.Dialect)
	if err != nil {
		return err
	}
	if err := db.Setup(ctx, func(ctx context.Context) error { return setup(ctx, db, fence, cfg.cache) }); err != nil {
		return err
	}
	locker, err := lock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()
	shared, ok := locker.(lock.SharedLocker)
	if !ok {
		return fmt.Errorf("the backend of %s offers no read-write locks", url)
	}
	c := &cacheProg{cfg: cfg, db: db, fence: fence, locker: locker, shared: shared, out: out, stdin: bufio.NewReader(stdin)}

	for i := 0; ; i++ {
		if cfg.until == 0 && i == cfg.times {
			return nil
		}
		if i > 0 && cfg.every > 0 {
			timer := time.NewTimer(cfg.every)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return nil // stopped by a signal
		}
		if cfg.rebuild {
			err = c.rebuild(ctx)
			if ctx.Err() != nil {
				return nil // stopped by a signal while waiting for the lock
			}
			if err != nil {
				return err
			}
			continue
		}
		gen, err := c.read(ctx)
		if ctx.Err() != nil && !errors.Is(err, errHalfBuilt) {
			return nil
		}
		if err != nil {
			return err
		}
		if cfg.until != 0 && gen >= cfg.until {
			return nil
		}
	}
}

// cacheProg is one instance, reader or rebuilder.
type cacheProg struct {
	cfg    config
	db     *exutil.DB
	fence  *sqlfence.Store
	locker lock.Locker
	shared lock.SharedLocker
	out    io.Writer
	stdin  *bufio.Reader
}

// lockName is the read-write lock of the cache; it is also the resource
// name of its fencing tokens.
func (c *cacheProg) lockName() string { return "cache/" + c.cfg.cache }

// rebuild makes the next generation of the cache under the write lock.
func (c *cacheProg) rebuild(ctx context.Context) error {
	lease, err := c.locker.TryAcquire(ctx, c.lockName())
	if errors.Is(err, lock.ErrLocked) {
		c.say("%s is in use; waiting for the write lock", c.cfg.cache)
		lease, err = c.locker.Acquire(ctx, c.lockName())
	}
	if err != nil {
		return err
	}
	defer c.release(ctx, lease)
	token := lease.Token()

	// Not tied to the lease's life (see the package doc): the token
	// checked in each transaction is what keeps a stale rebuild out.
	wctx := context.WithoutCancel(ctx)
	var gen int64
	err = c.fence.Apply(wctx, c.lockName(), token, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(wctx, c.db.Q(`SELECT generation FROM cache_state WHERE cache = ?`), c.cfg.cache).Scan(&gen)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		gen++
		if _, err := tx.ExecContext(wctx, c.db.Q(`INSERT INTO cache_state (cache, generation, size, status) VALUES (?, ?, ?, 'building')
			ON CONFLICT (cache) DO UPDATE SET generation = excluded.generation, size = excluded.size, status = excluded.status`),
			c.cfg.cache, gen, c.cfg.size); err != nil {
			return err
		}
		if _, err := tx.ExecContext(wctx, c.db.Q(`DELETE FROM cache_entries WHERE cache = ?`), c.cfg.cache); err != nil {
			return err
		}
		return c.logEvent(wctx, tx, "rebuild-begin", token, gen)
	})
	if err != nil {
		return fmt.Errorf("start generation %d: %w", gen, err)
	}
	c.say("rebuilding generation %d of %s (token %d)", gen, c.cfg.cache, token)

	for k := range c.cfg.size {
		if c.cfg.pause && k == c.cfg.size/2 {
			c.say("paused halfway through generation %d; press Enter to go on", gen)
			if _, err := c.stdin.ReadString('\n'); err != nil && err != io.EOF {
				return err
			}
		}
		if c.cfg.fetch > 0 {
			// Stands in for the data source. It ignores ctx: a rebuild
			// that has begun runs to its end (see the package doc).
			time.Sleep(c.cfg.fetch)
		}
		// An upsert, not an insert: a stale rebuilder's entry would
		// overwrite the newer generation's, which fencing prevents.
		err := c.fence.Apply(wctx, c.lockName(), token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(wctx, c.db.Q(`INSERT INTO cache_entries (cache, k, v, generation) VALUES (?, ?, ?, ?)
				ON CONFLICT (cache, k) DO UPDATE SET v = excluded.v, generation = excluded.generation`),
				c.cfg.cache, k, entry(gen, int64(k)), gen)
			return err
		})
		if err != nil {
			return fmt.Errorf("generation %d, entry %d: %w", gen, k, err)
		}
	}

	err = c.fence.Apply(wctx, c.lockName(), token, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(wctx, c.db.Q(`UPDATE cache_state SET status = 'ready' WHERE cache = ? AND generation = ?`), c.cfg.cache, gen); err != nil {
			return err
		}
		return c.logEvent(wctx, tx, "rebuild-end", token, gen)
	})
	if err != nil {
		return fmt.Errorf("finish generation %d: %w", gen, err)
	}
	c.say("rebuilt generation %d of %s: %d entries (token %d)", gen, c.cfg.cache, c.cfg.size, token)
	return nil
}

// read reads and checks the cache under a read lock (without one with
// --no-lock) and returns the generation it read.
func (c *cacheProg) read(ctx context.Context) (int64, error) {
	if c.cfg.noLock {
		gen, n, err := c.load(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.cfg.id, err)
		}
		c.say("read generation %d of %s: %d entries, consistent (no lock)", gen, c.cfg.cache, n)
		return gen, nil
	}

	lease, err := c.shared.TryAcquireShared(ctx, c.lockName())
	if errors.Is(err, lock.ErrLocked) {
		c.say("%s is being rebuilt; waiting for the read lock", c.cfg.cache)
		lease, err = c.shared.AcquireShared(ctx, c.lockName())
	}
	if err != nil {
		return 0, err
	}
	defer c.release(ctx, lease)
	token := lease.Token()
	// The log is written on a context that outlives a signal, so that
	// every read-begin has its read-end.
	lctx := context.WithoutCancel(ctx)
	if err := c.logTx(lctx, "read-begin", token, 0); err != nil {
		return 0, err
	}

	gen, n, err := c.load(ctx)
	if err == nil && lease.Err() != nil {
		// The read lock may have ended before the read, so a rebuild
		// may have run during it: what was read proves nothing.
		err = fmt.Errorf("read lock ended during the read, discarding it: %w", lease.Err())
	}
	if err == nil {
		c.say("read generation %d of %s: %d entries, consistent (token %d)", gen, c.cfg.cache, n, token)
		if c.cfg.pause {
			c.say("holding the read lock; press Enter to release it")
			if _, rerr := c.stdin.ReadString('\n'); rerr != nil && rerr != io.EOF {
				err = rerr
			}
		}
	}
	if lerr := c.logTx(lctx, "read-end", token, gen); lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.cfg.id, err)
	}
	return gen, nil
}

// load reads the whole cache in one statement, so in one snapshot, and
// checks that it is one complete generation. It returns the generation and
// the number of entries, or an error wrapping errHalfBuilt that says what
// is wrong.
func (c *cacheProg) load(ctx context.Context) (gen, n int64, err error) {
	rows, err := c.db.QueryContext(ctx, c.db.Q(`SELECT s.generation, s.size, s.status, e.k, e.v, e.generation
		FROM cache_state s LEFT JOIN cache_entries e ON e.cache = s.cache WHERE s.cache = ? ORDER BY e.k`), c.cfg.cache)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var (
		size    int64
		status  string
		found   bool
		torn    error
		entries int64
	)
	for rows.Next() {
		var (
			k, egen sql.NullInt64
			v       sql.NullString
		)
		if err := rows.Scan(&gen, &size, &status, &k, &v, &egen); err != nil {
			return 0, 0, err
		}
		found = true
		if !k.Valid {
			continue // the state row of a cache without entries
		}
		if torn == nil {
			switch {
			case k.Int64 != entries:
				torn = fmt.Errorf("%w: entry %d of generation %d is missing", errHalfBuilt, entries, gen)
			case egen.Int64 != gen || v.String != entry(gen, k.Int64):
				torn = fmt.Errorf("%w: entry %d is %q (generation %d) in generation %d", errHalfBuilt, k.Int64, v.String, egen.Int64, gen)
			}
		}
		entries++
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	switch {
	case !found:
		return 0, 0, fmt.Errorf("cache %s has not been built yet: run cache --rebuild", c.cfg.cache)
	case status != "ready":
		return 0, 0, fmt.Errorf("%w: generation %d is %s, %d of %d entries written", errHalfBuilt, gen, status, entries, size)
	case torn != nil:
		return 0, 0, torn
	case entries != size:
		return 0, 0, fmt.Errorf("%w: generation %d has %d entries, want %d", errHalfBuilt, gen, entries, size)
	}
	return gen, entries, nil
}

// entry is the value of key k in generation gen: a reader can tell an
// entry of another generation from the right one.
func entry(gen, k int64) string { return fmt.Sprintf("item %d of generation %d", k, gen) }

// logTx records event in a transaction of its own.
func (c *cacheProg) logTx(ctx context.Context, event string, token fencing.Token, gen int64) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := c.logEvent(ctx, tx, event, token, gen); err != nil {
		return err
	}
	return tx.Commit()
}

// logEvent records event in cache_log within tx. The update of the
// cache's counter row serializes the events, so seq is commit order.
func (c *cacheProg) logEvent(ctx context.Context, tx *sql.Tx, event string, token fencing.Token, gen int64) error {
	var seq int64
	err := tx.QueryRowContext(ctx, c.db.Q(`UPDATE cache_seq SET seq = seq + 1 WHERE cache = ? RETURNING seq`), c.cfg.cache).Scan(&seq)
	if err != nil {
		return fmt.Errorf("log %s: %w", event, err)
	}
	_, err = tx.ExecContext(ctx, c.db.Q(`INSERT INTO cache_log (cache, seq, instance, event, token, generation) VALUES (?, ?, ?, ?, ?, ?)`),
		c.cfg.cache, seq, c.cfg.id, event, int64(token), gen)
	if err != nil {
		return fmt.Errorf("log %s: %w", event, err)
	}
	return nil
}

// release gives lease back on a fresh bounded context, so that a
// cancelled ctx still hands the lock over at once.
func (c *cacheProg) release(ctx context.Context, lease lock.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	lease.Release(rctx)
}

// say prints one line, prefixed with the instance's name.
func (c *cacheProg) say(format string, args ...any) {
	fmt.Fprintf(c.out, "%s: %s\n", c.cfg.id, fmt.Sprintf(format, args...))
}

// setup creates the tables and the cache's counter row if missing.
func setup(ctx context.Context, db *exutil.DB, fence *sqlfence.Store, cache string) error {
	if err := fence.CreateTable(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS cache_state (cache TEXT PRIMARY KEY, generation BIGINT NOT NULL, size BIGINT NOT NULL, status TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS cache_entries (cache TEXT NOT NULL, k BIGINT NOT NULL, v TEXT NOT NULL, generation BIGINT NOT NULL, PRIMARY KEY (cache, k))`,
		`CREATE TABLE IF NOT EXISTS cache_seq (cache TEXT PRIMARY KEY, seq BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS cache_log (cache TEXT NOT NULL, seq BIGINT NOT NULL, instance TEXT NOT NULL,
			event TEXT NOT NULL, token BIGINT NOT NULL, generation BIGINT NOT NULL, PRIMARY KEY (cache, seq))`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, db.Q(`INSERT INTO cache_seq (cache, seq) VALUES (?, 0) ON CONFLICT (cache) DO NOTHING`), cache)
	return err
}
