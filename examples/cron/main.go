// Command cron runs a periodic job exactly once per period, however many
// instances of it are running.
//
//	cron --url etcd://127.0.0.1:2379/myapp --db sqlite:cron.db --job report --every 10s
//
// Start it on several machines: one instance holds the lock "cron/JOB" and
// schedules the job; the others wait in line. When the scheduler stops —
// cleanly (it releases the lock at once) or by crashing (the lock server
// expires its session after the TTL) — the next instance takes over.
//
// The lock decides who schedules, but it cannot by itself make a run happen
// exactly once: a scheduler that was paused may wake up after its successor
// has run the period. So each run is recorded in the database, in a
// transaction that first checks the scheduler's fencing token (package
// sqlfence) and that the period has not run yet. A stale scheduler's
// transaction is refused; a period that already ran is skipped.
//
// Periods are numbered by wall-clock time (Unix time divided by --every).
// Periods missed while no instance held the lock (during a takeover) are
// run when the next scheduler starts, up to --catch-up periods back.
//
// Each run prints a line
//
//	cron: <id> ran <job> for period <P> (token <T>)
//
// and records (job, period, instance, token) in the table cron_runs.
package main

import (
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

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

type config struct {
	url, dsn, job, id string
	every             time.Duration
	catchUp           int
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "lock backend URL (default $FENCELOCK_URL)")
	fs.StringVar(&cfg.dsn, "db", "sqlite:cron.db", "database: sqlite:PATH or postgres://...")
	fs.StringVar(&cfg.job, "job", "report", "job name (a lock name segment)")
	fs.StringVar(&cfg.id, "id", exutil.DefaultID(), "this instance's name")
	fs.DurationVar(&cfg.every, "every", 10*time.Second, "period")
	fs.IntVar(&cfg.catchUp, "catch-up", 10, "run at most this many missed periods on takeover")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(cfg.url)
	if err != nil {
		return err
	}
	if cfg.every <= 0 || cfg.catchUp < 0 {
		return errors.New("--every must be positive and --catch-up not negative")
	}

	if url, err = exutil.WithIdentity(url, cfg.id); err != nil {
		return err
	}
	locker, err := lock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()
	db, err := exutil.OpenDB(cfg.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	s := &scheduler{cfg: cfg, db: db, out: out}
	if err := db.Setup(ctx, s.setup); err != nil {
		return err
	}

	name := "cron/" + cfg.job
	for {
		err := lock.Do(ctx, locker, name, s.schedule)
		if ctx.Err() != nil {
			return nil // stopped by a signal; Do has released the lock
		}
		fmt.Fprintf(out, "cron: %s stopped scheduling: %v\n", cfg.id, err)
		// Lost the lock (or could not reach the backend): wait in line again.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

type scheduler struct {
	cfg   config
	db    *exutil.DB
	fence *sqlfence.Store
	out   io.Writer
}

func (s *scheduler) setup(ctx context.Context) error {
	fence, err := sqlfence.New(s.db.DB, s.db.Dialect)
	if err != nil {
		return err
	}
	s.fence = fence
	if err := fence.CreateTable(ctx); err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS cron_runs (
		job TEXT NOT NULL, period BIGINT NOT NULL, instance TEXT NOT NULL, token BIGINT NOT NULL)`)
	return err
}

// schedule runs while this instance holds the lock: every period, it runs
// the periods that have not run yet. It returns when ctx ends (the lease
// ended or the program is stopping) or a run fails.
func (s *scheduler) schedule(ctx context.Context, lease lock.Lease) error {
	fmt.Fprintf(s.out, "cron: %s is the scheduler of %s (token %d)\n", s.cfg.id, s.cfg.job, lease.Token())
	every := s.cfg.every.Nanoseconds()
	for {
		current := time.Now().UnixNano() / every
		from := current
		last, ok, err := s.lastPeriod(ctx)
		if err != nil {
			return err
		}
		if ok {
			from = max(last+1, current-int64(s.cfg.catchUp))
		}
		for p := from; p <= current; p++ {
			if err := s.runPeriod(ctx, lease.Token(), p); err != nil {
				return err
			}
		}
		next := time.Unix(0, (current+1)*every)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		case <-timer.C:
		}
	}
}

func (s *scheduler) lastPeriod(ctx context.Context) (int64, bool, error) {
	var last *int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT MAX(period) FROM cron_runs WHERE job = ?`), s.cfg.job).Scan(&last)
	if err != nil || last == nil {
		return 0, false, err
	}
	return *last, true, nil
}

// runPeriod runs the job for period p unless it already ran, in one
// transaction fenced by token.
func (s *scheduler) runPeriod(ctx context.Context, token fencing.Token, p int64) error {
	ran := false
	err := s.fence.Apply(ctx, "cron/"+s.cfg.job, token, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.db.Q(`SELECT COUNT(*) FROM cron_runs WHERE job = ? AND period = ?`), s.cfg.job, p).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil // a previous scheduler ran it
		}
		// The job itself. A real one would do its work here, writing its
		// results through tx so that they commit with the record.
		if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO cron_runs (job, period, instance, token) VALUES (?, ?, ?, ?)`),
			s.cfg.job, p, s.cfg.id, int64(token)); err != nil {
			return err
		}
		ran = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("period %d: %w", p, err)
	}
	if ran {
		fmt.Fprintf(s.out, "cron: %s ran %s for period %d (token %d)\n", s.cfg.id, s.cfg.job, p, token)
	}
	return nil
}
