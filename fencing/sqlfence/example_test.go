package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock"
)

// The holder of a lease writes a row only if no later grant has written
// before it. (Register a driver, such as github.com/jackc/pgx/v5/stdlib,
// to run this.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlfence.New(db, sqlfence.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}

	var lease lock.Lease // from Locker.Acquire(ctx, "invoices/2024-06")
	err = store.Apply(ctx, "invoices/2024-06", lease.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE invoices SET state = 'sent' WHERE month = $1", "2024-06")
		return err
	})
	if errors.Is(err, fencing.ErrStaleToken) {
		log.Print("lost the lock to a newer holder; nothing was written")
	}
}
