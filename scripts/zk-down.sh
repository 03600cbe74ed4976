#!/usr/bin/env bash
# zk-down.sh [host:port] - stop the ZooKeeper that scripts/zk-up.sh started
# for host:port (default 127.0.0.1:2181), whatever it was: the ensemble of
# docker-compose.yml named by the compose-project file (removed with its
# volumes), and the local server named by its pid file (its data removed,
# its log kept). Both, when zk-up fell back to a local server and could not
# remove what compose had made. A server zk-up did not start is left alone.
set -euo pipefail

addr=${1:-127.0.0.1:2181}
port=${addr##*:}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${ZK_UP_DIR:-/tmp/zkrecipes-zk-$port}
pidfile=$dir/zookeeper.pid

say() { printf 'zk-down: %s\n' "$*" >&2; }

# alive PID: the process exists and is not a zombie (kill -0 succeeds on
# zombies, which an init that does not reap may leave behind).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

status=0  # 1 if something could not be stopped
did=false # whether zk-up had started anything
if [[ -f $dir/compose-project ]]; then
	did=true
	project=$(<"$dir/compose-project")
	say "removing the ensemble of docker-compose.yml (project $project)"
	if docker compose version >/dev/null 2>&1; then
		compose=(docker compose)
	else
		compose=(docker-compose)
	fi
	if "${compose[@]}" -p "$project" -f "$root/docker-compose.yml" down -v; then
		rm -f "$dir/compose-project"
	else
		say "compose down failed; $dir/compose-project is kept, for another try"
		status=1
	fi
fi

if [[ -f $pidfile ]]; then
	did=true
	pid=$(<"$pidfile")
	# Only kill the pid if it still is our server (pids are reused).
	if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "QuorumPeerMain $dir/zoo.cfg"; then
		say "stopping ZooKeeper (pid $pid)"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do # 10 s, then SIGKILL
			alive "$pid" || break
			sleep 0.2
		done
		if alive "$pid"; then
			say "pid $pid ignores SIGTERM: killing it"
			kill -9 "$pid" 2>/dev/null || true
			for _ in $(seq 50); do
				alive "$pid" || break
				sleep 0.1
			done
		fi
	else
		say "pid $pid is not zk-up's ZooKeeper any more (it died?)"
	fi
	rm -rf "$pidfile" "$dir/data"
	say "stopped; log kept in $dir/zookeeper.log"
fi

$did || say "zk-up started nothing for $addr (no $dir/compose-project, no $pidfile); nothing to do"
[[ -f $dir/compose-project ]] || rm -f "$dir/backend"
exit "$status"
