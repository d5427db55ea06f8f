// Command inventory takes items out of stock under a lock, and fences the
// update in SQL so that a holder that lost its lock cannot corrupt the count.
//
//	inventory --url etcd://127.0.0.1:2379/shop --db sqlite:shop.db --sku widget --take 2
//	inventory --url zk://127.0.0.1:2181/shop --db postgres://localhost/shop --sku widget --take 2
//
// It is a read-modify-write: read the stock, compute the new count, write it
// back. The lock "inventory/SKU" keeps two instances from interleaving those
// steps. But a holder can be paused between its read and its write — long
// enough for its lease to expire and for another instance to take the lock
// and update the stock. The paused holder's write would then undo that
// update. The write therefore goes through sqlfence.Store.Apply, which checks
// the lease's fencing token in the same transaction: a stale holder's write
// is refused, and the program exits with status 3.
//
// --pause makes the program wait for a line on standard input between its
// read and its write, so that you can freeze it (kill -STOP PID), let
// another instance run, resume it (kill -CONT PID), press Enter, and watch
// the stale write being refused.
//
// Exit status: 0 the stock was updated (or only read, with --take 0);
// 3 the write was refused as stale; 4 not enough stock; 1 other errors.
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
	exitStale      = 3
	exitOutOfStock = 4
)

var errOutOfStock = errors.New("not enough stock")

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, fencing.ErrStaleToken):
		fmt.Fprintln(os.Stderr, "inventory: write refused:", err)
		os.Exit(exitStale)
	case errors.Is(err, errOutOfStock):
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(exitOutOfStock)
	default:
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("inventory", flag.ContinueOnError)
	urlFlag := fs.String("url", "", "lock backend URL (default $FENCELOCK_URL)")
	dsn := fs.String("db", "sqlite:inventory.db", "database: sqlite:PATH or postgres://...")
	sku := fs.String("sku", "widget", "the item (a lock name segment)")
	take := fs.Int64("take", 1, "how many items to take out of stock (0 only reads)")
	initial := fs.Int64("stock", 100, "stock of an item the database does not know yet")
	id := fs.String("id", exutil.DefaultID(), "this instance's name")
	pause := fs.Bool("pause", false, "wait for a line on stdin between the read and the write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(*urlFlag)
	if err != nil {
		return err
	}
	if *take < 0 {
		return errors.New("--take must not be negative")
	}
	if url, err = exutil.WithIdentity(url, *id); err != nil {
		return err
	}

	db, err := exutil.OpenDB(*dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	fence, err := sqlfence.New(db.DB, db.Dialect)
	if err != nil {
		return err
	}
	if err := db.Setup(ctx, func(ctx context.Context) error { return setup(ctx, db, fence, *sku, *initial) }); err != nil {
		return err
	}

	locker, err := lock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "inventory/"+*sku)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		lease.Release(rctx)
	}()
	token := lease.Token()
	fmt.Fprintf(out, "%s: holding inventory/%s with token %d\n", *id, *sku, token)

	// Read...
	var stock int64
	if err := db.QueryRowContext(ctx, db.Q(`SELECT qty FROM stock WHERE sku = ?`), *sku).Scan(&stock); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s in stock: %d; taking %d\n", *id, *sku, stock, *take)
	if *take == 0 {
		return nil
	}
	if stock < *take {
		return fmt.Errorf("%w: %d %s left, %d wanted", errOutOfStock, stock, *sku, *take)
	}
	if *pause {
		fmt.Fprintf(out, "%s: paused; press Enter to write\n", *id)
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil && err != io.EOF {
			return err
		}
	}

	// ...modify, write. The write is deliberately not tied to the lease's
	// life (no lock.LeaseContext): the lease can end after any check we
	// make, so the fencing token checked in the transaction is what makes
	// this write safe.
	err = fence.Apply(context.WithoutCancel(ctx), "inventory/"+*sku, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, db.Q(`UPDATE stock SET qty = ? WHERE sku = ?`), stock-*take, *sku)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s in stock: %d (written with token %d)\n", *id, *sku, stock-*take, token)
	return nil
}

// setup creates the tables and the item's row if missing.
func setup(ctx context.Context, db *exutil.DB, fence *sqlfence.Store, sku string, initial int64) error {
	if err := fence.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, qty BIGINT NOT NULL)`); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, db.Q(`INSERT INTO stock (sku, qty) VALUES (?, ?) ON CONFLICT (sku) DO NOTHING`), sku, initial)
	return err
}
