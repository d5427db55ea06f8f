// Package faulttest checks, Jepsen-style, that fencelock's fencing tokens
// keep a protected resource safe under the faults that break lock recipes
// without them, on both backends, and that no lock is ever left stuck.
//
// The package has only tests. A run starts a real cluster (package
// cluster), a fenced register served over HTTP from the test process
// (fencing/httpfence enforcing the tokens), and several client processes:
// the test binary re-executed, so that a client can be frozen with SIGSTOP
// as a garbage-collection pause would freeze it, or killed outright. Each
// client loops: acquire the lock, read-modify-write the register (append a
// unique id to a set) with its lease's token, release. Every operation is
// logged with a timestamp of the system-wide monotonic clock, which all
// processes share, and its outcome: ok, failed, or unknown.
//
// The checkers then require that
//
//   - the register's history is linearizable for a set with atomic
//     appends (github.com/anishathalye/porcupine), writes of unknown
//     outcome counting as possibly applied at any later point;
//   - no acknowledged append is missing from the final set;
//   - the tokens the register accepted never decrease;
//   - the intervals in which clients believed they held the lock (from the
//     grant to Done) overlap only in three cases, each counted apart, and
//     in each none of the older holder's requests may have been accepted
//     after the newer holder's first. (1) The older holder's client was
//     frozen when a later grant proved its grant over on the server, its
//     belief outlasted that proof by no more than the freeze lasted (a
//     paused process cannot see Done, and is late by at most its pause
//     once thawed), and the register refused a request with its token
//     since the overlap began. (2) On etcd only, the overlap begins within
//     one TTL after the resume of a member that was the leader when it was
//     frozen (etcd issues 12528 and 15247: a resumed former leader may
//     revoke leases its successor kept alive). (3) The revoke-holder
//     fault: the newer grant came after the test called Revoke on the
//     older one (lock.Revoker), whose belief ended within one TTL after
//     its client was thawed (it learns of the revocation only when its
//     Locker hears of the deletion). Readers read the register with their
//     tokens, so an overlap of a writer with a reader is held to the same
//     rules. Any other overlap, on ZooKeeper or after a frozen etcd
//     follower included, is a violation; so is a semaphore excess beyond
//     one frozen holder's own permit, once a grant at the full limit
//     proved that permit over, with its writes refused;
//   - no lock record (etcd key, ZooKeeper ephemeral znode) is left once the
//     clients are gone (lock-delay markers are not records);
//   - with a lock-delay, the grant that follows a crashed holder comes no
//     sooner than the delay after the last listing that still showed the
//     holder's record on the servers;
//   - every client that kept trying was served again after the fault.
//
// In the multi workload a grant is a random set of names (lock.AcquireAll),
// each name with a set of its own in the register: the checks run name by
// name, and every grant must hold exactly its set and end as one.
// TestMultiDeadlockFree runs clients over random overlapping sets, each
// call bounded, and prints the figures of the run.
//
// TestFault runs one short pass of every fault on both backends. The
// partition faults cut the member a holder's client talks to off from its
// peers (a follower or the leader both ways, or a follower's sends only)
// while the client still reaches it; they need a cluster started with
// cluster.WithPeerCuts, which only the process provider can start, and
// are left out, with a message, under the containers provider.
// TestFaultLockDelay runs the holder crashes (killed, or frozen until its
// session expired) with a lock-delay on every client, timing the crashed
// holder's record vanishing, then a control run without a lock-delay that
// the lock-delay check must fail.
// TestFaultControl runs the process-pause fault with the register's token
// check switched off and requires the checkers to fail, which shows they
// catch what they claim to. TestChaos (only with FENCELOCK_CHAOS=1 or the
// -chaos flag) repeats random faults with random timings for
// FENCELOCK_CHAOS_DURATION per backend and prints a summary table.
//
// What this does not show: the register is a single in-process server, so
// its token check and write are trivially atomic; a resource spread over
// several replicas needs its own argument. Clock-rate differences between
// client and server are not injected (every process here reads the same
// clock).
package faulttest
