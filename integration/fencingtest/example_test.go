package fencingtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/lock"
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

// A transfer between two accounts holds the lock of each, and moves the
// amount in one transaction that checks both tokens: a holder that lost
// its locks moves nothing, whichever account it touches first.
func Example_transfer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fencing-example-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
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
	if _, err := db.ExecContext(ctx, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL);"+
		"INSERT INTO accounts VALUES ('alice', 100), ('bob', 20)"); err != nil {
		panic(err)
	}
	transfer := func(held *lock.MultiLease, from, to string, amount int) error {
		tokens := map[string]fencing.Token{}
		for _, lease := range held.Leases() {
			tokens[lease.Name()] = lease.Token() // one token per account
		}
		return store.ApplyAll(ctx, tokens, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - ? WHERE id = ?", amount, from); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, to)
			return err
		})
	}

	m := locktest.NewMemory()
	a, b := m.NewLocker("a"), m.NewLocker("b")
	defer a.Close()
	defer b.Close()
	heldA, err := lock.AcquireAll(ctx, a, "account/alice", "account/bob")
	if err != nil {
		panic(err)
	}
	fmt.Println(transfer(heldA, "alice", "bob", 30))
	m.ExpireSession(a) // A pauses and loses both locks without noticing

	// B names the accounts in the other order: AcquireAll sorts them.
	heldB, err := lock.AcquireAll(ctx, b, "account/bob", "account/alice")
	if err != nil {
		panic(err)
	}
	defer heldB.Release(ctx)
	fmt.Println(transfer(heldB, "bob", "alice", 5))
	fmt.Println(transfer(heldA, "alice", "bob", 50))
	var alice, bob int
	_ = db.QueryRowContext(ctx, "SELECT (SELECT balance FROM accounts WHERE id = 'alice'), (SELECT balance FROM accounts WHERE id = 'bob')").Scan(&alice, &bob)
	fmt.Println("alice", alice, "bob", bob)
	// Output:
	// <nil>
	// <nil>
	// fencing: stale token 1 for "account/alice": highest accepted is 3
	// alice 75 bob 45
}
