#!/usr/bin/env bash
# Runs the stages of "make test" and ends with a summary of every test run.
#
# Usage: scripts/test.sh [STAGE...]
#
# Stages, in the order they run (default: all of them):
#   deps        install what is missing (Debian packages), stop Debian's own
#               services, build the etcd server, start a Docker engine if
#               none answers, build the local images
#   vet         go vet and gofmt in every module (make vet)
#   unit        unit tests of the library, the tools and the benchmark
#               charts' program
#   examples    tests of the examples module
#   process     integration tests, clusters of local processes
#   containers  integration tests, clusters of containers
#   fuzz        every Fuzz target of the root module, FUZZTIME each
#
# Environment (see CONTRIBUTING.md, "Set-up and the test run"):
#   FENCELOCK_BACKENDS   etcd,zookeeper (default) or one of them
#   FENCELOCK_PROVIDERS  process,containers (default) or one of them
#   FENCELOCK_RUN        a "go test -run" pattern for the process and
#                        containers stages (development only)
#   FUZZTIME             how long to fuzz each target (default 5s)
#   FENCELOCK_SCREENSHOT=path.png
#                        deps also installs Chromium, and the metrics
#                        example's Prometheus test saves a screenshot of
#                        Prometheus' graph page there (make screenshot)
#   CI=true              a missing server fails tests instead of skipping
#                        them (the summary fails the run either way)
#   FENCELOCK_DEPS_DRY_RUN=1
#                        deps prints what it would install and start, and
#                        runs nothing; FENCELOCK_DEPS_DRY_RUN_MISSING (a
#                        list of package names) pretends they are missing
#   FENCELOCK_DOCKERD_ARGS
#                        more flags for a dockerd started here; with
#                        DOCKER_HOST=unix://PATH, an engine of one's own
#
# A Docker engine started here is stopped, by its PID, before the script
# exits; one that was already running is left alone.
set -euo pipefail

# The whole script is one brace group, so that bash reads all of it before
# running any: editing the file during a run cannot change that run.
{

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cache=$root/integration/.cache
results=$cache/test-results
testsum=$cache/bin/testsum

all_stages=(deps vet unit examples process containers fuzz)

# TestFaulty is not a test of its own: TestSuiteCatchesFaults runs it in
# child processes.
unit_skip='^TestFaulty$'
# Tests that only run when asked for are left out with -skip, and the
# summary says so; TestContainersProvider runs in the containers stage.
process_skip='^(TestBench|TestChaos|TestContainersProvider)$'
optin_note='opt-in tests: TestBench (make bench), TestChaos (make chaos)'

# Tests the containers stage does not repeat, because the process stage
# runs them: the provider-neutral tests of package cluster, and the long
# timing proofs and scale checks (TestFrozen*: 30 frozen-member trials per
# variant; the held-leases goroutine counts; the share of 40 short grants
# an observer reports, TestObserveShortGrants), which measure the library,
# not the way its servers were started. The partition proofs
# (TestZKPartition, TestEtcdPartition, TestPeerCut) need the process
# provider: the harness cuts a member off from its peers by its cgroup.
neutral_skip='^(TestBench|TestChaos|TestFaultCheckers|TestProxy.*|TestLastLines|TestBuildOptions|TestReserveLoopbackPorts|TestFromEnv|TestSkipUnlessRequested|TestFrozen.*|TestObserveShortGrants|TestHeldLeasesGoroutines|TestZKHeldLeasesGoroutines|TestZKPartition|TestEtcdPartition|TestPeerCut)$'

# Local images by default, built by integration/images/build.sh; other
# names (official images, with registry access) are pulled by the tests.
export FENCELOCK_ETCD_IMAGE=${FENCELOCK_ETCD_IMAGE:-fencelock-etcd:local}
export FENCELOCK_ZK_IMAGE=${FENCELOCK_ZK_IMAGE:-fencelock-zookeeper:local}
# Ryuk (the reaper container) cannot be pulled without a registry; the
# harness removes its own containers.
export TESTCONTAINERS_RYUK_DISABLED=true
FUZZTIME=${FUZZTIME:-5s}
dry_run=${FENCELOCK_DEPS_DRY_RUN:-}

say() { printf '\n==> %s\n' "$*"; }
die() {
	printf 'make test: %s\n' "$*" >&2
	exit 1
}
run() {
	printf '+ %s\n' "$*"
	"$@"
}

# --- what was asked for ------------------------------------------------------

# normalize VAR DEFAULT ALLOWED...: prints VAR's comma-separated list
# without spaces, DEFAULT when unset or empty; dies on an unknown name.
normalize() {
	local var=$1 default=$2 value out=() name ok a
	shift 2
	value=${!var:-}
	[[ -n ${value// /} ]] || value=$default
	IFS=, read -r -a names <<<"${value// /}"
	for name in "${names[@]}"; do
		[[ -n $name ]] || continue
		ok=
		for a in "$@"; do
			[[ $name == "$a" ]] && ok=1
		done
		[[ -n $ok ]] || die "$var=${!var}: unknown name \"$name\"; want a comma-separated list of: $*"
		out+=("$name")
	done
	((${#out[@]})) || die "$var is empty"
	local IFS=,
	echo "${out[*]}"
}

backends=$(normalize FENCELOCK_BACKENDS etcd,zookeeper etcd zookeeper)
providers=$(normalize FENCELOCK_PROVIDERS process,containers process containers)
has() { [[ ",$1," == *",$2,"* ]]; }
# The tests see FENCELOCK_BACKENDS only when it leaves a backend out, so
# that their skips say "not requested: FENCELOCK_BACKENDS=etcd".
if [[ $backends == etcd,zookeeper || $backends == zookeeper,etcd ]]; then
	unset FENCELOCK_BACKENDS
else
	export FENCELOCK_BACKENDS=$backends
fi

stages=()
if (($# == 0)); then
	set -- "${all_stages[@]}"
fi
for s in "$@"; do
	known=
	for a in "${all_stages[@]}"; do
		[[ $s == "$a" ]] && known=1
	done
	[[ -n $known ]] || die "unknown stage \"$s\"; want some of: ${all_stages[*]}"
	stages+=("$s")
done
wants() {
	local s
	for s in "${stages[@]}"; do
		[[ $s == "$1" ]] && return 0
	done
	return 1
}
# The provider stages run only when their provider is asked for. "make
# deps" alone prepares for every provider asked for.
deps_only=
[[ ${stages[*]} == deps ]] && deps_only=1
wants_process() { wants process && has "$providers" process; }
wants_containers() { wants containers && has "$providers" containers; }
prepare_process() { { [[ -n $deps_only ]] || wants process; } && has "$providers" process; }
prepare_containers() { { [[ -n $deps_only ]] || wants containers; } && has "$providers" containers; }

# --- deps --------------------------------------------------------------------

dockerd_pid=
policy_rc_d=

cleanup() {
	local status=$?
	if [[ -n $policy_rc_d ]]; then
		rm -f "$policy_rc_d"
	fi
	if [[ -n $dockerd_pid ]]; then
		say "stopping the Docker engine started by this run (PID $dockerd_pid)"
		kill "$dockerd_pid" 2>/dev/null || true
		wait "$dockerd_pid" 2>/dev/null || true
		rm -f "$cache/dockerd.pid"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# needed_packages prints the Debian packages the requested stages need
# that are not installed, judged by the files the tests use.
needed_packages() {
	local need=()
	if prepare_process; then
		if has "$backends" zookeeper && [[ -z ${FENCELOCK_ZK_CLASSPATH:-} ]] && [[ ! -f /usr/share/java/zookeeper.jar ]]; then
			need+=(zookeeper)
		fi
		# The interop tests (integration/interoptest) run the ZooKeeper
		# lock recipes users already run: Curator, whose client program
		# they compile with javac, and Kazoo, under Debian's python3
		# (integration/internal/foreign).
		if has "$backends" zookeeper; then
			if [[ -z ${FENCELOCK_CURATOR_CLASSPATH:-} ]]; then
				local jar
				for jar in recipes framework client; do
					[[ -f /usr/share/java/curator-$jar.jar ]] || need+=("libcurator-$jar-java")
				done
			fi
			if ! command -v javac >/dev/null && [[ ! -x ${JAVA_HOME:-/nonexistent}/bin/javac ]]; then
				need+=(default-jdk-headless)
			fi
			if [[ -z ${FENCELOCK_KAZOO_PYTHON:-} ]] && [[ ! -f /usr/lib/python3/dist-packages/kazoo/recipe/lock.py ]]; then
				need+=(python3-kazoo)
			fi
		fi
		# The partition tests cut a member off from its peers with it
		# (integration/cluster/peercut.go).
		if ! command -v iptables >/dev/null && [[ ! -x /usr/sbin/iptables ]]; then
			need+=(iptables)
		fi
		if [[ -z ${FENCELOCK_POSTGRES_BIN:-} ]] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
			need+=(postgresql)
		fi
		# The metrics example's test scrapes it with a real Prometheus.
		if [[ -z ${FENCELOCK_PROMETHEUS_BIN:-} ]] && [[ ! -x /usr/bin/prometheus ]]; then
			need+=(prometheus)
		fi
		# make screenshot: the Prometheus graph page, taken by Chromium.
		if [[ -n ${FENCELOCK_SCREENSHOT:-} ]] && [[ -z ${FENCELOCK_CHROMIUM_BIN:-} ]] && [[ ! -x /usr/bin/chromium ]]; then
			need+=(chromium)
		fi
	fi
	if prepare_containers; then
		if ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
			need+=(docker.io)
		fi
		if has "$backends" zookeeper && ! command -v debootstrap >/dev/null && [[ ! -x /usr/sbin/debootstrap ]]; then
			need+=(debootstrap)
		fi
	fi
	if [[ -n $dry_run && -n ${FENCELOCK_DEPS_DRY_RUN_MISSING:-} ]]; then
		# shellcheck disable=SC2206 # a list of package names
		need+=(${FENCELOCK_DEPS_DRY_RUN_MISSING//,/ })
	fi
	echo "${need[*]}"
}

subset_hint='or run only what this machine can: make test-unit, or FENCELOCK_PROVIDERS=process|containers and FENCELOCK_BACKENDS=etcd|zookeeper (CONTRIBUTING.md, "Set-up and the test run")'

# install_packages installs the missing packages, or dies with one message
# that says what is missing and how to install it.
install_packages() {
	local missing
	read -r -a missing <<<"$(needed_packages)"
	if ((${#missing[@]} == 0)); then
		echo "Debian packages: nothing missing"
		return
	fi
	local cmd="apt-get update && apt-get install -y ${missing[*]}"
	if [[ $(id -u) != 0 ]]; then
		die "missing ${missing[*]}; only root can install them: run make test as root, or install them with \"$cmd\", $subset_hint"
	fi
	if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
		die "missing ${missing[*]}, and this is not a Debian or Ubuntu machine (no apt-get): install the equivalent packages with your package manager, $subset_hint"
	fi
	if [[ -n $dry_run ]]; then
		echo "dry run: would install ${missing[*]} with: DEBIAN_FRONTEND=noninteractive apt-get update -q --error-on=any && apt-get install -y -q ${missing[*]} (policy-rc.d keeping their services stopped)"
		return
	fi
	say "installing Debian packages: ${missing[*]}"
	# Keep the packages' init scripts from starting their services (a
	# ZooKeeper on 2181, a PostgreSQL on 5432, a dockerd with a bridge):
	# invoke-rc.d asks policy-rc.d first, and 101 means "not allowed".
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		policy_rc_d=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' >"$policy_rc_d"
		chmod 755 "$policy_rc_d"
	fi
	export DEBIAN_FRONTEND=noninteractive
	local log=$cache/apt.log
	printf '+ apt-get update -q --error-on=any (log: %s)\n' "$log"
	if ! apt-get update -q --error-on=any >"$log" 2>&1; then
		die "missing ${missing[*]}, and the Debian package mirror cannot be reached (apt-get update failed, see $log): restore access to the mirror and run \"$cmd\", $subset_hint"
	fi
	run apt-get install -y -q "${missing[@]}"
	if [[ -n $policy_rc_d ]]; then
		rm -f "$policy_rc_d"
		policy_rc_d=
	fi
	local still
	still=$(needed_packages)
	if [[ -n $still ]]; then
		die "apt-get installed ${missing[*]}, but what the tests need from $still is still not there (see CONTRIBUTING.md, \"Set-up and the test run\", for the files each provider uses)"
	fi
}

# stop_debian_services stops the services the packages may have left
# running: tests start their own servers on free ports.
stop_debian_services() {
	[[ $(id -u) == 0 ]] || return 0
	local svc pidfile pid
	for svc in zookeeper postgresql prometheus; do
		if [[ -x /etc/init.d/$svc ]] && service "$svc" status >/dev/null 2>&1; then
			if [[ -n $dry_run ]]; then
				echo "dry run: would run: service $svc stop"
			else
				run service "$svc" stop || true
			fi
		fi
	done
	# PostgreSQL clusters can run without the service wrapper knowing.
	if command -v pg_lsclusters >/dev/null; then
		while read -r version name _ status _; do
			if [[ $status == online* ]]; then
				if [[ -n $dry_run ]]; then
					echo "dry run: would run: pg_ctlcluster $version $name stop"
				else
					run pg_ctlcluster "$version" "$name" stop || true
				fi
			fi
		done < <(pg_lsclusters --no-header 2>/dev/null || true)
	fi
	# The Debian zookeeper service records its PID in one of these.
	for pidfile in /run/zookeeper/zookeeper_server.pid /run/zookeeper/zookeeper.pid /var/run/zookeeper/zookeeper_server.pid; do
		if [[ -f $pidfile ]]; then
			pid=$(<"$pidfile")
			if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
				if [[ -n $dry_run ]]; then
					echo "dry run: would run: kill $pid (Debian's zookeeper service)"
				else
					run kill "$pid"
				fi
			fi
		fi
	done
}

# start_dockerd makes sure a Docker engine answers: an engine already
# running is used as it is; otherwise one is started without bridge or
# iptables rules (containers use host networking) and stopped on exit.
start_dockerd() {
	if docker info >/dev/null 2>&1; then
		echo "Docker engine: already running, using it"
		return
	fi
	if [[ $(id -u) != 0 ]]; then
		die "the Docker engine does not answer (docker info failed), and only root can start one: run make test as root, or start it with \"dockerd --bridge=none --iptables=false --ip6tables=false &\" (or give this user access to it), $subset_hint"
	fi
	if [[ -n $dry_run ]]; then
		echo "dry run: would start: dockerd --bridge=none --iptables=false --ip6tables=false"
		return
	fi
	local log=$cache/dockerd.log i args=(--bridge=none --iptables=false --ip6tables=false)
	# An engine of one's own next to another: DOCKER_HOST names its
	# socket, FENCELOCK_DOCKERD_ARGS its other paths (--data-root,
	# --exec-root, --pidfile).
	if [[ ${DOCKER_HOST:-} == unix://* ]]; then
		args+=(-H "$DOCKER_HOST")
	fi
	if [[ -n ${FENCELOCK_DOCKERD_ARGS:-} ]]; then
		local extra
		read -r -a extra <<<"$FENCELOCK_DOCKERD_ARGS"
		args+=("${extra[@]}")
	fi
	printf '+ dockerd %s >%s 2>&1 &\n' "${args[*]}" "$log"
	dockerd "${args[@]}" >"$log" 2>&1 &
	dockerd_pid=$!
	echo "$dockerd_pid" >"$cache/dockerd.pid"
	for ((i = 0; ; i++)); do
		if docker info >/dev/null 2>&1; then
			break
		fi
		if ! kill -0 "$dockerd_pid" 2>/dev/null; then
			wait "$dockerd_pid" || true
			dockerd_pid=
			tail -n 20 "$log" >&2 || true
			die "dockerd exited while starting; see $log"
		fi
		if ((i >= 120)); then
			tail -n 20 "$log" >&2 || true
			die "dockerd did not answer within 60s; see $log"
		fi
		sleep 0.5
	done
	echo "Docker engine: started (PID $dockerd_pid), stopped again when this run ends"
}

# stage_deps does all the set-up the requested stages need.
stage_deps() {
	local t0=$SECONDS t
	install_packages
	stop_debian_services
	t=$SECONDS
	if prepare_containers; then
		start_dockerd
	fi
	local t_dockerd=$((SECONDS - t))
	t=$SECONDS
	if prepare_process || prepare_containers; then
		if [[ -n $dry_run ]]; then
			echo "dry run: would run: make integration/.cache/bin/etcd integration/.cache/bin/etcdctl"
		else
			run make --no-print-directory -s "integration/.cache/bin/etcd" "integration/.cache/bin/etcdctl"
		fi
	fi
	local t_etcd=$((SECONDS - t))
	t=$SECONDS
	if prepare_containers; then
		local images=()
		if has "$backends" etcd && [[ $FENCELOCK_ETCD_IMAGE == *:local ]]; then
			images+=(etcd)
		fi
		if has "$backends" zookeeper && [[ $FENCELOCK_ZK_IMAGE == *:local ]]; then
			images+=(zookeeper)
		fi
		if ((${#images[@]} == 0)); then
			echo "images: none to build (images not named :local are pulled by the tests)"
		elif [[ -n $dry_run ]]; then
			echo "dry run: would run: integration/images/build.sh ${images[*]}"
		else
			run integration/images/build.sh "${images[@]}" >/dev/null
		fi
	fi
	echo "deps: $((SECONDS - t0))s (Docker engine ${t_dockerd}s, etcd server ${t_etcd}s, images $((SECONDS - t))s)"
}

# --- stages ------------------------------------------------------------------

# record STAGE SECONDS STATUS notes a stage that is not a go test run.
record() {
	"$testsum" record -dir "$results" -stage "$1" -seconds "$2" -exit "$3"
}

# gotest STAGE PROVIDER DIR ARGS...: go test -json ARGS in DIR, as a step
# of STAGE.
gotest() {
	local stage=$1 provider=$2 dir=$3
	shift 3
	(cd "$dir" && "$testsum" run -dir "$results" -stage "$stage" -provider "$provider" -- go test -json "$@")
}

run_filter=()
if [[ -n ${FENCELOCK_RUN:-} ]]; then
	run_filter=(-run "$FENCELOCK_RUN")
fi

failed=0
step_failed() { failed=1; }

say "make test: stages ${stages[*]}; FENCELOCK_BACKENDS=$backends FENCELOCK_PROVIDERS=$providers${FENCELOCK_RUN:+ FENCELOCK_RUN=$FENCELOCK_RUN}${CI:+ CI=$CI}"

# Set-up comes first, so that a machine that cannot run the tests is told
# so before anything is built.
# The cache holds the Docker engine's log and PID file, the etcd server
# and the test results; a fresh clone has none of it.
mkdir -p "$cache/bin"
deps_seconds=
if wants deps; then
	say "deps"
	t=$SECONDS
	stage_deps
	if [[ -n $dry_run ]]; then
		exit 0
	fi
	deps_seconds=$((SECONDS - t))
fi

# The summary tool, a module of its own with no requirements.
(cd integration/tools/testsum && go build -o "$testsum" .)
rm -rf "$results"
mkdir -p "$results"
if [[ -n $deps_seconds ]]; then
	record deps "$deps_seconds" 0
fi

if wants vet; then
	say "vet"
	t=$SECONDS
	status=0
	make --no-print-directory vet || status=$?
	record vet $((SECONDS - t)) "$status"
fi

if wants unit; then
	say "unit tests"
	gotest unit "" . -race -skip "$unit_skip" ./... || step_failed
	gotest unit "" integration/tools/testsum -race ./... || step_failed
	# The benchmark charts' program needs no cluster.
	gotest unit "" integration -race ./benchtest/charts || step_failed
fi

if wants examples; then
	say "examples"
	gotest examples "" examples -race -count=1 ./... || step_failed
fi

# -count=1: results against real servers are never taken from the cache.
if wants_process; then
	say "integration tests, process provider"
	FENCELOCK_PROVIDER=process gotest process process integration -race -count=1 -timeout 40m \
		-skip "$process_skip" "${run_filter[@]}" ./... || step_failed
fi

if wants_containers; then
	say "integration tests, containers provider"
	FENCELOCK_PROVIDER=containers gotest containers containers integration -race -count=1 -timeout 30m \
		-skip "$neutral_skip" "${run_filter[@]}" ./cluster ./etcdtest ./zktest ./guardtest ./electiontest ./interoptest || step_failed
	# The short fault pass: kill, pause (docker pause) and restart members,
	# freeze and kill clients, with the fenced register checking. The
	# read-write, semaphore and multi workloads run in the process stage only
	# (see faultWorkloads in integration/faulttest).
	fault_run=(-run '^TestFault$')
	((${#run_filter[@]})) && fault_run=("${run_filter[@]}")
	FENCELOCK_FAULT_WORKLOADS=${FENCELOCK_FAULT_WORKLOADS:-mutex} \
		FENCELOCK_PROVIDER=containers gotest containers containers integration -race -count=1 -timeout 30m \
		"${fault_run[@]}" ./faulttest || step_failed
fi

if wants fuzz; then
	say "fuzz, $FUZZTIME per target"
	(cd "$root" && "$testsum" fuzz -dir "$results" -fuzztime "$FUZZTIME" -race ./...) || step_failed
fi

# --- summary -----------------------------------------------------------------

left_out=()
not_run=()
for s in "${all_stages[@]}"; do
	wants "$s" || not_run+=("$s")
done
if ((${#not_run[@]})); then
	left_out+=(-left-out "stages ${not_run[*]}: not part of this target (make test runs every stage)")
fi
for p in process containers; do
	if wants "$p" && ! has "$providers" "$p"; then
		left_out+=(-left-out "$p provider, stage $p (FENCELOCK_PROVIDERS=$providers)")
	fi
done
for b in etcd zookeeper; do
	if ! has "$backends" "$b"; then
		left_out+=(-left-out "$b backend: its tests skip with \"not requested\" (FENCELOCK_BACKENDS=$backends)")
	fi
done
if [[ -n ${FENCELOCK_RUN:-} ]]; then
	left_out+=(-left-out "integration tests not matching FENCELOCK_RUN=$FENCELOCK_RUN")
fi
if wants process || wants containers; then
	left_out+=(-left-out "$optin_note")
fi
if wants_containers; then
	left_out+=(-left-out "containers stage: TestFault runs the workloads FENCELOCK_FAULT_WORKLOADS=${FENCELOCK_FAULT_WORKLOADS:-mutex} (the process stage runs mutex, rw, semaphore and multi) and leaves out the partition faults (partition-*: the harness cuts a member off from its peers by its cgroup; the process stage runs them)")
fi

status=0
"$testsum" report -dir "$results" -stages "$(
	IFS=,
	echo "${all_stages[*]}"
)" "${left_out[@]}" || status=$?
if ((status == 0 && failed != 0)); then
	echo "a step failed (see above) although the summary found no failed test"
	status=1
fi
echo "results (go test -json): $results"
exit "$status"
}
