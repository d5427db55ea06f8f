// Package etcdlock is the etcd backend of fencelock: exclusive, fenced locks
// on etcd's v3 API (go.etcd.io/etcd/client/v3).
//
// # How it works
//
// A [Locker] keeps one session: an etcd lease with the configured TTL, kept
// alive in the background. Every acquisition creates one record, the key
//
//	<prefix><name>/#<session lease ID>-<sequence>
//
// attached to the session lease and holding the Locker's identity. The
// record with the lowest create revision under "<prefix><name>/#" holds the
// lock; the others wait in create-revision order, each watching only the
// record just before its own. A waiter whose predecessor goes re-reads
// before it reports success: its own record must still exist (so its lease
// is alive) and no earlier record may be left. The lease's fencing token is
// its record's create revision.
//
// The uncontended path is one round trip to acquire (a transaction that
// creates the record and reads the owner) and one to release (a delete
// guarded by the record's create revision).
//
// Requests that are safe to repeat (the create, which is idempotent per
// acquisition; reads; the guarded delete) get at most a third of the TTL
// (and at least a second) per attempt and are retried, so a member that
// stops answering without closing its connections delays a call instead of
// blocking it: the client sends the retry to another member. Keepalives
// are sent the same way, with half a keepalive interval per attempt. A
// waiter whose watch stays silent for a TTL re-reads its predecessor once,
// so a watch stuck on such a member delays it by about a TTL at most.
//
// A Locker outlives its sessions: when a session is lost, the leases
// granted through it end with [lock.ErrLost] and the next call starts a new
// session.
//
// # What is guaranteed
//
//   - At most one lease of a name is held at a time, according to the etcd
//     cluster, including between two acquisitions through one Locker.
//   - Waiters are served in arrival (create-revision) order; a release wakes
//     one waiter.
//   - [Lease.Done] closes with [lock.ErrLost] no later than the moment the
//     server could expire the session lease: keepalives are sent every
//     TTL/3 and the lease is declared lost at the send time of the last
//     acknowledged keepalive plus the TTL minus the loss margin
//     ([WithLossMargin]), or earlier when the server reports the lease gone
//     or the record is deleted by someone else.
//   - A release deletes only its own record. A cancelled or failed Acquire,
//     a lost lease and Close leave no record behind once the cluster is
//     reachable (at the latest, the session lease's expiry removes them).
//   - Tokens rise with every grant of a name and are never zero.
//
// # What is not
//
// A lease can be lost at any moment, and its holder may learn it too late to
// stop a write already on its way. Send [Lease.Token] with every write and
// have the resource enforce it (package fencing), or make writes to etcd
// itself conditional with [Lease.IsHeld]. The local loss deadline assumes
// the local clock does not run slower than the etcd leader's by more than
// the loss margin over one TTL.
//
// # Opening by URL
//
// Importing the package registers the "etcd" scheme with [lock.Open]:
//
//	etcd://127.0.0.1:2379,127.0.0.1:22379/myapp?ttl=10s&identity=worker-1&loss_margin=2s
//
// See [WithPrefix], [WithTTL], [WithIdentity] and [WithLossMargin] for the
// defaults and limits.
package etcdlock
