// Package testhook gives the real-cluster tests in integration/ what they
// need to see inside a Locker (the etcd lease behind a session, the
// ZooKeeper session id, where the records live) without making it public
// API. Each backend sets its hooks in an init function; the hooks take
// `any` because this package cannot import the backends that import it.
// Nothing outside this module can import it.
package testhook
