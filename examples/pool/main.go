// Command pool is a bounded worker pool: however many instances of it run,
// at most --limit of them do their work at the same time. A counting
// semaphore (lock.Semaphore) hands out the --limit permits of the name
// "pool/POOL"; an instance takes one for each job and gives it back when
// the job is done.
//
//	pool --url etcd://127.0.0.1:2379/myapp --db sqlite:pool.db --pool encoders --limit 3 --jobs 5
//	pool --url zk://127.0.0.1:2181/myapp --db sqlite:pool.db --pool encoders --limit 3 --jobs 5
//
// Use it where a shared resource takes only so many clients at once: a
// licence server, a rate-limited API, a database that slows down under too
// many batch jobs. Start ten instances with --limit 3 and three work while
// seven wait in line. Permits are granted first come, first served, so no
// instance starves; an instance that stops (Ctrl-C) gives its permit back at
// once, and one that crashes gives it back when the lock server expires its
// session. Every instance of a pool must give the same --limit: one that
// disagrees with the instances queued before it is refused
// (lock.ErrIncompatible).
//
// The job here waits for --work. A real one would do its work under the
// context the program passes it, which is cancelled the moment the permit
// ends (lock.LeaseContext): a permit lost in the middle of a job (a long
// pause, a partition) stops the job, and the job is retried with a new
// permit. Stopping is not fencing, though. A job that has already sent a
// write when its permit ends can still have that write land, and a fencing
// token check (package fencing) cannot refuse it: the permits of a
// semaphore are held at the same time, and a check that lets only the
// highest token through would lock out the other holders while they still
// hold. Writes that must not land after the permit ended belong in the lock
// service itself, guarded by the permit's own record (etcdlock.GuardedTxn,
// zklock.GuardedMulti; see the guarded example).
//
// Every start and end of a job is recorded in the database, with the
// permit's token, in the table pool_log: (pool, seq, instance, job, token,
// event, running). seq numbers the events of a pool in the order their
// transactions committed, and running is the number of jobs of the pool
// running after the event; both come from one counter row per pool
// (pool_running) that each event updates, so concurrent instances queue on
// its row lock and the numbers are exact on SQLite and PostgreSQL alike. A
// job is recorded as started after its permit is granted and as ended
// before the permit is given back, so running never exceeds --limit unless
// the semaphore admitted too many — or a permit ended in the middle of a
// job: that job is recorded as abandoned only once the program notices,
// when the next holder may already have started. That overlap is the one
// the previous paragraph is about. The program prints
//
//	<id>: all <limit> permits of <pool> are taken; waiting in line
//	<id>: job <J> started (token <T>, <N> of <limit> running)
//	<id>: job <J> done (token <T>)
//	<id>: job <J> abandoned (token <T>): <why the permit ended>
//
// --hold makes every job, once its work is done, wait for a line on
// standard input before it ends and gives its permit back (until standard
// input ends: then jobs no longer wait). Start more instances than the
// limit with --hold to see the extra ones wait in line, then press Enter.
//
// Exit status: 0 every job was done (or a signal stopped the program);
// 1 errors.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	_ "github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/examples/internal/exutil"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock"
)

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	url, dsn, pool, id string
	limit, jobs        int
	work               time.Duration
	hold               bool
}

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "lock backend URL (default $FENCELOCK_URL)")
	fs.StringVar(&cfg.dsn, "db", "sqlite:pool.db", "database: sqlite:PATH or postgres://...")
	fs.StringVar(&cfg.pool, "pool", "workers", "pool name (a lock name segment); every instance of a pool must give the same --limit")
	fs.StringVar(&cfg.id, "id", exutil.DefaultID(), "this instance's name")
	fs.IntVar(&cfg.limit, "limit", 3, "at most this many instances work at once")
	fs.IntVar(&cfg.jobs, "jobs", 5, "how many jobs this instance does, one after the other")
	fs.DurationVar(&cfg.work, "work", time.Second, "how long a job works")
	fs.BoolVar(&cfg.hold, "hold", false, "after its work, each job waits for a line on stdin before it ends")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(cfg.url)
	if err != nil {
		return err
	}
	if cfg.limit < 1 || cfg.jobs < 0 || cfg.work < 0 {
		return errors.New("--limit must be positive, --jobs and --work not negative")
	}
	if url, err = exutil.WithIdentity(url, cfg.id); err != nil {
		return err
	}

	db, err := exutil.OpenDB(cfg.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Setup(ctx, func(ctx context.Context) error { return setup(ctx, db, cfg.pool) }); err != nil {
		return err
	}
	locker, err := lock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()
	sem, ok := locker.(lock.Semaphore)
	if !ok {
		return fmt.Errorf("the backend of %s offers no semaphores", url)
	}

	w := &worker{cfg: cfg, db: db, sem: sem, out: out, stdin: bufio.NewReader(stdin)}
	for job := 1; job <= cfg.jobs; {
		done, err := w.do(ctx, job)
		if ctx.Err() != nil {
			fmt.Fprintf(out, "%s: stopped with %d of %d jobs done\n", cfg.id, job-1, cfg.jobs)
			return nil
		}
		if err != nil {
			return fmt.Errorf("job %d: %w", job, err)
		}
		if done {
			job++
		}
		// A job whose permit ended is done again, with a new permit.
	}
	return nil
}

// worker does the jobs of one instance, one at a time.
type worker struct {
	cfg   config
	db    *exutil.DB
	sem   lock.Semaphore
	out   io.Writer
	stdin *bufio.Reader
	// eof is set once stdin has ended: --hold no longer waits.
	eof bool
}

// do takes a permit, does job under it and gives it back. It reports
// false, and no error, if the permit ended before the job was done.
func (w *worker) do(ctx context.Context, job int) (bool, error) {
	name := "pool/" + w.cfg.pool
	permit, err := w.sem.TryAcquireSemaphore(ctx, name, w.cfg.limit)
	if errors.Is(err, lock.ErrLocked) {
		fmt.Fprintf(w.out, "%s: all %d permits of %s are taken; waiting in line\n", w.cfg.id, w.cfg.limit, w.cfg.pool)
		permit, err = w.sem.AcquireSemaphore(ctx, name, w.cfg.limit)
	}
	if err != nil {
		return false, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		permit.Release(rctx)
	}()
	token := permit.Token()

	// The records are written on a context that outlives the permit: the
	// end of a job is recorded even if the permit ended during it.
	rctx := context.WithoutCancel(ctx)
	running, err := w.record(rctx, job, token, "start")
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w.out, "%s: job %d started (token %d, %d of %d running)\n", w.cfg.id, job, token, running, w.cfg.limit)

	jctx, stop := lock.LeaseContext(ctx, permit)
	err = w.work(jctx)
	stop()
	if err == nil && permit.Err() != nil {
		err = permit.Err() // ended after the work, while it was held
	}
	if err != nil && ctx.Err() == nil {
		if _, rerr := w.record(rctx, job, token, "abandoned"); rerr != nil {
			return false, rerr
		}
		fmt.Fprintf(w.out, "%s: job %d abandoned (token %d): %v\n", w.cfg.id, job, token, err)
		return false, nil
	}
	if err != nil { // stopped by a signal
		_, rerr := w.record(rctx, job, token, "abandoned")
		return false, rerr
	}
	if _, err := w.record(rctx, job, token, "end"); err != nil {
		return false, err
	}
	fmt.Fprintf(w.out, "%s: job %d done (token %d)\n", w.cfg.id, job, token)
	return true, nil
}

// work is the job itself: it waits for --work, and with --hold then for a
// line on stdin. It returns the cause of ctx's end if ctx ends first.
func (w *worker) work(ctx context.Context) error {
	timer := time.NewTimer(w.cfg.work)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
	}
	if w.cfg.hold && !w.eof {
		// Like the inventory example's --pause, this read does not watch
		// ctx: a permit lost while waiting here is noticed afterwards.
		if _, err := w.stdin.ReadString('\n'); err != nil {
			if err != io.EOF {
				return err
			}
			w.eof = true
		}
	}
	return ctx.Err()
}

// record logs event ("start", "end" or "abandoned") of job and returns the
// number of the pool's jobs running after it. The counter row's update
// serializes the events of a pool, so seq and running are exact.
func (w *worker) record(ctx context.Context, job int, token fencing.Token, event string) (int64, error) {
	delta := 1
	if event != "start" {
		delta = -1
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var running, seq int64
	err = tx.QueryRowContext(ctx, w.db.Q(`UPDATE pool_running SET running = running + ?, seq = seq + 1 WHERE pool = ? RETURNING running, seq`),
		delta, w.cfg.pool).Scan(&running, &seq)
	if err != nil {
		return 0, fmt.Errorf("record %s: %w", event, err)
	}
	_, err = tx.ExecContext(ctx, w.db.Q(`INSERT INTO pool_log (pool, seq, instance, job, token, event, running) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		w.cfg.pool, seq, w.cfg.id, job, int64(token), event, running)
	if err != nil {
		return 0, fmt.Errorf("record %s: %w", event, err)
	}
	return running, tx.Commit()
}

// setup creates the tables and the pool's counter row if missing.
func setup(ctx context.Context, db *exutil.DB, pool string) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS pool_running (pool TEXT PRIMARY KEY, running BIGINT NOT NULL, seq BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS pool_log (pool TEXT NOT NULL, seq BIGINT NOT NULL, instance TEXT NOT NULL,
			job BIGINT NOT NULL, token BIGINT NOT NULL, event TEXT NOT NULL, running BIGINT NOT NULL, PRIMARY KEY (pool, seq))`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, db.Q(`INSERT INTO pool_running (pool, running, seq) VALUES (?, 0, 0) ON CONFLICT (pool) DO NOTHING`), pool)
	return err
}
