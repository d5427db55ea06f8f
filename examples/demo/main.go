// Command demo shows, with a real lock server, the failure that fencing
// tokens exist for, and how they stop it.
//
//	go run ./demo                       # starts an embedded etcd, nothing to install
//	go run ./demo --etcd 127.0.0.1:2379 # or use a running etcd cluster
//	go run ./demo --zk 127.0.0.1:2181   # or a running ZooKeeper ensemble
//
// Worker A takes a lock and then stops dead, as a process does in a long
// garbage-collection pause or a frozen VM: none of its keepalives reach the
// server, so the server expires A's lease and grants the lock to worker B,
// which writes. Then A wakes up, still believing it holds the lock, and
// writes too. The scenario runs twice: once against a store that enforces
// fencing tokens, where A's late write is rejected, and once against a store
// that does not, where it silently overwrites B's.
//
// A's pause is real as far as the server can tell: A talks to the server
// through a TCP proxy inside this program, and the proxy stops forwarding.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
