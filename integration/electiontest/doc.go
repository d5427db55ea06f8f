// Package electiontest runs the leader-election helper of package lock
// ([lock.Election]) and [lock.Do] against real 3-member etcd clusters and
// 3-server ZooKeeper ensembles: one leader at a time, failover after the
// leader's process is killed, resign handover, observation of every leader
// change, and a partitioned leader that stops leading before the next one
// starts. The tests log the measured failover and handover times.
//
// The package has no API; its tests re-execute their own binary as a
// candidate process (see candidateEnv) so that a leader can be killed with
// SIGKILL.
package electiontest
