package fencingtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock/locktest"
)

// A paused holder's write reaches SQLite after the next holder's: the
// token check in the same transaction rejects it.
func Example_sqlite() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fencing-example-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := sqlfence.New(db, sqlfence.SQLite)
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE config (k TEXT PRIMARY KEY, v TEXT)"); err != nil {
		panic(err)
	}
	set := func(token fencing.Token, v string) error {
		return store.Apply(ctx, "config", token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO config VALUES ('mode', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", v)
			return err
		})
	}

	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	defer a.Close()
	defer b.Close()
	leaseA, _ := a.Acquire(ctx, "config")
	m.ExpireSession(a) // A pauses and loses the lock without noticing
	leaseB, _ := b.Acquire(ctx, "config")

	fmt.Println(set(leaseB.Token(), "from B"))
	fmt.Println(set(leaseA.Token(), "from A"))
	var v string
	_ = db.QueryRowContext(ctx, "SELECT v FROM config WHERE k = 'mode'").Scan(&v)
	fmt.Println(v)
	// Output:
	// <nil>
	// fencing: stale token 1 for "config": highest accepted is 2
	// from B
}
