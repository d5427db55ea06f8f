// Command etcdctl is etcd's real command-line client
// (go.etcd.io/etcd/etcdctl/v3), built from its Go module like the server
// next to it, so that tests can run "etcdctl lock" against a local
// cluster.
//
// Build it with "make deps", which writes integration/.cache/bin/etcdctl.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
