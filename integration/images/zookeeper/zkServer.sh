#!/bin/sh
# The subset of ZooKeeper's zkServer.sh that the tests use:
#   zkServer.sh start-foreground [config]
# runs the server of the Debian package in the foreground, logging to the
# console, with the configuration file given (default $ZOO_CONF_DIR/zoo.cfg).
# netty-codec is on the class path for the secure client port (Netty's
# SslHandler needs it; Debian's zookeeper.jar manifest does not name it).
set -eu
if [ "${1:-}" != start-foreground ]; then
	echo "usage: zkServer.sh start-foreground [config]" >&2
	exit 2
fi
cfg=${2:-${ZOO_CONF_DIR:-/conf}/zoo.cfg}
exec java -Dzookeeper.root.logger=INFO,CONSOLE -Dzookeeper.log.dir=/tmp ${JVMFLAGS:-} \
	-cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar:/usr/share/java/netty-codec.jar \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
