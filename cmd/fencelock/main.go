// Command fencelock takes fenced locks on etcd or ZooKeeper from the shell.
//
// Usage:
//
//	fencelock [flags] run --lock NAME [--lock NAME...] [--shared | --limit N] [--try] [--wait D] [--grace D] [--] COMMAND [ARG...]
//	fencelock [flags] holder NAME
//	fencelock [flags] leader NAME [--watch]
//	fencelock [flags] revoke NAME --token T
//	fencelock [flags] queue NAME
//
// The backend is the URL given by --url, or else by the FENCELOCK_URL
// environment variable, in the form package lock's Open accepts:
//
//	etcd://127.0.0.1:2379,127.0.0.1:22379/myapp?ttl=10s
//	zk://127.0.0.1:2181/myapp?session_timeout=10s
//
// # TLS and credentials
//
// --ca-file, --cert-file, --key-file and --server-name (or the variables
// FENCELOCK_CA_FILE, FENCELOCK_CERT_FILE, FENCELOCK_KEY_FILE and
// FENCELOCK_SERVER_NAME) turn on TLS to the backend, and --user (or
// FENCELOCK_USER) authenticates as that user, an etcd user or a ZooKeeper
// digest user, with the password read from FENCELOCK_PASSWORD: a password
// is never taken from the command line, where other users of the machine
// can read it. They become the URL keys that package lock's Open reads
// (ca_file, cert_file, key_file, server_name, the URL's user and
// password_env=FENCELOCK_PASSWORD); giving one both ways is a usage
// error. No password or key appears in fencelock's output or errors.
//
// # Logs and metrics
//
// --log-level (debug, info, warn, error) and --log-format (text, json)
// send the backend's log, its client library's included, to stderr; by
// default there is none, and -v alone means info. --metrics-addr
// host:port serves the library's metrics at http://host:port/metrics in
// the Prometheus text format while the command runs (for instance while
// run holds its lock): fencelock_acquire_duration_seconds,
// fencelock_hold_duration_seconds, fencelock_leases_held,
// fencelock_leases_lost_total and the others listed on
// lock.WithMeterProvider, with dots turned into underscores. The
// command writes this format itself instead of linking the OpenTelemetry
// SDK and its Prometheus exporter, which would make them requirements of
// the library's module.
//
// # run
//
// run acquires the lock called NAME (waiting for it, unless --try), then
// runs COMMAND with the lease's fencing token in its environment as
// FENCING_TOKEN and the lock's name as FENCELOCK_LOCK, and releases the lock
// when COMMAND exits. Pass FENCING_TOKEN along with every write COMMAND makes
// to a resource that checks it: that is what keeps a command that outlived
// its lease from doing damage.
//
// With --shared, run takes a shared (read) grant of NAME instead
// (lock.SharedLocker): any number of shared runs hold NAME at once, and a
// run without --shared, the writer, holds it alone. With --limit N, NAME
// is a semaphore (lock.Semaphore) and run takes one of its N permits: at
// most N runs hold it at once, and every run of NAME must give the same N.
// Requests of a name are served in arrival order, so a writer waiting
// behind readers is not overtaken by readers that come after it. --shared
// and --limit exclude each other, and N must be at least 1. --try and
// --wait apply to every kind of grant: a shared run that would wait behind
// a writer, or a permit that would wait for a free one, exits 75 with
// --try. A backend whose Locker lacks the interface is an error (status 1),
// as is a request that disagrees with the name's queue: a --limit other
// than the holders', or a lock request on a semaphore and the reverse.
// The fencing token of a shared grant or a permit orders the requests but
// does not exclude the other holders of the same moment: a resource they
// share is protected by each lease still existing (the backends' guarded
// writes), not by comparing their tokens.
//
// --lock given more than once holds every name (lock.AcquireAll), all or
// none: run waits until it holds them all, and with --try or --wait takes
// none if any is held. Runs naming overlapping sets, in any order, do not
// deadlock. COMMAND then gets FENCELOCK_LOCKS, the names sorted and
// separated by spaces, and the token of each name in a variable of its
// own: FENCING_TOKEN_ followed by the name in upper case with every
// character other than a letter or a digit turned into '_' (the token of
// account/a-1 is in FENCING_TOKEN_ACCOUNT_A_1). Each token goes with the
// writes to the resource its name protects. FENCING_TOKEN and
// FENCELOCK_LOCK are set only with one --lock (which also sets the two
// above), and are removed from the environment COMMAND inherits otherwise.
// A name given twice, or two names that give the same variable, are bad
// usage, and so are --shared and --limit with several names: they are
// exclusive locks. Losing any of the names counts as losing the lease
// below, and the others are released at once.
//
// If the lease is lost while COMMAND runs (the session expired, the backend
// became unreachable for too long), fencelock sends SIGTERM to COMMAND's
// process group, then SIGKILL after the grace period (--grace, default 10s),
// and exits with status 76. COMMAND runs in a process group of its own so
// that its children are stopped with it; as a consequence it is not in the
// terminal's foreground group and must not read from the terminal. SIGINT,
// SIGTERM and SIGHUP sent to fencelock are passed on to that group.
//
// # holder and leader
//
// holder prints every current holder of the lock NAME, one line each, in
// grant order (which is token order); waiters are not listed. The line of an
// exclusive holder is
//
//	token=42 identity=host/1234/ab12cd
//
// and a shared grant and a semaphore permit add a marker:
//
//	token=42 identity=host/1234/ab12cd shared
//	token=43 identity=host/5678/cd34ef permit limit=3
//
// An identity that is empty or contains a space, '=', a quote, a backquote,
// a backslash, a control character or invalid UTF-8 is printed as a Go
// quoted string. On a backend
// that cannot list holders (its Locker is no lock.HolderLister), holder
// prints the earliest one.
//
// leader prints the current leader of the election NAME (elections are locks,
// so this is the same line), and with --watch keeps printing one line per
// change of leader, "none" when there is no leader, until interrupted.
//
// # revoke
//
// revoke ends the grant of the lock NAME whose fencing token is T
// (lock.Revoker), and prints
//
//	revoked token=42
//
// It needs nothing from the holder's process, which may be frozen or cut
// off: the holder's record is deleted, the next waiter is granted, and the
// revoked lease ends with lock.ErrLost once its process hears of it. The
// revoked holder can still write until then; the resources it writes to
// refuse it when they check tokens (the next holder's is higher) or use
// the backends' guarded writes. Only a current holder's token is accepted:
// a waiter's, an ended grant's or an unknown token ends nothing and exits
// 3. With a read-write lock or a semaphore, only the holder with token T
// loses its grant. A backend whose Locker cannot revoke is an error.
//
// # queue
//
// queue prints every request of the lock NAME in queue order
// (lock.QueueLister): the holders first, then the waiters in the order
// they will be served, one line each:
//
//	position=0 held token=42 identity=host/1234/ab12cd since=2026-01-02T15:04:05.123Z
//	position=1 waiting token=45 identity=host/5678/cd34ef since=2026-01-02T15:04:06.5Z
//
// with the kind markers of holder (" shared", " permit limit=N") after
// the identity. since is when the request was made, by the backend's
// clock, in UTC; etcd does not record it, and its lines have none. A
// waiter's token is already fixed, and it cannot be revoked. The listing
// is one read: requests may join or leave a moment later. A backend whose
// Locker cannot list a queue is an error.
//
// # Exit status
//
//	0    success (run: COMMAND exited with status 0)
//	1    an error: the backend could not be reached, a request failed, the
//	     backend offers no shared locks or semaphores, the request disagrees
//	     with the name's queue (lock.ErrIncompatible)
//	2    bad usage: unknown flag, missing argument, malformed URL, invalid lock
//	     name, --shared with --limit, --limit below 1 or beyond the backend's,
//	     a --lock given twice, --shared or --limit with several --lock
//	3    holder, leader: the lock is free (there is no leader); revoke: no
//	     current holder of NAME has the token; queue: nobody holds or
//	     waits for NAME
//	75   run --try or --wait: the lock is held by someone else (with --shared:
//	     held or awaited by a writer; with --limit: every permit is taken);
//	     COMMAND was not run
//	76   run: the lease was lost while COMMAND ran, and COMMAND was stopped
//	126  run: COMMAND could not be started
//	127  run: COMMAND was not found
//	N    run: COMMAND's own exit status; 128+S if a signal S ended it
//
// Errors are printed as one line on standard error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	a := &app{
		stdin:   os.Stdin,
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		getenv:  os.Getenv,
		environ: os.Environ(),
		signals: sigc,
	}
	code := a.main(context.Background(), os.Args[1:])
	signal.Stop(sigc)
	os.Exit(code)
}
