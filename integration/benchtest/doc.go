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
// A naive design in which every waiter watches the holder's key runs
// next to them as a baseline for the herd check.
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
// overheads, contended, lockdelay, interop, multi, failover, leases,
// waiters, shared, semaphore; interop is the reference recipe, fencelock
// in the layout that contends with it and a fleet mixing the two on the
// same records; multi is lock.AcquireAll against the same names taken one
// by one in sorted order; tls is plain vs TLS with client certificates
// and auth on a second, secured cluster of each backend).
// FENCELOCK_BENCH_CLIENTS (e.g. 2,8,32) and FENCELOCK_BENCH_HOLDS (e.g.
// 0,1ms) narrow the contended rows to those client counts and holds (the
// multi rows to those client counts and one client); the run logs the
// rows it measures and the JSON config records them. One measurement,
// scale, runs only when FENCELOCK_BENCH_ONLY names it: it takes about 5
// minutes on etcd and 10 on ZooKeeper on a 2-core machine.
//
// Every compared row runs in windows (contended_repeats, 3 by default;
// the uncontended and TLS rows in their rounds), the row and the one it
// is compared with taking turns, A B then B A. A fencelock row with a
// reference, and a row with a feature (lock-delay, TLS) against the same
// recipe without it, carries "ratio": the JSON field compared ("metric"),
// which way is "better", A ÷ B "per_window" with the "order" of each
// window, and their "median", "min" and "max"; the tables print the
// median and the range. "windows" holds each window's own figures.
//
// The overheads of metrics, tracing and TLS (JSON "overheads") come from
// two clients on one follower, feature off and on, running blocks of 10
// cycles in the order A B B A, B A A B, ...; each two adjacent blocks are
// a pair, the ratio is the geometric mean of the pairs' ratios of mean
// cycle time, and its 95% interval a Student t-interval on their
// logarithms (blocks' medians and client CPU per cycle beside it). It
// runs until the interval is within ±1% of the ratio or 60s pass
// (FENCELOCK_BENCH_OVERHEAD_CAP, seconds); "met_1pct" says which.
//
// Single-client measurements connect every recipe to the same follower,
// the i-th client of a many-client one to member i mod 3 (a ZooKeeper
// write through a follower takes one hop more). Every grant of a
// many-client row is checked, for its whole hold, to be exclusive (or
// within its limit) and to carry no stale token (register).
//
// What is measured, per backend:
//
//   - uncontended acquire and release by one client: latency, cycles per
//     second, requests per cycle;
//   - contended handoff, 2 to 32 clients on one lock, each its own
//     connection and session, holding each grant 1ms (the default table),
//     not at all (as the recipes' own benchmarks do) and 10ms (2, 8, 32
//     clients): grants per second, wait, handoff, and the requests and
//     watch events per grant on every client's connection (herd check);
//   - lock-delay: that handoff without and with WithLockDelay(1s); the
//     releases are clean, so a handoff of 1s or more fails the run;
//   - several names at once: lock.AcquireAll against sorted one-by-one
//     Acquire of the same sets (multi_test.go): sets/s, latency, requests;
//   - failover: the holder, a child process, killed with SIGKILL; the
//     time to the next grant, with the same TTL for every recipe;
//   - 10,000 leases through one client (heap and goroutines per lease),
//     and 1,000 waiters on one lock (the time to serve them all);
//   - read-write locks (16 readers and 2 writers; 1+1 and 24+8), against
//     etcd's recipes.RWMutex, and semaphores of limit 4 (16, 6 and 36
//     clients; no reference), each grant held 2ms;
//   - scale (only when asked for), on a cluster of its own: 200 Lockers on
//     1,000 names (grants, keepalives, server CPU and memory from /proc),
//     then 100,000 leases through one connection, next to the reference.
package benchtest
