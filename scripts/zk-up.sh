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
#     and wait until every member serves.
#  3. Else, if ZooKeeper is installed (Debian's `zookeeper` package, or
#     ZK_HOME / ZOOKEEPER_JAR as for package zktest), start a standalone
#     server on that port, detached from this shell, with its files under
#     ${ZK_UP_DIR:-/tmp/zkrecipes-zk-PORT}: zoo.cfg, data/, zookeeper.log,
#     zookeeper.pid. Test settings: forceSync=no (no fsync),
#     4lw.commands.whitelist=*, admin.enableServer=false,
#     minSessionTimeout=1000.
#  4. Else, when root with apt-get: install Debian's zookeeper, then do 3.
#  5. Else say how to get a ZooKeeper and exit 1.
#
# scripts/zk-down.sh [host:port] stops what this started.
set -euo pipefail

addr=${1:-127.0.0.1:2181}
host=${addr%:*}
port=${addr##*:}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${ZK_UP_DIR:-/tmp/zkrecipes-zk-$port}

say() { printf 'zk-up: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

case $port in '' | *[!0-9]*) die "bad address '$addr': want host:port" ;; esac

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

if answers; then
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

# compose ARGS: the compose plugin (docker compose) if there is one, else
# docker-compose (Debian's is 1.29), on docker-compose.yml.
project=${COMPOSE_PROJECT_NAME:-zkrecipes}
compose() {
	if docker compose version >/dev/null 2>&1; then
		docker compose -p "$project" -f "$root/docker-compose.yml" "$@"
	elif command -v docker-compose >/dev/null 2>&1; then
		docker-compose -p "$project" -f "$root/docker-compose.yml" "$@"
	else
		say "neither the docker compose plugin nor docker-compose is installed (apt-get install docker-compose)"
		return 127
	fi
}

ports=("${ZK1_PORT:-2181}" "${ZK2_PORT:-2182}" "${ZK3_PORT:-2183}")
if [[ $port == "${ports[0]}" ]] && docker_runs; then
	say "Docker runs: starting the 3-server ensemble of docker-compose.yml (127.0.0.1:${ports[*]}), project $project"
	export ZK1_PORT=${ports[0]} ZK2_PORT=${ports[1]} ZK3_PORT=${ports[2]}
	compose up -d || die "compose up failed (no zookeeper:3.8 image and no registry? scripts/zk-image.sh builds a local stand-in)"
	mkdir -p "$dir" && echo docker >"$dir/backend" && echo "$project" >"$dir/compose-project"
	say "waiting until every member serves (a leader is elected)"
	for p in "${ports[@]}"; do
		port=$p wait_serving 120 || die "the ensemble does not serve at 127.0.0.1:$p after 120s; see: docker-compose -p $project -f $root/docker-compose.yml logs"
	done
	say "ZooKeeper ensemble ready: ZK_CONNECT=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}; stop it with scripts/zk-down.sh 127.0.0.1:${ports[0]}"
	exit 0
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
		say "no Docker and no local ZooKeeper: installing Debian's zookeeper package (apt-get)"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2 && apt-get install -y -qq zookeeper >&2 ||
			die "apt-get install zookeeper failed"
		find_local || die "zookeeper installed, but still no java or zookeeper jar (check JAVA_HOME, ZK_HOME, ZOOKEEPER_JAR)"
	else
		die "no ZooKeeper at $addr, no Docker engine, no local installation. Get one of:
  - an existing server: ZK_CONNECT=host:port make ...
  - Docker: start the engine, then run this again (uses docker-compose.yml)
  - Debian/Ubuntu: sudo apt-get install zookeeper, then run this again
  - an Apache release: ZK_HOME=/path/to/apache-zookeeper-3.8.x-bin, then run this again"
	fi
fi

pidfile=$dir/zookeeper.pid
logfile=$dir/zookeeper.log
if [[ -f $pidfile ]]; then
	pid=$(<"$pidfile")
	if [[ -r /proc/$pid/cmdline ]] && grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null; then
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
# No fsync of the transaction log: fast, and fine for tests.
forceSync=no
maxClientCnxns=0
snapshot.trust.empty=true
EOF
echo local >"$dir/backend"

say "starting a local ZooKeeper on $addr ($classpath), files in $dir"
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
say "ZooKeeper ready at $addr (pid $(<"$pidfile"), log $logfile); stop it with scripts/zk-down.sh"
