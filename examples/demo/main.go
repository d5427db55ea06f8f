// Command demo shows, with a real lock server, the failure that fencing
// tokens exist for, and how they stop it.
//
//	go run ./demo                       # starts an embedded etcd, nothing to install
//	go run ./demo --etcd 127.0.0.1:2379 # or use a running etcd cluster
//	go run ./demo --zk 127.0.0.1:2181   # or a running ZooKeeper ensemble
//
// Worker A takes a lock, checks it, starts a write and stalls before the
// write goes out, as a process does in a long garbage-collection pause or a
// frozen VM: none of its keepalives reach the server. A's own Locker, which
// keeps running here, declares the lease lost (Done closes, Err wraps
// lock.ErrLost) before the server can give the lock to anyone else; the
// server then expires A's lease and grants the lock to worker B, which
// writes. Then A resumes: its lease has already ended, but its write was
// already past the check, so it goes out anyway. That is the point: no lock
// can recall a write in flight. The scenario runs twice: once against a
// store that enforces fencing tokens, where A's late write is rejected, and
// once against a store that does not, where it silently overwrites B's.
//
// A's stall is real as far as the server can tell: A talks to the server
// through a TCP proxy inside this program, and the proxy stops forwarding.
// (In a real GC pause A's Locker would be paused too, and would notice the
// loss only when A resumes; the write would go out just the same.)
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
