#!/bin/sh
# Writes a standalone configuration and a myid file when the container was
# given none (as the official image does), then runs the command.
set -eu
conf_dir=${ZOO_CONF_DIR:-/conf}
data_dir=${ZOO_DATA_DIR:-/data}
mkdir -p "$conf_dir" "$data_dir"
if [ ! -f "$conf_dir/zoo.cfg" ]; then
	cat >"$conf_dir/zoo.cfg" <<CFG
dataDir=$data_dir
tickTime=${ZOO_TICK_TIME:-2000}
initLimit=5
syncLimit=2
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}
CFG
fi
if [ ! -f "$data_dir/myid" ]; then
	echo "${ZOO_MY_ID:-1}" >"$data_dir/myid"
fi
exec "$@"
