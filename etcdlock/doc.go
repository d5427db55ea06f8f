// Package etcdlock is the etcd backend of fencelock: fenced locks,
// read-write locks and counting semaphores on etcd's v3 API
// (go.etcd.io/etcd/client/v3).
//
// # How it works
//
// A [Locker] keeps one session: an etcd lease with the configured TTL, kept
// alive in the background. Every acquisition creates one record, the key
//
//	<prefix><name>/#<session lease ID>-<sequence>
//
// (both numbers in hexadecimal, the lease ID in 16 digits; the sequence
// tells apart the session's acquisitions of the name, see Record keys)
// attached to the session lease and holding the Locker's identity. The
// record with the lowest create revision under "<prefix><name>/#" holds the
// lock; the others wait in create-revision order, each watching only the
// record just before its own. A waiter whose predecessor goes re-reads
// before it reports success: its own record must still exist (so its lease
// is alive) and no earlier record may be left. The lease's fencing token is
// its record's create revision.
//
// Shared (read) and semaphore requests ([Locker.AcquireShared],
// [Locker.AcquireSemaphore]) queue in the same records, with their kind
// in the key after a '~' ("~r" for shared, "~s" and the limit for a
// permit), so that a listing of the keys tells every record's kind. Their
// create transaction reads the keys of the whole queue; a waiter applies
// the rules of [lock.SharedLocker] to the records ahead of its own,
// watches only the ones those rules name (the nearest earlier exclusive
// request; for a semaphore, the limit holders if it is the first waiter,
// else its predecessor, which rewrites its record unchanged when it is
// admitted), and reads the keys ahead again after one of them goes or is
// rewritten so. The oldest record says what the name is:
// a request it disagrees with is refused with [lock.ErrIncompatible] and
// its record deleted.
//
// The uncontended path is one round trip to acquire (a transaction that
// creates the record and reads the owner) and one to release (a delete
// guarded by the record's create revision).
//
// A held lease watches its own record, from 50ms after the grant (a lease
// released sooner costs no watch) and from the grant's revision (so no
// deletion is missed). The watches of all leases of a session share one
// watch stream, read by one goroutine: a held lease costs no goroutine of
// its own, and its release cancels its watch on the server. When the stream
// fails it is opened again, with backoff, and every watch is created again
// from its lease's grant; a watch the server cancels (its revisions were
// compacted) is replaced after one read of the record, which ends the lease
// with [lock.ErrLost] if the record is gone.
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
// # Late creates
//
// A create attempt that gets no answer in time (its member froze, its
// connection dropped) is retried, but the first attempt may still be
// applied at any later time: etcd can hold a proposal until a frozen leader
// resumes, long after the acquisition was granted through the retry and
// released. Its "create if the key does not exist" holds again once the
// record was deleted, so, left alone, it would re-create the record under a
// session that is still kept alive: a record that belongs to no
// acquisition, first in the queue, blocking the lock for as long as the
// Locker lives.
//
// Every session therefore has a guard, the key
//
//	<prefix>#guard/<session lease ID, 16 hexadecimal digits>
//
// attached to the session lease ('#' cannot appear in a lock name, so no
// lock's records range over it). Every create also compares the guard's mod
// revision with a value the Locker read from the server before sending it
// (0, no key, until the guard is first written). When an acquisition ends
// after one of its create attempts failed without an answer, the
// transaction that deletes its record (the release, or the cleanup of a
// failed, cancelled or lost acquisition) also writes the guard. That
// transaction is sent after every attempt of the acquisition, so it moves
// the guard's mod revision past every value those attempts compare with:
// none of them can be applied after it, and one applied before it is
// deleted by it. An acquisition whose create attempts were all answered
// has no attempt left to arrive late; its release stays the guarded delete
// alone. So the uncontended path is still one round trip each way, the
// guard is written only after a fault, and a create finds it moved (and
// pays one more round trip) only right after such an acquisition of the
// same Locker ended. A periodic sweep of the keys attached to the session
// lease would also remove such records, but only after they had blocked
// the lock for a sweep period, and at the cost of a listing every period.
//
// The bound: a record of an acquisition that has ended (Release returned,
// Acquire returned an error, or the lease was lost while its session
// lives) is gone, and can no longer come back, as soon as that deleting
// transaction is applied, which is at once when the cluster answers. When it
// is not confirmed, it is retried in the background for the TTL plus the
// loss margin (after the at most 2s a failed Acquire waits for it itself);
// if it still fails while the session is alive, the Locker ends the session
// (its leases end with [lock.ErrLost]) and revokes the session lease, whose
// expiry, at most a TTL later, removes the record and makes every later
// create attempt fail. So such a record blocks its lock for at most
// 2s + 2×TTL + the loss margin after its acquisition ended (24s with the
// defaults). A session that ends for any other reason (Close, loss) takes
// its records with its lease in the same way. The guard must not be
// written or deleted by anyone else.
//
// # Key layout
//
// Everything the Locker writes lives under its prefix ([WithPrefix],
// default [DefaultPrefix], "fencelock/"). The prefix is used as written
// plus a trailing slash: "/app/locks" gives keys starting "/app/locks/",
// as etcd's concurrency package and Kubernetes ("/registry/") lay keys
// out, and "app/locks" gives keys starting "app/locks/", a different key
// space. In a URL the path after the host list's slash is the prefix:
// "etcd://h:2379/app/locks" is "app/locks", "etcd://h:2379//app/locks" is
// "/app/locks". The keys are:
//
//	<prefix><name>/#<lease ID>-<sequence>[~<kind>]
//	                                        one record per acquisition: value = identity,
//	                                        attached to the session lease; <kind> is r
//	                                        (shared) or s<limit> (semaphore), none for
//	                                        an exclusive request
//	<prefix>#guard/<lease ID>               one per session, written only after a create
//	                                        went unanswered (see Late creates); attached
//	                                        to the session lease
//	<prefix>#delay/<name>/#<lease ID>-<sequence>[~<kind>]
//	                                        with [WithLockDelay] only: the lock-delay
//	                                        marker of the record of the same suffix;
//	                                        value = identity, no lease (see Lock-delay)
//
// with the lease ID in 16 hexadecimal digits and the sequence in
// hexadecimal. Records and guards go when the session lease ends; a marker
// is put with its record and goes with its clean Release (or the discard
// of an acquisition never granted), or with the next grant of the name.
// Nothing else is written: no other per-lock key, no key outside the
// prefix.
//
// # Record keys
//
// An acquisition that follows a clean Release of the same name through
// the same Locker (same session) takes the released record's key again,
// with a new create revision; every other acquisition takes a sequence
// number its session never gave. etcd keeps a deleted key in its index
// until the next compaction, and the read of a name's records that goes
// with every create walks the deleted keys under the name's prefix too:
// with a new key per acquisition, a lock taken a hundred times a second
// on a cluster compacted hourly would make each create walk up to
// 360,000 dead keys by the end of the hour. With the key reused, the
// history of a lock taken over and over by a few Lockers is a few keys
// with many revisions, which a read at the current revision does not
// walk (the layout of etcd's concurrency package, whose key is the
// session lease alone, has the same property). A key is reused only when
// nothing can write it any more: its create was answered, and the
// Release's own transaction deleted it and its lock-delay marker; the
// key of a lost, revoked or discarded record, or of one whose create went
// unanswered, is never used again by its session. The deletes that may
// still be in flight for a reused key (a Release sent again after an
// answer was lost, a [Locker.Revoke]) compare the record's create
// revision, so they cannot delete the record that took the key over; and
// [Lease.IsHeld] compares it too. A Locker keeps at most 4096 names' keys for
// reuse. So a record key names a request of one session, not one
// acquisition: tell grants apart by their tokens.
//
// # Lock-delay
//
// With [WithLockDelay](d) (lock_delay=d in a URL), a grant whose lease
// ends without a clean Release delays the next grant of its name by d,
// so that writes its holder still had in flight drain before anyone else
// holds the lock; after a clean Release the next grant is immediate.
//
// Each acquisition of such a Locker puts its marker in the transaction
// that creates its record, and every read that can confirm a grant also
// reads the name's markers and records. Release deletes the record and its
// marker in one transaction, so a clean release and its absence of delay
// are decided atomically, and a releaser that dies right after has still
// released cleanly. A marker whose record is gone was left by an
// acquisition that did not end with a clean Release (the session lease
// expired or was revoked, the record was revoked, the process was killed,
// the Locker was closed while it held the lock, or a Release whose delete
// went unconfirmed and was finished in the background): a grantee whose
// confirming read shows one waits d from the moment that read was
// answered, which is after the record disappeared, then deletes such
// markers in a transaction guarded by its record. The Release of a lease
// already lost leaves the marker. An acquisition that fails or is
// cancelled before its Acquire returned a lease deletes the marker with
// its record: no lease was granted, so no holder's writes can be in
// flight. Every uncertainty errs toward waiting:
//
//   - a grant that finds a marker left by a crash long ago waits the full
//     d (a marker cannot tell when its record went);
//   - a waiter whose session ended (or whose process was killed) before
//     its turn leaves its marker too, and the next grant waits d for it
//     (a marker cannot tell whether its record was ever granted);
//   - the delay is that of the Locker being granted: Lockers of one name
//     must all be given the same lock-delay. A Locker without one neither
//     writes nor reads markers, so it is not delayed, and a crash of its
//     holder delays nobody;
//   - TryAcquire (and its shared and semaphore forms) waits out a
//     lock-delay too, rather than leave the name blocked;
//   - while the grantee waits, its record is in the queue: Holder, Holders
//     and Queue show it as the holder, and Observe reports it, although
//     its Acquire has not returned yet.
//
// A lock-delay adds no round trip to an acquisition or a release: the
// marker's put and delete ride on the record's, and its reads on the
// reads that confirm the grant (which grow by the keys of the name's
// records and markers). Only a grant that finds a stale marker sends one
// more request, after its wait. What is left behind: the marker of a name
// whose last acquisition did not end cleanly, until the next grant of
// that name (by a Locker with a lock-delay) deletes it; delete keys under
// "<prefix>#delay/<name>/" to clear it by hand, which cancels that delay.
// The keys written by [PutFenced] are the caller's own, wherever the
// caller puts them.
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
//     or the record is deleted by someone else. That send time is a safe
//     bound even when the client talks to a follower: a follower forwards
//     each keepalive to the leader and answers only after the leader has
//     renewed the lease, at its receipt of the request, so no
//     acknowledged keepalive can be older than the leader's view (unlike a
//     ZooKeeper follower, which reports what it heard only every half
//     tick). A new leader renews every lease for at least its full TTL
//     when it takes over. The margin (a fifth of the TTL by default)
//     therefore only has to cover timer delay, scheduling pauses and a
//     local clock slower than the server's, so it must be longer than the
//     longest stall of the holder's process. Measured with a 3-member
//     cluster, TTL 3s, the holder's only member a follower frozen (SIGSTOP)
//     at 30 offsets within the keepalive period: the holder's Done closed
//     before the next grant in every trial, at least 858ms before it
//     (integration/etcdtest, TestFrozenFollower). At TTL 2s on a heavily
//     loaded machine the closest trial left 31ms of the 400ms margin. The
//     same holds when the holder's member is cut off from its peers while
//     the holder still reaches it (a follower both ways or one way, or the
//     leader, which renews no lease without confirming its leadership):
//     TestEtcdPartition, 30 trials per case.
//   - A release deletes only its own record. A cancelled or failed Acquire,
//     a lost lease and Close leave no record behind once the cluster is
//     reachable (at the latest, the session lease's expiry removes them),
//     and a create attempt applied late never brings an ended
//     acquisition's record back after that (see Late creates).
//   - Tokens rise with every grant of a name and are never zero.
//
// # What Observe reports
//
// [Locker.Observe] watches a lock's records from the revision of its first
// read, and etcd delivers every event from a revision on: every grant,
// release and free moment is reported, in order, once each, also across a
// lost connection, a restarted member or a leader change (the watch goes
// on, or is created again, from the last revision delivered). The one
// exception is compaction: when the revisions the observation still needs
// were compacted (it was cut off, or its reader stalled, for longer than
// the cluster keeps history), it reads the current holder, reports it if
// it is not the one reported last, and watches on from there; the grants
// in between are not reported. It ends only when its context does or the
// Locker is closed.
//
// # What is not
//
// A lease can be lost at any moment, and its holder may learn it too late to
// stop a write already on its way. Send [Lease.Token] with every write and
// have the resource enforce it (package fencing), or make writes to etcd
// itself conditional with [Lease.IsHeld]. The local loss deadline assumes
// the local clock does not run slower than the etcd leader's by more than
// the loss margin over one TTL. It also assumes that only the current leader
// expires leases: a leader whose process stalled (stopped, or stuck on its
// disk) for longer than a TTL can, when it resumes and before it notices it
// was replaced, revoke leases that its successor kept alive (etcd issues
// 12528 and 15247; the check etcd added for them is skipped when the member
// looks active, as it does at once after a pause). A lease then ends on the
// server before its local deadline, and only fencing keeps its holder's
// late writes out. Measured with the leader frozen past the TTL
// (integration/etcdtest, TestFrozenLeader, 30 trials per run): the frozen
// holder's Done still closed before the next grant every time, but in 4 to
// 6 trials per run the resumed leader then revoked the new holder's lease,
// which its successor had kept alive.
//
// # Security
//
// TLS and etcd's users and roles work through [lock.Open] and through the
// client given to [New].
//
// With [lock.Open], the URL says it all (see the driver's documentation
// on the "etcd" scheme for every key):
//
//	etcd://app@10.0.0.1:2379/myapp/locks?password_env=APP_ETCD_PASSWORD&ca_file=/etc/app/etcd-ca.crt&cert_file=/etc/app/client.crt&key_file=/etc/app/client.key
//
// With [New], the Locker borrows the caller's *clientv3.Client, and TLS
// and credentials are the client's: set clientv3.Config's TLS (for
// instance from go.etcd.io/etcd/client/pkg/v3/transport.TLSInfo) and its
// Username and Password. The Locker reads neither.
//
// The role an application needs is read and write on its prefix, and
// nothing else: every key the Locker reads or writes, its records and its
// session guards, is under the prefix (see Key layout), and its leases
// need no permission of their own. For the prefix "myapp/locks":
//
//	etcdctl role add myapp-locks
//	etcdctl role grant-permission myapp-locks --prefix=true readwrite myapp/locks/
//	etcdctl user add myapp --new-user-password="$APP_ETCD_PASSWORD"   # or --interactive
//	etcdctl user grant-role myapp myapp-locks
//	etcdctl auth enable                                                  # once per cluster, needs the root user
//
// (With --client-cert-auth, a client certificate whose common name is
// "myapp" also authenticates as that user, without a password.) A
// read-only role lets [Locker.Holder] and [Locker.Holders] work and
// refuses every acquisition.
//
// A call the cluster refuses returns at once, without retrying, an error
// wrapping [lock.ErrPermission]: a role that does not cover the prefix,
// a user that does not exist or no credentials where auth is on, and, for
// a Locker opened by URL, a wrong password (at Open, which logs in) and a
// TLS handshake that fails over a certificate: the members' does not
// verify, or they refuse ours (unknown authority, expired, revoked,
// missing). A refused client writes nothing, so it cannot remove or change
// anyone's record. The Locker of a borrowed client cannot see its TLS
// handshakes: there a refused handshake shows as the client's connection
// error, after the call's context or request timeout ends.
//
// No error or log line of the package repeats a password or the contents
// of a key file, and an error of [lock.Open] names the hosts and the user,
// never the URL's password.
//
// # Opening by URL
//
// Importing the package registers the "etcd" scheme with [lock.Open]:
//
//	etcd://127.0.0.1:2379,127.0.0.1:22379/myapp?ttl=10s&identity=worker-1&loss_margin=2s
//
// See [WithPrefix], [WithTTL], [WithIdentity] and [WithLossMargin] for the
// defaults and limits, and Security above for TLS and credentials
// (ca_file, cert_file, key_file, server_name, tls, password_env and
// "user:password@").
package etcdlock
