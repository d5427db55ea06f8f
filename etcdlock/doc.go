// Package etcdlock is the etcd backend of fencelock: fenced locks,
// read-write locks and counting semaphores on etcd's v3 API
// (go.etcd.io/etcd/client/v3). A [Locker] keeps one session, an etcd lease
// kept alive in the background; every acquisition creates one record
// attached to it, and a lease's token is its record's create revision.
// [lock.AcquireAll] creates the records of all its names in one
// transaction: their leases share one token, and callers never deadlock.
//
// # What is guaranteed
//
// The guarantees of package lock, according to the etcd cluster (arrival
// order is create-revision order), and:
//
//   - [Lease.Done] closes with [lock.ErrLost] before the server could
//     expire the session lease: at the send time of the last acknowledged
//     keepalive plus the TTL minus the loss margin, or earlier when the
//     server reports the lease gone or someone else deletes the record.
//   - A release deletes only its own record. A cancelled or failed
//     Acquire, a lost lease and Close leave no record behind once the
//     cluster is reachable; a create applied late blocks its lock for at
//     most 2s + 2×TTL + the loss margin (24s with the defaults).
//   - [Locker.Observe] reports every grant, release and free moment, in
//     order, once each, across lost connections and leader changes, except
//     the grants it misses when the revisions it still needs were
//     compacted; it then reports the current holder and goes on.
//   - [Locker.Resume] takes over a stopped holder's grant, same record and
//     token, while it lives on the server (see [Lease.Ticket]).
//
// # What is not
//
// A lease can be lost at any moment, and its holder may learn it too late
// to stop a write already on its way. Send [Lease.Token] with every write
// and have the resource enforce it (package fencing), or make writes to
// etcd conditional with [GuardedTxn] ([GuardedTxnAll] for several leases)
// or [PutFenced]. The deadline assumes the local clock does not run slower
// than the etcd leader's by more than the loss margin over one TTL, and
// that only the current leader expires leases: a leader that stalls for
// longer than a TTL and resumes can revoke leases its successor kept alive
// (etcd issues 12528 and 15247), and then only fencing keeps the holder's
// late writes out.
//
// # Tuning
//
// [WithTTL] is how long a crashed holder blocks its lock; [WithLossMargin]
// must exceed the longest stall of the holder's process; give every Locker
// of a name the same [WithLockDelay]. [New] borrows the caller's client;
// [lock.Open] with an "etcd://" URL makes and owns one (see the driver's
// Open for every URL key).
//
// # Keys and security
//
// Everything the Locker writes is under its prefix: one record per request,
// "<prefix><name>/#<lease>-<seq>", one guard per session and, with a
// lock-delay, markers under "<prefix>#delay/<name>/". A record key may be
// reused: tell grants apart by their tokens. With [LayoutConcurrency] a
// Locker, etcd's Mutex and Election and etcdctl lock exclude each other on
// a name, and Holder, Queue, Observe and Revoke see the recipes' records.
//
// The role an application needs is read and write on its prefix. TLS and
// credentials come from the URL or from the client given to New. A call
// the cluster refuses returns at once an error wrapping
// [lock.ErrPermission] and writes nothing. No error or log line repeats a
// password or key material.
//
// # Read more
//
// In the repository's docs/design: etcd.md (how it works), queue.md (the
// queue rules), trials.md (the fault trials).
package etcdlock
