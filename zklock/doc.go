// Package zklock is the ZooKeeper backend of fencelock: fenced locks,
// read-write locks and counting semaphores (package lock) on ZooKeeper 3.5
// or later, with github.com/go-zookeeper/zk. Every acquisition creates one
// ephemeral sequential znode under the lock's parent, a container znode
// the server removes once empty; a lease's token is its znode's czxid.
// [Locker.AcquireAll] creates the znodes of several names in one multi.
// [Dial] opens and owns the connection ([WithDialer], [WithHostProvider]).
//
// # What is guaranteed
//
// The guarantees of package lock, according to the ensemble (tokens rise
// across leader changes and re-created parents too), and:
//
//   - [Lease.Done] closes with [lock.ErrLost] before the leader could
//     expire the session, whether the holder's server is frozen, killed or
//     cut off from its peers: once no sync of the Locker (one every T/12,
//     T the negotiated session timeout) has been answered for T minus the
//     loss margin. Waiting calls then fail with [lock.ErrLost]; a shorter
//     disconnection keeps the session and the waiters' places.
//   - A release deletes only its own znode, and the Locker never deletes a
//     znode another session owns. A cancelled, failed or interrupted
//     acquisition, a lost lease and Close leave no znode behind; a call
//     cancelled while its create is in flight deletes the znode before it
//     returns (waiting at most the session timeout or 5s).
//   - [Locker.Observe] reports what the lock ends up in, in grant order
//     with tokens rising, never the same holder twice in a row.
//
// # What is not
//
// A lease can be lost at any moment, and its holder may learn of it too
// late to stop a write already on its way. Send [Lease.Token] with every
// write and have the resource check it (package fencing), or use
// [GuardedMulti] or [SetFenced]. The deadline relies on the server's
// defaults (minSessionTimeout at least two ticks, local sessions off) and
// on clocks that advance at the same rate. A leader that stops answering
// for longer than T/2 costs every session's leases. Observe can miss a
// holder that comes and goes within about a round trip or while the
// Locker is disconnected. Grant order breaks after 2^31 acquisitions of
// one lock whose parent was never removed in between (the sequence
// numbers overflow), twice as soon with a lock-delay. No lease can be
// resumed by another process ([lock.ErrUnsupported]): go-zookeeper
// cannot reattach to a session.
//
// # Tuning
//
// [WithSessionTimeout] bounds how long a crashed holder blocks its lock,
// [WithLossMargin] how early a cut-off holder gives up; give every Locker
// of a name the same [WithLockDelay]. [lock.Open] takes "zk://" URLs; see
// the driver's Open for every key.
//
// # Other recipes
//
// Every Locker counts the lock records of Curator, go-zookeeper and Kazoo
// in its queue, and [WithLayout] makes its own records Curator's, so that
// both exclude each other on a name while a fleet migrates. Holder reports
// a foreign holder's token, its czxid; Revoke deletes its record
// unbeknown to it.
//
// # Security
//
// [WithTLS] speaks TLS to the servers' secure client ports; [WithDigest]
// authenticates every connection, and [WithACL] says who may change what
// the Locker creates. A refusal by the server is an error wrapping
// [lock.ErrPermission], at once. Errors and log lines never contain a
// password or key material.
//
// # Read more
//
// In the repository's docs/design: zookeeper.md (how it works),
// zookeeper-loss.md (why a lease is declared lost in time), queue.md (the
// queue rules), trials.md (the fault trials).
package zklock
