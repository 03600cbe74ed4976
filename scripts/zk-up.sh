#!/usr/bin/env bash
# zk-up.sh [host:port] - make sure a ZooKeeper answers at host:port
# (default 127.0.0.1:2181), for the integration tests.
#
#  1. If a ZooKeeper already answers `ruok` there, do nothing.
#  2. Else, if a Docker engine runs (and the address is 127.0.0.1:2181),
#     start the 3-server ensemble of docker-compose.yml (client ports
#     2181-2183; ZK1_PORT, ZK2_PORT, ZK3_PORT move them, and then the
#     address must be 127.0.0.1:$ZK1_PORT) with `docker compose` or
#     docker-compose (1.29 will do), as project ${COMPOSE_PROJECT_NAME:-zkrecipes},
#     and wait until every member serves. When there is no compose, or
#     `compose up` fails (no zookeeper:3.8 image and no registry to pull it
#     from), or the ensemble does not serve within ${ZK_UP_WAIT:-120}
#     seconds: say so, remove what compose made, and go on with 3.
#  3. Else, if ZooKeeper is installed (Debian's `zookeeper` package, or
#     ZK_HOME / ZOOKEEPER_JAR as for package zktest), start a standalone
#     server on that port, detached from this shell, with its files under
#     ${ZK_UP_DIR:-/tmp/zkrecipes-zk-PORT}: zoo.cfg, data/, zookeeper.log,
#     zookeeper.pid. Test settings: forceSync=no (no fsync; ZK_FORCE_SYNC=yes
#     turns it on, for a benchmark's run with fsync: then zk-up starts a
#     local server even where Docker runs, and refuses one that answers
#     already unless it started it so), 4lw.commands.whitelist=*,
#     admin.enableServer=false, minSessionTimeout=1000.
#  4. Else, when root with apt-get: install Debian's zookeeper, then do 3.
#  5. Else say how to get a ZooKeeper and exit 1.
#
# scripts/zk-down.sh [host:port] stops what this started: $dir/backend
# says which ("docker" or "local"), $dir/compose-project names an ensemble
# to remove, $dir/zookeeper.pid a local server.
set -euo pipefail

addr=${1:-127.0.0.1:2181}
host=${addr%:*}
port=${addr##*:}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${ZK_UP_DIR:-/tmp/zkrecipes-zk-$port}

say() { printf 'zk-up: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

case $port in '' | *[!0-9]*) die "bad address '$addr': want host:port" ;; esac
force_sync=${ZK_FORCE_SYNC:-no}
case $force_sync in yes | no) ;; *) die "ZK_FORCE_SYNC=$force_sync: want yes or no" ;; esac

# fourletter CMD: print the server's reply to a four-letter word (bash's
# /dev/tcp, so no nc needed), within 3 seconds.
fourletter() {
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf %s "$2" >&3 && cat <&3' \
		"$host" "$port" "$1" 2>/dev/null
}

answers() { [[ $(fourletter ruok || true) == imok ]]; }
serving() { [[ $(fourletter srvr || true) == *Mode:* ]]; }

# wait_serving SECONDS: wait until the server serves requests.
wait_serving() {
	local deadline=$((SECONDS + $1))
	until serving; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# started_so: the server of $dir/zookeeper.pid runs, on $dir/zoo.cfg, and
# that file says forceSync=$force_sync (a zoo.cfg left behind by a server
# gone is no evidence about the one that answers now).
started_so() {
	local pid
	pid=$(cat "$dir/zookeeper.pid" 2>/dev/null) || return 1
	[[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "QuorumPeerMain $dir/zoo.cfg" &&
		grep -qx "forceSync=$force_sync" "$dir/zoo.cfg"
}

if answers; then
	if [[ -n ${ZK_FORCE_SYNC:-} ]] && ! started_so; then
		die "a ZooKeeper answers at $addr, and zk-up did not start it with forceSync=$force_sync ($dir/zoo.cfg): stop it (scripts/zk-down.sh $addr) or use another address"
	fi
	say "ZooKeeper already answers at $addr; nothing to do"
	exit 0
fi

case $host in
127.0.0.1 | localhost) ;;
*) die "nothing answers at $addr, and zk-up can only start a server on this machine (127.0.0.1)" ;;
esac

docker_runs() {
	command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1
}

# find_compose: set compose_cmd to the compose plugin (docker compose) if
# there is one, else docker-compose (Debian's is 1.29).
find_compose() {
	if docker compose version >/dev/null 2>&1; then
		compose_cmd=(docker compose)
	elif command -v docker-compose >/dev/null 2>&1; then
		compose_cmd=(docker-compose)
	else
		return 1
	fi
}
project=${COMPOSE_PROJECT_NAME:-zkrecipes}
compose() { "${compose_cmd[@]}" -p "$project" -f "$root/docker-compose.yml" "$@"; }

# compose_undo WHY: say why the ensemble is given up, and remove what
# compose made of it (zk-down does, later, if this cannot).
compose_undo() {
	say "$1: removing what compose made (compose down -v), then falling back to a local ZooKeeper"
	if compose down -v >&2; then
		rm -f "$dir/compose-project"
	else
		say "compose down failed: scripts/zk-down.sh $addr will try again"
	fi
}

# Why zk-up runs a local server, when it does.
why_local="no Docker engine runs"
ports=("${ZK1_PORT:-2181}" "${ZK2_PORT:-2182}" "${ZK3_PORT:-2183}")
if [[ -n ${ZK_FORCE_SYNC:-} ]]; then
	why_local="ZK_FORCE_SYNC=$force_sync asks for a server of zk-up's own settings"
elif ! docker_runs; then
	:
elif [[ $port != "${ports[0]}" ]]; then
	why_local="Docker runs, but docker-compose.yml puts its first member at 127.0.0.1:${ports[0]}, not $addr (ZK1_PORT moves it)"
elif ! find_compose; then
	why_local="Docker runs, but compose is not installed"
	say "Docker runs, but neither the docker compose plugin nor docker-compose is installed (apt-get install docker-compose for the 3-server ensemble of docker-compose.yml): falling back to a local ZooKeeper"
else
	say "Docker runs: starting the 3-server ensemble of docker-compose.yml (127.0.0.1:${ports[*]}) with ${compose_cmd[*]}, project $project"
	export ZK1_PORT=${ports[0]} ZK2_PORT=${ports[1]} ZK3_PORT=${ports[2]}
	# Recorded first, so that zk-down removes whatever compose makes even
	# if this script is interrupted.
	mkdir -p "$dir" && echo "$project" >"$dir/compose-project"
	if ! compose up -d >&2; then
		why_local="compose up failed"
		why=$why_local
		if ! timeout 20 docker image inspect zookeeper:3.8 >/dev/null 2>&1; then
			why+=": there is no zookeeper:3.8 image and it could not be pulled (on a machine without a registry, scripts/zk-image.sh builds a local stand-in)"
		fi
		compose_undo "$why"
	else
		echo docker >"$dir/backend"
		say "waiting until every member serves (a leader is elected)"
		serves=true
		wait=${ZK_UP_WAIT:-120}
		for p in "${ports[@]}"; do
			port=$p wait_serving "$wait" || {
				serves=false
				why_local="the ensemble does not serve at 127.0.0.1:$p after ${wait}s"
				break
			}
		done
		if $serves; then
			say "ZooKeeper ensemble ready: ZK_CONNECT=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}; stop it with scripts/zk-down.sh 127.0.0.1:${ports[0]}"
			exit 0
		fi
		say "$why_local; the members' last lines:"
		compose logs --no-color --tail 10 >&2 || true
		compose_undo "$why_local"
	fi
fi

# find_local: set java and classpath from a local installation, if any.
find_local() {
	java=
	if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
		java=$JAVA_HOME/bin/java
	else
		java=$(command -v java || true)
	fi
	[[ -n $java ]] || return 1
	if [[ -n ${ZK_HOME:-} ]]; then
		[[ -d $ZK_HOME/lib ]] || die "ZK_HOME=$ZK_HOME has no lib directory"
		classpath="$ZK_HOME/conf:$ZK_HOME/lib/*:$ZK_HOME/*"
		return 0
	fi
	local jar=${ZOOKEEPER_JAR:-/usr/share/java/zookeeper.jar}
	[[ -f $jar ]] || return 1
	# Debian's jar names its dependencies in its manifest, but no slf4j
	# binding: add slf4j-simple so that the server writes a log.
	classpath=$jar
	[[ -f $(dirname "$jar")/slf4j-simple.jar ]] && classpath+=":$(dirname "$jar")/slf4j-simple.jar"
	return 0
}

if ! find_local; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
		say "$why_local, and no local ZooKeeper: installing Debian's zookeeper package (apt-get)"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2 && apt-get install -y -qq zookeeper >&2 ||
			die "apt-get install zookeeper failed"
		find_local || die "zookeeper installed, but still no java or zookeeper jar (check JAVA_HOME, ZK_HOME, ZOOKEEPER_JAR)"
	else
		die "no ZooKeeper at $addr, no local installation, and $why_local. Get one of:
  - an existing server: ZK_CONNECT=host:port make ...
  - Docker: start the engine, install compose, then run this again (uses docker-compose.yml)
  - Debian/Ubuntu: sudo apt-get install zookeeper, then run this again
  - an Apache release: ZK_HOME=/path/to/apache-zookeeper-3.8.x-bin, then run this again"
	fi
fi

pidfile=$dir/zookeeper.pid
logfile=$dir/zookeeper.log
if [[ -f $pidfile ]]; then
	pid=$(<"$pidfile")
	if [[ -r /proc/$pid/cmdline ]] && grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null; then
		[[ -z ${ZK_FORCE_SYNC:-} ]] || started_so ||
			die "the server zk-up started (pid $pid) does not run with forceSync=$force_sync ($dir/zoo.cfg): stop it (scripts/zk-down.sh $addr) or use another address"
		say "the server zk-up started (pid $pid) runs but does not answer yet; waiting"
		wait_serving 60 || die "pid $pid does not serve at $addr; see $logfile, or run scripts/zk-down.sh"
		say "ZooKeeper ready at $addr"
		exit 0
	fi
	rm -f "$pidfile"
fi

mkdir -p "$dir/data"
cat >"$dir/zoo.cfg" <<EOF
# written by scripts/zk-up.sh, for tests only
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
minSessionTimeout=1000
maxSessionTimeout=60000
4lw.commands.whitelist=*
admin.enableServer=false
# forceSync=no: no fsync of the transaction log: fast, and fine for tests
# (ZK_FORCE_SYNC=yes: each write on disk before it is acknowledged).
forceSync=$force_sync
maxClientCnxns=0
snapshot.trust.empty=true
EOF
echo local >"$dir/backend"

say "starting a local ZooKeeper on $addr ($why_local; $classpath), files in $dir"
# setsid + nohup: the server survives the end of this script and of make,
# and a ^C in the terminal does not reach it. No job control here, so
# setsid does not fork and $! is the JVM's pid.
detach=(nohup)
command -v setsid >/dev/null 2>&1 && detach+=(setsid)
# The JVM's default JIT and GC: this server lives on for demos and for
# `make bench`, so steady speed matters more than start-up time.
"${detach[@]}" "$java" -Xmx1g -XX:-UsePerfData \
	-Djava.net.preferIPv4Stack=true \
	-Dorg.slf4j.simpleLogger.showDateTime=true \
	-Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd HH:mm:ss.SSS" \
	-cp "$classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
	</dev/null >>"$logfile" 2>&1 &
echo $! >"$pidfile"

if ! wait_serving 60; then
	say "ZooKeeper did not start; end of $logfile:"
	tail -n 30 "$logfile" >&2 || true
	kill -9 "$(<"$pidfile")" 2>/dev/null || true
	rm -f "$pidfile"
	exit 1
fi
say "ZooKeeper ready at $addr (pid $(<"$pidfile"), log $logfile); stop it with scripts/zk-down.sh $addr"
