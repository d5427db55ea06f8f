#!/usr/bin/env bash
# Builds the local server images used by the containers provider of the
# integration harness (FENCELOCK_PROVIDER=containers) on machines that cannot
# pull the official ones:
#
#   fencelock-etcd:local       FROM scratch + the static etcd binary that
#                              `make deps` builds (integration/.cache/bin/etcd)
#   fencelock-zookeeper:local  a Debian bookworm rootfs (debootstrap minbase,
#                              openjdk-17-jre-headless, zookeeper) plus a
#                              wrapper that accepts the official image's
#                              command line
#
# Usage: integration/images/build.sh [etcd] [zookeeper]   (default: both)
#
# Idempotent: an image is rebuilt only when its inputs changed (recorded in
# an image label), and the debootstrap rootfs is cached as a tarball in
# integration/.cache/images. Progress goes to stderr; the names of the
# images, built or already up to date, go to stdout, one per line.
#
# Environment:
#   FENCELOCK_ETCD_BIN        etcd binary (default integration/.cache/bin/etcd)
#   FENCELOCK_ETCD_IMAGE      etcd image name (default fencelock-etcd:local)
#   FENCELOCK_ZK_IMAGE        ZooKeeper image name (default fencelock-zookeeper:local)
#   FENCELOCK_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the one
#                             apt on this machine uses for bookworm)
#
# Use the images with
#   FENCELOCK_PROVIDER=containers FENCELOCK_ETCD_IMAGE=fencelock-etcd:local \
#   FENCELOCK_ZK_IMAGE=fencelock-zookeeper:local go test ./...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
integration=$(dirname "$here")
cache="$integration/.cache/images"
suite=bookworm
etcd_bin=${FENCELOCK_ETCD_BIN:-$integration/.cache/bin/etcd}
etcd_image=${FENCELOCK_ETCD_IMAGE:-fencelock-etcd:local}
zk_image=${FENCELOCK_ZK_IMAGE:-fencelock-zookeeper:local}
zk_base=fencelock-zookeeper-base:local
zk_packages=openjdk-17-jre-headless,zookeeper

# The legacy builder needs neither buildx nor network access for these
# Dockerfiles (no RUN steps, local base images).
export DOCKER_BUILDKIT=0

log() { echo "build.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# image_id IMAGE prints the ID of IMAGE, or nothing when it does not exist.
image_id() {
	docker image inspect --format '{{ .Id }}' "$1" 2>/dev/null || true
}

# drop_old OLD_ID removes an image that a rebuild has left without a tag.
drop_old() {
	[[ -n $1 ]] || return 0
	if [[ -z $(docker image inspect --format '{{ join .RepoTags "," }}' "$1" 2>/dev/null) ]]; then
		docker rmi "$1" >/dev/null 2>&1 || true
	fi
}

# label IMAGE KEY prints the value of label KEY of IMAGE, or nothing when
# the image does not exist.
label() {
	docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# debian_mirror prints the URI apt uses for the Debian suite $suite, from the
# one-line (*.list) or deb822 (*.sources) files under /etc/apt.
debian_mirror() {
	if [[ -n ${FENCELOCK_DEBIAN_MIRROR:-} ]]; then
		echo "$FENCELOCK_DEBIAN_MIRROR"
		return
	fi
	local files=() f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] && files+=("$f")
	done
	((${#files[@]})) || die "no apt sources under /etc/apt; set FENCELOCK_DEBIAN_MIRROR"
	awk -v suite="$suite" '
		function flush(   n, i, s) {
			if (found) exit
			if (uris != "" && (types == "" || types ~ /(^| )deb( |$)/)) {
				n = split(suites, s, " ")
				for (i = 1; i <= n; i++) if (s[i] == suite) { split(uris, u, " "); print u[1]; found = 1; exit }
			}
			uris = ""; suites = ""; types = ""
		}
		FILENAME != current { flush(); current = FILENAME }
		FILENAME ~ /\.sources$/ {
			if ($0 ~ /^[ \t]*$/) { flush(); next }
			if ($1 == "URIs:") { uris = $2; for (i = 3; i <= NF; i++) uris = uris " " $i }
			if ($1 == "Suites:") { suites = $2; for (i = 3; i <= NF; i++) suites = suites " " $i }
			if ($1 == "Types:") { types = $2; for (i = 3; i <= NF; i++) types = types " " $i }
			next
		}
		$1 == "deb" {
			i = 2
			if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
			if ($(i + 1) == suite) { print $i; found = 1; exit }
		}
		END { flush() }
	' "${files[@]}"
}

build_etcd() {
	[[ -x $etcd_bin ]] || die "no etcd binary at $etcd_bin; run 'make deps' first (or set FENCELOCK_ETCD_BIN)"
	local sum
	sum=$( (sha256sum "$etcd_bin" "$here/etcd/Dockerfile" | cut -d' ' -f1) | sha256sum | cut -d' ' -f1)
	if [[ $(label "$etcd_image" fencelock.inputs) == "$sum" ]]; then
		log "$etcd_image is up to date"
		echo "$etcd_image"
		return
	fi
	local ctx old
	old=$(image_id "$etcd_image")
	ctx=$(mktemp -d)
	cp "$here/etcd/Dockerfile" "$etcd_bin" "$ctx/"
	log "building $etcd_image from $etcd_bin"
	if ! docker build --quiet --label "fencelock.inputs=$sum" -t "$etcd_image" "$ctx" >/dev/null; then
		rm -rf "$ctx"
		die "docker build of $etcd_image failed"
	fi
	rm -rf "$ctx"
	drop_old "$old"
	echo "$etcd_image"
}

# zk_rootfs makes sure $cache/zookeeper-rootfs-$suite.tar exists.
zk_rootfs() {
	local tarball="$cache/zookeeper-rootfs-$suite.tar"
	if [[ -s $tarball && $(cat "$tarball.packages" 2>/dev/null) == "$zk_packages" ]]; then
		log "using cached rootfs $tarball"
		return
	fi
	if ! command -v debootstrap >/dev/null; then
		[[ $(id -u) == 0 ]] || die "debootstrap is not installed (apt-get install debootstrap)"
		log "installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
	fi
	local mirror
	mirror=$(debian_mirror)
	[[ -n $mirror ]] || die "no Debian $suite mirror in /etc/apt; set FENCELOCK_DEBIAN_MIRROR"
	local dir
	dir=$(mktemp -d)
	log "debootstrap $suite from $mirror into $dir (about a minute)"
	if ! debootstrap --variant=minbase --include="$zk_packages" "$suite" "$dir" "$mirror" >"$dir.log" 2>&1; then
		tail -n 20 "$dir.log" >&2
		rm -rf "$dir" "$dir.log"
		die "debootstrap failed"
	fi
	rm -f "$dir.log"
	# What the server does not need: package caches, documentation, locales.
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
		"$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
	mkdir -p "$dir/conf" "$dir/data" "$cache"
	tar --numeric-owner -C "$dir" -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	echo "$zk_packages" >"$tarball.packages"
	rm -rf "$dir"
}

build_zookeeper() {
	local sum
	sum=$( (sha256sum "$here"/zookeeper/* | cut -d' ' -f1; echo "$suite $zk_packages") | sha256sum | cut -d' ' -f1)
	if [[ $(label "$zk_image" fencelock.inputs) == "$sum" ]] && docker image inspect "$zk_base" >/dev/null 2>&1; then
		log "$zk_image is up to date"
		echo "$zk_image"
		return
	fi
	local old old_base
	old=$(image_id "$zk_image")
	old_base=$(image_id "$zk_base")
	if [[ $(label "$zk_base" fencelock.packages) != "$suite $zk_packages" ]]; then
		zk_rootfs
		log "importing $zk_base"
		docker import --change "LABEL fencelock.packages=\"$suite $zk_packages\"" \
			"$cache/zookeeper-rootfs-$suite.tar" "$zk_base" >/dev/null
	fi
	log "building $zk_image"
	docker build --quiet --build-arg "BASE=$zk_base" --label "fencelock.inputs=$sum" \
		-t "$zk_image" "$here/zookeeper" >/dev/null || die "docker build of $zk_image failed"
	drop_old "$old"
	drop_old "$old_base"
	echo "$zk_image"
}

docker info >/dev/null 2>&1 || die "the Docker engine is not reachable (start dockerd, e.g. dockerd --bridge=none --iptables=false --ip6tables=false)"

targets=("$@")
((${#targets[@]})) || targets=(etcd zookeeper)
for target in "${targets[@]}"; do
	case $target in
	etcd) build_etcd ;;
	zookeeper) build_zookeeper ;;
	*) die "unknown image $target (want etcd or zookeeper)" ;;
	esac
done
