#!/usr/bin/env bash
# zk-image.sh - build a LOCAL STAND-IN for the official zookeeper:3.8 image
# (or zookeeper:3.9, with ZK_IMAGE_VERSION=3.9).
#
# You probably do not need this. zktest/docker and docker-compose.yml are written
# for the official image: `docker pull zookeeper:3.8` from Docker Hub, or
# from your registry's mirror of it, is all a real user needs. This script
# is for machines that reach Debian's package archive but no image registry
# (this project's CI): it builds, from Debian packages, an image that behaves
# like the official one as far as the tests care, and tags it zookeeper:3.8.
#
#   debootstrap --variant=minbase bookworm ROOT     (about 1 minute)
#   chroot ROOT apt-get install zookeeper           (about 2 minutes)
#   tar -C ROOT -c . | docker import ... zookeeper:3.8
#
# ZooKeeper 3.9 the same way, from Debian trixie (whose zookeeper package
# is 3.9.3, with trixie's own jars: no classpath trap inside the image):
#   ZK_IMAGE_VERSION=3.9 scripts/zk-image.sh        (zookeeper:3.9)
#
# The image honours the official image's environment contract: ZOO_MY_ID,
# ZOO_SERVERS, ZOO_TICK_TIME, ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT,
# ZOO_MAX_CLIENT_CNXNS, ZOO_STANDALONE_ENABLED, ZOO_ADMINSERVER_ENABLED,
# ZOO_4LW_COMMANDS_WHITELIST, ZOO_CFG_EXTRA, ZOO_AUTOPURGE_*, JVMFLAGS; config
# in /conf (written once, unless mounted), data in /data, transaction logs in
# /datalog; entrypoint /docker-entrypoint.sh, command
# `zkServer.sh start-foreground`, run as user zookeeper; the log goes to
# stdout (docker logs).
#
# Cache: Docker's own image store. The image carries the label
# org.zkrecipes.stand-in=<sha256 of this script>; when the image is there with
# the label of this very script, nothing is built. An image of that tag
# WITHOUT the label (the official one, pulled) is never replaced.
#
# Usage: scripts/zk-image.sh [--force]     (root: debootstrap and chroot)
# Environment: ZK_IMAGE_VERSION (3.8, the default, or 3.9), ZK_IMAGE
# (default zookeeper:$ZK_IMAGE_VERSION), ZK_IMAGE_MIRROR (default
# http://deb.debian.org/debian), ZK_IMAGE_SUITE (default bookworm for 3.8,
# trixie for 3.9), TMPDIR (where the root file system is built, then
# removed; ~600 MB).
set -euo pipefail

say() { printf 'zk-image: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

version=${ZK_IMAGE_VERSION:-3.8}
case $version in
3.8) default_suite=bookworm ;;
3.9) default_suite=trixie ;;
*) die "ZK_IMAGE_VERSION=$version: want 3.8 or 3.9" ;;
esac
image=${ZK_IMAGE:-zookeeper:$version}
mirror=${ZK_IMAGE_MIRROR:-http://deb.debian.org/debian}
suite=${ZK_IMAGE_SUITE:-$default_suite}
force=false
[[ ${1:-} == --force ]] && force=true

command -v docker >/dev/null 2>&1 || die "no docker command"
timeout 20 docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info)"

recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
# have: absent, "" (an image that is no stand-in) or the stand-in's recipe.
have=absent
if docker image inspect "$image" >/dev/null 2>&1; then
	have=$(docker image inspect -f '{{json .Config.Labels}}' "$image" |
		sed -n 's/.*"org\.zkrecipes\.stand-in":"\([^"]*\)".*/\1/p')
fi
if ! $force; then
	case $have in
	"$recipe")
		say "$image is there, built by this very script: cached, nothing to do"
		exit 0
		;;
	absent) ;;
	"")
		say "$image is there and is not a stand-in (the official image?): left alone"
		exit 0
		;;
	*) say "$image is an older stand-in (recipe $have): rebuilding" ;;
	esac
fi

[[ $(id -u) == 0 ]] || die "building the stand-in needs root (debootstrap, chroot); or get the official image: docker pull $image"
command -v debootstrap >/dev/null 2>&1 || die "no debootstrap: apt-get install -y debootstrap"

begin=$SECONDS
work=$(mktemp -d "${TMPDIR:-/var/tmp}/zk-image.XXXXXX")
root=$work/root
cleanup() {
	mountpoint -q "$root/proc" 2>/dev/null && umount -l "$root/proc"
	rm -rf "$work"
}
trap cleanup EXIT

say "debootstrap --variant=minbase $suite ($mirror) into $root"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 30 "$work/debootstrap.log" >&2
	die "debootstrap failed"
}

say "installing zookeeper in the chroot"
# No daemon may start in the chroot; the mirror may serve a snapshot whose
# Release file is past its Valid-Until.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cat >"$root/etc/apt/apt.conf.d/99zk-image" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
EOF
mount -t proc proc "$root/proc" # java runs in some postinst scripts
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
	sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends zookeeper' \
	>"$work/apt.log" 2>&1 || {
	tail -n 30 "$work/apt.log" >&2
	die "apt-get install zookeeper failed in the chroot"
}
umount -l "$root/proc"
[[ -f $root/usr/share/java/zookeeper.jar ]] || die "no /usr/share/java/zookeeper.jar after the install"
installed=$(chroot "$root" dpkg-query -W -f '${Version}' libzookeeper-java)
[[ $installed == "$version".* ]] || die "$suite's zookeeper is $installed, not $version"
say "installed ZooKeeper $installed"
chroot "$root" id zookeeper >/dev/null || die "the zookeeper package made no user zookeeper"

# Slim down: package lists, caches, documentation.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
	"$root"/usr/share/man/* "$root"/usr/share/locale/* "$root/usr/sbin/policy-rc.d"

# The entrypoint: the official image's docker-entrypoint.sh, rule for rule.
cat >"$root/docker-entrypoint.sh" <<'EOF'
#!/bin/bash
# Stand-in for the official zookeeper image's entrypoint (scripts/zk-image.sh
# of zkrecipes): same environment contract, same files.
set -e

# Run the server as zookeeper, as the official image does with gosu.
if [[ $1 == zkServer.sh && $(id -u) == 0 ]]; then
	chown -R zookeeper:zookeeper "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR" "$ZOO_LOG_DIR"
	exec setpriv --reuid=zookeeper --regid=zookeeper --init-groups "$0" "$@"
fi

# Generate the config only if it doesn't exist (it may be mounted).
if [[ ! -f $ZOO_CONF_DIR/zoo.cfg ]]; then
	CONFIG=$ZOO_CONF_DIR/zoo.cfg
	{
		echo "dataDir=$ZOO_DATA_DIR"
		echo "dataLogDir=$ZOO_DATA_LOG_DIR"
		echo "tickTime=$ZOO_TICK_TIME"
		echo "initLimit=$ZOO_INIT_LIMIT"
		echo "syncLimit=$ZOO_SYNC_LIMIT"
		echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"
		echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"
		echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
		echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
		echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
	} >>"$CONFIG"
	if [[ -z $ZOO_SERVERS ]]; then
		ZOO_SERVERS="server.1=localhost:2888:3888;2181"
	fi
	for server in $ZOO_SERVERS; do
		echo "$server" >>"$CONFIG"
	done
	if [[ -n $ZOO_4LW_COMMANDS_WHITELIST ]]; then
		echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST" >>"$CONFIG"
	fi
	for cfg_extra_entry in $ZOO_CFG_EXTRA; do
		echo "$cfg_extra_entry" >>"$CONFIG"
	done
fi

# Write myid only if it doesn't exist.
if [[ ! -f $ZOO_DATA_DIR/myid ]]; then
	echo "${ZOO_MY_ID:-1}" >"$ZOO_DATA_DIR/myid"
fi

exec "$@"
EOF

# zkServer.sh start-foreground, as in the official image; the classpath is
# Debian's jar (its manifest names its dependencies) and slf4j-simple, as
# scripts/zk-up.sh builds it: all of /usr/share/java would put several slf4j
# bindings on it, and slf4j would refuse to start.
cat >"$root/usr/local/bin/zkServer.sh" <<'EOF'
#!/bin/bash
# Stand-in for zkServer.sh (scripts/zk-image.sh of zkrecipes): only
# start-foreground, which is what the official image runs.
set -e
case ${1:-} in
start-foreground) ;;
*) echo "zkServer.sh (stand-in): only start-foreground is supported" >&2; exit 2 ;;
esac
cfg=${2:-$ZOO_CONF_DIR/zoo.cfg}
exec java -Xmx${ZK_SERVER_HEAP:-1000}m -XX:+HeapDumpOnOutOfMemoryError -XX:OnOutOfMemoryError='kill -9 %p' \
	-XX:-UsePerfData -Dzookeeper.log.dir="$ZOO_LOG_DIR" \
	-Dorg.slf4j.simpleLogger.showDateTime=true \
	-Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd HH:mm:ss.SSS" \
	$JVMFLAGS $SERVER_JVMFLAGS \
	-cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
EOF
chmod 755 "$root/docker-entrypoint.sh" "$root/usr/local/bin/zkServer.sh"
mkdir -p "$root/conf" "$root/data" "$root/datalog" "$root/logs"
chroot "$root" chown zookeeper:zookeeper /conf /data /datalog /logs

say "importing the root file system as $image"
changes=(
	-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
	-c 'ENV ZOO_CONF_DIR=/conf ZOO_DATA_DIR=/data ZOO_DATA_LOG_DIR=/datalog ZOO_LOG_DIR=/logs'
	-c 'ENV ZOO_TICK_TIME=2000 ZOO_INIT_LIMIT=5 ZOO_SYNC_LIMIT=2'
	-c 'ENV ZOO_AUTOPURGE_PURGEINTERVAL=0 ZOO_AUTOPURGE_SNAPRETAINCOUNT=3'
	-c 'ENV ZOO_MAX_CLIENT_CNXNS=60 ZOO_STANDALONE_ENABLED=true ZOO_ADMINSERVER_ENABLED=true'
	-c 'EXPOSE 2181 2888 3888 8080'
	-c 'VOLUME ["/data", "/datalog", "/logs"]'
	-c 'WORKDIR /'
	-c 'ENTRYPOINT ["/docker-entrypoint.sh"]'
	-c 'CMD ["zkServer.sh", "start-foreground"]'
	-c "LABEL org.zkrecipes.stand-in=$recipe"
	-c "LABEL org.opencontainers.image.description=\"Local stand-in for the official zookeeper:$version image (Debian $suite's $installed), built by zkrecipes scripts/zk-image.sh. Real users: docker pull zookeeper:$version.\""
)
tar --numeric-owner -C "$root" -c . | docker import "${changes[@]}" - "$image" >/dev/null
say "built $image in $((SECONDS - begin))s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
