// Package zklock implements fenced locks, read-write locks and counting
// semaphores (package lock) on ZooKeeper with github.com/go-zookeeper/zk.
//
// # Layout
//
// A Locker keeps its locks under a root znode (default [DefaultRoot]),
// created with its ancestors as persistent znodes when missing. [WithRoot]
// accepts the same paths as etcdlock.WithPrefix, with or without leading
// and trailing slashes ("/app/locks", "app/locks/"); ZooKeeper paths are
// absolute, so they all name /app/locks, as do the URLs
// "zk://h:2181/app/locks" and "zk://h:2181//app/locks". The lock
// called "jobs/nightly" lives in root/jobs/nightly; that znode and
// root/jobs are container znodes, created on demand, which the server
// deletes once they are empty, so no per-lock znode is left behind. Each
// acquisition creates one ephemeral sequential child named
// "~<random>~<sequence>" (an exclusive request), "~<random>~r~<sequence>"
// (shared) or "~<random>~s<limit>~<sequence>" (a semaphore permit),
// holding the Locker's identity. '~' cannot appear in
// a lock name, so the children of lock "a" and the parent of lock "a/b"
// never mix; children that do not match the pattern are ignored.
//
// # Lock-delay
//
// With [WithLockDelay](d) (lock_delay=d in a URL), a grant whose lease
// ends without a clean Release delays the next grant of its name by d,
// so that writes its holder still had in flight drain before anyone else
// holds the lock; after a clean Release the next grant is immediate.
//
// Each acquisition of such a Locker creates, in the multi that creates its
// znode, a persistent marker next to it: a child of the lock's parent
// named "~delay~" followed by the znode's protection prefix (its child
// name without the sequence number), holding the identity; it does not
// match the lock znodes' pattern, so queue listings, Holder, Holders,
// Queue and Observe ignore it. Release deletes the znode and its marker
// in one multi, so a clean release and its absence of delay are decided
// atomically, and a releaser that dies right after has still released
// cleanly. The listing that admits an acquisition shows the markers too:
// one whose znode is gone (its session expired, it was revoked, its
// process was killed, its Locker was closed while it held the lock, or its
// Release went unconfirmed and was finished in the background) makes the
// grantee wait d from the moment that listing was answered, which is after
// the znode disappeared, then delete such markers in one multi checked
// against its own znode. An acquisition that fails or is cancelled before
// its Acquire returned a lease deletes its marker right after its znode:
// no lease was granted, so no holder's writes can be in flight. Every
// uncertainty errs toward waiting:
//
//   - a grant that finds a marker left by a crash long ago waits the full
//     d (a marker cannot tell when its znode went);
//   - a waiter whose session ended (or whose process was killed) before
//     its turn leaves its marker too, and the next grant waits d for it
//     (a marker cannot tell whether its znode was ever granted);
//   - the delay is that of the Locker being granted: Lockers of one name
//     must all be given the same lock-delay. A Locker without one neither
//     writes nor reads markers, so it is not delayed, and a crash of its
//     holder delays nobody;
//   - TryAcquire (and its shared and semaphore forms) waits out a
//     lock-delay too, rather than leave the name blocked;
//   - while the grantee waits, its znode heads the queue: Holder, Holders
//     and Queue show it as the holder, and Observe reports it, although
//     its Acquire has not returned yet.
//
// A lock-delay adds no round trip to an acquisition or a release but one:
// the marker rides on the znode's create and delete, and the markers are
// read in a listing made after the holder went. A contended grant of a
// Locker from [Dial] without a lock-delay needs no such listing (it is
// granted on the release mark, see "ZooKeeper" below), so with a
// lock-delay it costs one request and one round trip more, as every
// contended grant did before the release mark. A grant that finds a stale
// marker sends one more request, after its wait. Markers change the
// parent's child version, which numbers the sequential znodes, so a lock
// with a lock-delay uses up its 2^31 sequence numbers about twice as
// fast, and [Locker.Observe], which infers a vacancy shorter than a round
// trip from that version, reports none for such a lock (it still reports
// every vacancy it lists). What is left behind: the marker of a name whose
// last acquisition did not end cleanly, until the next grant of that name
// (by a Locker with a lock-delay) deletes it; while it exists, the lock's
// container parent is not empty and stays. After a clean Release nothing
// is left, and the server removes the parent as before. Delete the
// "~delay~" children by hand to clear a marker, which cancels that delay.
//
// # Acquisition
//
// The lowest child holds the lock; every other exclusive waiter watches
// only its predecessor, so a release wakes one waiter. Shared and
// semaphore requests follow the rules of [lock.SharedLocker], read from
// the kinds in the listed names: a waiter watches the nearest earlier
// exclusive request; for a semaphore, the limit holders if it is the
// first waiter, else its predecessor, which sets its own data unchanged
// when it is admitted; and it lists again when one goes or is set so. The lowest child says what the name is: a request
// it disagrees with is refused with [lock.ErrIncompatible] and its znode
// deleted. The random prefix makes the
// create "protected": when the connection fails before the reply arrives,
// the Locker looks the znode up by prefix once reconnected in the same
// session and uses it. When ctx ends while the create is in flight, the
// call waits for its reply (bounded by the session timeout, at most 5s)
// and deletes the znode before it returns, so that a cancelled call
// leaves no znode that could appear after it returned and hold the name
// until cleaned up; a create abandoned in flight otherwise (the session
// ended, the Locker closed, no reply within that bound) is deleted when
// its reply comes. A cancelled, failed or interrupted wait deletes its
// znode, and its lock-delay marker if it had created one.
//
// The uncontended path is one round trip: the create's answer carries the
// stat of the lock's parent as the create left it (see Tokens; a Locker
// that may not write the parent lists as well), and a parent with one
// child has only the new znode, which no later request can get ahead of,
// so it is granted without a listing. (With a lock-delay the
// grant still lists, for the markers.)
//
// A Locker from [Dial] hands a lock over without any request between the
// release and the grant. It releases a lease of an exclusive request (a
// lock's, a writer's) with one transaction that sets the znode's data and
// deletes it: the release mark. Nothing else ends a lock znode that way
// (a cancelled wait, an expired session, a revocation, Close or a delete
// by hand delete it plainly). A waiter of such a Locker whose one watched
// znode is an exclusive request watches it with an exists, whose one
// watch fires once: for the data change when the request left as a
// holder, for the deletion otherwise. When the holder's leaving admits
// the waiter (nothing else was queued between them that would keep it
// waiting), a data change grants it at once; a deletion makes it list
// the queue again, unless the watched znode headed the queue at the
// waiter's listing: it was the holder then, and its going admits the
// waiter however it went, so a deletion grants it at once too, as does
// an exists that finds the znode gone already (with two clients the
// holder mostly releases between the waiter's listing and its exists).
// Someone else could set a lock znode's data by hand, or delete the
// waiter's znode while it waits, and the waiter would be granted all the
// same: so a lease granted without a listing after its predecessor went,
// and still held 50ms after its grant (when its own watch is set, see below) lists the queue
// once, and ends with [lock.ErrLost] if the listing does not show it
// admitted. That is the bound given below for a holder's znode deleted by
// someone else right after its grant; the token (older than that of the
// rightful holder, or newer than that of the holder still holding) keeps
// the protected resource safe meanwhile. A contended grant so costs 4
// requests (create, listing, exists, release) and 1 watch event when the
// lock is held for less than 50ms, and 5 and 1 when it is held longer
// (the listing, and the lease's own watch as ever), against 5 and 1 for
// go-zookeeper's Lock; and the next holder learns of a release from the
// event alone, one round trip sooner. A record ahead whose data someone
// else set before the waiter watched it makes the waiter list the queue
// after each change instead.
//
// Other waiters (a Locker from [New], a permit's waiter, one with a
// lock-delay) watch for deletions only. One whose watched znode was the
// last request ahead of it is admitted when that znode's deletion is
// reported, once a read of its own znode confirms that it is still there
// and the same (its czxid): nothing can have joined the queue ahead of
// it, and the read is cheaper than a listing of the whole queue. The
// others list again.
//
// # Tokens
//
// A lease's token is the czxid of its znode: the zxid of the transaction
// that created it. zxids rise with every write of the ensemble, so tokens
// rise with every grant, and keep rising when a lock's parent is deleted
// and created again, where the sequence numbers start over. (They also
// rise across a leader change: the new epoch is in the zxid's high bits.)
//
// The token comes with the create's answer. The create is a multi that
// also sets the data of the lock's parent, to nothing, as it always is:
// the operations of a multi are one transaction with one zxid, and a
// SetData answers with the parent's stat, whose mzxid is that zxid. So a
// grant costs no read of its znode's stat, and the parent's data version
// counts the acquisitions of the name. This needs write permission on the
// parent, which a parent created with the Locker's ACL ([WithACL]) gives;
// a Locker refused it falls back to reading the new znode's stat with its
// first listing, and says so in a debug log line.
//
// # Sessions and loss
//
// A lease lives as long as the session that created its znode, and only
// the ensemble's leader expires sessions. A Locker sends a sync every
// T/12 (T the session timeout), which a follower passes to the leader and
// answers only when the leader does, and keeps the send time of the
// latest sync (or, with [Dial], handshake) the servers answered: the
// latest moment the leader certainly heard of the session. Replies to reads and pings do not count, because a follower
// cut off from the leader goes on giving them. When no sync has been
// answered for T minus the loss margin ([WithLossMargin]; half of T by
// default), the Locker stops trusting the session: its leases end with
// [lock.ErrLost] and its waiting Acquire calls return errors wrapping
// [lock.ErrLost]. That is before the leader can expire the session, and
// so before anyone else can be granted the lock, whether the holder's
// server is frozen, killed, or cut off from its peers while the holder
// still reaches it (a follower both ways or one way, or the leader). The
// arithmetic and the measurements are in docs/design/zookeeper-loss.md;
// TestFrozenFollower and TestZKPartition (integration/zktest) prove it
// in every one of 30 trials per case. A session expiry reported by the
// server ends the leases at once. A shorter disconnection changes
// nothing: the session, its znodes and its waiters' queue positions
// survive it. A leader that stops answering for longer than T/2 (frozen,
// or cut off until an election ends) costs the leases of every session on
// the ensemble, which the Locker cannot tell apart from a leader that
// expires them.
//
// A held lease costs no goroutine: one goroutine of the Locker ends the
// leases of a session it stops trusting, and the watch events on the
// leases' znodes, which go-zookeeper also publishes on the connection's
// event stream, are routed to their leases by path. A lease whose znode
// someone else deletes ends with [lock.ErrLost] as soon as the event
// arrives. The watch on a lease's znode is set 50ms after its grant, so
// that a short critical section costs no watch event for its own release
// (a deletion within those 50ms is found when the watch is set, which
// reads the znode); a waiter sets no watch on its own znode, and learns
// that it went from its next listing of the queue, from the read that
// confirms its admission, or (granted with no listing) when its lease's
// watch is set, with the listing that goes with it. A Locker from [Dial]
// keeps nothing per watch beyond its own table entry: go-zookeeper is
// asked for a plain listing of the znode (a lock znode has no children),
// and the Locker's connection wrapper sets the request's watch flag on
// its way to the server, so go-zookeeper keeps no channel for it (about
// 260 bytes per held lease). The server drops a connection's watches
// with it, and go-zookeeper sets again only those it keeps, so after each
// reconnection in the same session the Locker sets its leases' watches
// again, 32 at a time; a znode deleted meanwhile is then found missing
// and its lease ends. A waiter of a Locker from [Dial] watches its
// predecessor the same way, and each reconnection ends its wait, so that it
// lists the queue again and watches anew. A permit waiter's watch for
// its predecessor's touch and [Locker.Observe]'s watch on a lock's
// parent are set the same way (an observation lists again after each
// reconnection), so go-zookeeper keeps no watch at all for such a
// Locker. That also keeps clear of a data race inside go-zookeeper
// v1.0.4, which sets its own watches again after a reconnection while its
// reading goroutine already runs. (A Locker from [New] does not own the
// connection: its leases', waiters' and observations' watches are
// go-zookeeper's. It reads the caller's event
// channel, from which go-zookeeper drops events when it is full; it also
// looks at its leases' own watches twice a second, so a dropped deletion
// is noticed within about half a second.)
//
// If the connection comes back in the same session after leases were
// declared lost, their znodes (still owned by the session) are deleted so
// the lock is not blocked. The Locker never deletes a znode whose
// ephemeralOwner is another session. When the session is gone,
// go-zookeeper opens a new one on the same connection and the next Acquire
// uses it.
//
// # Security
//
// [WithTLS] (or the URL keys tls, ca_file, cert_file, key_file and
// server_name) speaks TLS to the servers' secure client ports.
// [WithDigest] (or the URL's user information, with the password in it or
// in the environment variable named by password_env) authenticates every
// connection, and go-zookeeper sends the credentials again after each
// reconnect, before any other request. With credentials, what the Locker
// creates is writable by its digest user only and readable by anyone (see
// [WithACL]): other clients cannot queue for, delete or change its
// records. A server's refusal (zk.ErrNoAuth, zk.ErrAuthFailed, a TLS
// handshake refused on either side) is reported as an error wrapping
// [lock.ErrPermission], at once: a refused handshake ends Dial and every
// call waiting for a connection instead of letting them retry until their
// deadline. Errors and log lines never contain the password or key
// material.
//
// # What Observe reports
//
// [Locker.Observe] follows a lock with a child watch on its parent znode
// and a listing after every change, and survives a lost connection, an
// expired session and restarted servers: it lists the children again on
// the new connection or session. go-zookeeper v1.0.4 has no persistent
// watches, so a watch fires once and must be set again by the next
// listing, and a listing shows only the present. Hence:
//
//   - Guaranteed: the state the lock ends up in is reported (once it stops
//     changing, the next listing shows it); what is reported is in grant
//     order, tokens rising, with at most one free state between two
//     holders and no holder twice in a row; a holder whose znode is still
//     there when the first listing after its grant, and the read of its
//     data that follows, are served is reported.
//   - Not guaranteed: a holder that comes and goes between a watch firing
//     and the listing that follows, that is within about one round trip
//     (the event to the client, the listing to the server) plus the
//     client's own delays, or while the observing Locker is disconnected,
//     is not seen. Nor is a free moment that no listing shows and that the
//     parent's child version cannot prove (a hand-over with other queue
//     changes in between).
//
// No duration makes a holder certain to be seen: a paused observer or a
// lost connection widens the gap. Where every grant matters, record the
// grants at the resource, which sees every token through fencing.
//
// # What is not guaranteed
//
// A lease can be lost at any moment, and its holder may learn of it too
// late to stop a write already on its way. Send [Lease.Token] with every
// write and have the resource check it (package fencing), or make the
// write a ZooKeeper multi that starts with [Lease.CheckOp].
//
// The loss deadline relies on the server's defaults: a session timeout of
// at least two ticks (minSessionTimeout) and global sessions
// (localSessionsEnabled=false). A server configured otherwise can expire
// a session sooner than the margin allows.
//
// Grant order follows the 10-digit sequence numbers ZooKeeper appends;
// after 2^31 acquisitions of one lock (without its parent being removed in
// between) they overflow and the order breaks. [Locker.Observe] may skip
// grants shorter than a round trip (see "What Observe reports"). A Locker from [New] keeps
// the same deadline with the session timeout it is given, which must be
// the one the server negotiated. The package needs ZooKeeper 3.5 or later (container znodes).
package zklock
