// Package benchtest measures fencelock side by side with the lock recipes
// users would otherwise pick, on the same real 3-member etcd cluster and
// 3-server ZooKeeper ensemble, in one run:
//
//   - on etcd: package etcdlock, etcd's own concurrency.Mutex (the
//     reference recipe) and a bare Put and Delete (the floor: one write to
//     acquire, one to release);
//   - on ZooKeeper: package zklock, go-zookeeper's zk.Lock (the reference)
//     and a bare create and delete of an ephemeral sequential znode (the
//     floor).
//
// A naive design in which every waiter watches the holder's key (so a
// release wakes them all) runs next to them as a sanity baseline for the
// herd check.
//
// The run is the test TestBench, which does nothing unless
// FENCELOCK_BENCH=1:
//
//	cd integration && FENCELOCK_BENCH=1 go test -run '^TestBench$' -timeout 60m -v ./benchtest
//
// It prints one table per backend, every fencelock figure with its ratio to
// the reference recipe measured in the same run, and writes the figures as
// JSON to FENCELOCK_BENCH_OUT (default integration/bench-results.json; a
// relative path is taken from the integration directory) and the tables
// next to it (the same name ending in .txt); the command in
// integration/benchtest/charts draws the JSON as SVG charts (make charts).
// FENCELOCK_BENCH_QUICK=1 shrinks every measurement for a smoke run,
// FENCELOCK_BENCH_BACKENDS=etcd (or zookeeper) runs one backend only, and
// FENCELOCK_BENCH_ONLY lists the measurements to run (uncontended, tls,
// contended, lockdelay, failover, leases, waiters, shared, semaphore; tls
// is plain vs TLS with client certificates and auth on a second, secured
// cluster of each backend). One measurement, scale, runs only when
// FENCELOCK_BENCH_ONLY names it, never in the default set: it takes about
// 5 minutes on etcd and 10 on ZooKeeper on a 2-core machine.
//
// Recipes are compared on the same servers: single-client measurements
// connect every recipe to the same follower, and the i-th client of a
// many-client measurement to member i mod 3, since a ZooKeeper write sent
// through a follower takes one hop more than one sent through the leader.
// Every grant of a many-client row is checked, for its whole hold, to be
// exclusive (or within its limit) and to carry no stale token (register).
//
// What is measured, per backend:
//
//   - uncontended acquire and release by one client: latency percentiles,
//     cycles per second and requests per cycle, in interleaved rounds so
//     that a change in the machine's load hits every recipe alike;
//   - contended handoff with 2 to 32 clients on one lock, each with its
//     own connection and session, looping acquire, hold, release, holding
//     each grant 1ms (the default table), not at all (as the recipes' own
//     benchmarks do) and 10ms (2, 8 and 32 clients): grants per second,
//     wait from the acquire call to the grant, handoff from the start of
//     one release to the next grant, and the requests and watch events
//     per grant counted on every client's connection (the herd check);
//   - lock-delay: the contended handoff of the fencelock recipe again,
//     without and with a lock-delay of 1s (WithLockDelay), in alternating
//     order in the same run; every release is clean, so no grant may wait
//     the delay out (a handoff of 1s or more fails the run), and the rows
//     show what writing and reading the markers costs;
//   - failover: the holder runs in a child process (this test binary run
//     again) that is killed with SIGKILL; the time from the kill to the
//     grant in this process, with the same TTL or session timeout for
//     every recipe;
//   - 10,000 leases held through one client on distinct names: heap and
//     goroutines per lease;
//   - 1,000 waiters on one lock: the time to serve them all;
//   - read-write locks: 16 readers and 2 writers, and 1+1 and 24+8 for the
//     herd check, each holding every grant 2ms, against etcd's
//     recipes.RWMutex (go-zookeeper has none): reads and writes per
//     second, a writer's wait, requests and watch events per grant;
//   - semaphores of limit 4 with 16 clients, and with 2 and 32 waiters
//     beyond the 4 holders: grants per second, handoff, requests and
//     events per grant. No reference: neither client library ships a
//     semaphore;
//   - scale (only when asked for), on a cluster started for it, with
//     ZooKeeper's limit of 60 connections per client address lifted: 200
//     Lockers, each its own connection and session, spread over the
//     members, looping acquire and release on a random one of 1,000 names
//     for a 20s window (grants per second, keepalives or pings per second,
//     and the CPU time and resident memory of every server process, read
//     from /proc when the process provider runs them), then 100,000 leases
//     of distinct names through one connection (goroutines at 0, 10% and
//     100%, heap per lease, the time to acquire them all and the time to
//     close the connection that holds them), each next to the reference.
package benchtest
