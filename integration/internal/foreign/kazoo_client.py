"""Drives one Kazoo lock client for the interop tests.

    python3 kazoo_client.py CONNECT PATH RECIPE SESSION_TIMEOUT_MS [PATTERNS]

RECIPE is lock (kazoo's Lock). Kazoo 2.8's ReadLock deadlocks with
writers (python-zk/kazoo#649, fixed in 2.9), so the read-write recipes
are not offered. PATTERNS, a comma-separated list, is passed as
extra_lock_patterns: the names of other recipes' znodes this client must
count as contenders ahead of it; without it "-lock-" (Curator's
InterProcessMutex, go-zookeeper's zk.Lock, fencelock's curator layout).
Once connected it prints "ready". Then, one command a line on standard
input:

    lock    acquire; print "held CZXID" once acquire has returned, CZXID
            being the czxid of the lock's own znode (Lock.node)
    unlock  release; print "released"
    exit    stop and close the client; print "bye" and exit 0 (so does
            the end of standard input)

Any error is printed to standard error and ends the program with status 2.
"""
import sys

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

RECIPES = {"lock": (Lock, ["-lock-"])}


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def serve(zk, lock, path):
    say("ready")
    for line in sys.stdin:
        cmd = line.rstrip("\n")
        if cmd == "lock":
            if not lock.acquire():
                raise RuntimeError("acquire returned False")
            stat = zk.exists(path + "/" + lock.node)
            if stat is None:
                raise RuntimeError("own znode %s is gone" % lock.node)
            say("held %d" % stat.czxid)
        elif cmd == "unlock":
            if not lock.release():
                raise RuntimeError("release: the lock was not held")
            say("released")
        elif cmd == "exit":
            return
        else:
            raise RuntimeError("unknown command %r" % cmd)


def main():
    if len(sys.argv) not in (5, 6) or sys.argv[3] not in RECIPES:
        sys.stderr.write(
            "usage: kazoo_client.py CONNECT PATH lock "
            "SESSION_TIMEOUT_MS [PATTERNS]\n")
        return 2
    hosts, path, recipe, timeout = sys.argv[1:5]
    cls, patterns = RECIPES[recipe]
    if len(sys.argv) == 6:
        patterns = [p for p in sys.argv[5].split(",") if p]
    zk = KazooClient(hosts=hosts, timeout=int(timeout) / 1000.0)
    try:
        zk.start(timeout=60)
        lock = cls(zk, path, identifier="kazoo-%s" % recipe,
                   extra_lock_patterns=patterns)
        serve(zk, lock, path)
    except Exception as e:  # the harness reads the message on stderr
        sys.stderr.write("kazoo_client: %r\n" % (e,))
        return 2
    finally:
        zk.stop()
        zk.close()
    say("bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
