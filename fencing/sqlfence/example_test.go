package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/lock/locktest"
)

// The holder of a lease writes a row only if no later grant has written
// before it. The check and the write commit in one transaction.
//
// It needs a PostgreSQL server and a registered driver (such as
// github.com/jackc/pgx/v5/stdlib, imported for its side effect), which
// this module does not depend on, so it has no Output and is compiled but
// not run; the integration module runs the same steps against real
// databases.
func Example() {
	ctx := context.Background()

	// Any lock.Locker will do; the in-memory one keeps the example short.
	var locker lock.Locker = locktest.NewMemory().NewLocker("billing-1")
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "invoices/2024-06")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlfence.New(db, sqlfence.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}

	err = store.Apply(ctx, "invoices/2024-06", lease.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE invoices SET state = 'sent' WHERE month = $1", "2024-06")
		return err
	})
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		log.Print("lost the lock to a newer holder; nothing was written")
	case err != nil:
		log.Fatal(err)
	}
}
