// Command etcd is the real etcd server (go.etcd.io/etcd/server/v3), built
// from its Go module so that tests can run a local cluster without a
// downloaded release. It lives in a module of its own: the server's
// dependency versions must not constrain the library's.
//
// Build it with "make deps", which writes integration/.cache/bin/etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
