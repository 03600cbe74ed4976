#!/usr/bin/env bash
# test-docker.sh - `make test-docker`: the tests through zktest's Docker
# sources of servers, end to end.
#
#  1. A Docker engine: the one that answers (DOCKER_HOST, or the default
#     socket). Else, as root: install Debian's docker.io (with debootstrap)
#     when missing, and start dockerd with setsid on a socket of its own,
#     /run/zkrecipes-docker/docker.sock (log /var/log/zkrecipes-dockerd.log),
#     so that other test runs on this machine do not see it and keep their
#     own source of servers; it is stopped at the end. Either way, as root,
#     install compose when there is none (neither `docker compose` nor
#     docker-compose): Debian's package of the plugin where the archive has
#     one (docker-compose-plugin, docker-compose-v2), else docker-compose.
#  2. The image zookeeper:3.8: the one there (official, or the stand-in
#     cached by an earlier run), else scripts/zk-image.sh builds the stand-in
#     (as root, debootstrap is installed for it when missing).
#  3. testcontainers-go, with no ZK_CONNECT: the tests of zktest/docker (a
#     module of its own), whose shared server is a container; then zktest's
#     tests and zklock's, whose modules have no Docker dependency, against
#     a container that zktest/docker's zkcontainer starts for them in
#     ZK_CONNECT (TESTCONTAINERS_RYUK_DISABLED=true unless set: zktest/docker
#     removes its containers itself).
#  4. docker-compose.yml: scripts/zk-up.sh brings up the 3-server ensemble
#     (client ports 2181-2183, or 2281-2283 when those are taken, e.g. by the
#     local server `make test` leaves), the recipe tests run against it with
#     ZK_CONNECT set to its three members, scripts/zk-down.sh removes it.
#     Left to `make test`: the tests that inject faults (TestFault*,
#     TestFinding*: connection cuts; *Frozen*: a partition), and those that
#     assume one server: the watch tests read `wchp` from the first member,
#     which knows only the watches of its own clients; TestFairness wants
#     strict FIFO, and TestHandOutOrder the exact item each consumer gets,
#     which hold while no consumer is passed over; on an ensemble in
#     containers on a loaded machine a member may apply a put or an offer
#     later than fairqueue's grace, and a slow head or waiter is passed over
#     (as promised: its item comes back). The order the promise keeps then
#     is checked here by TestManyProducersAndConsumers. TestNoClaimLosesARace
#     counts refused claims, and a consumer passed over has its late claim
#     refused (0.06 per item in one run here, against its 0.05): it too is
#     left to make test.
#  5. No container of ours is left: checked, then the engine is stopped if
#     step 1 started it.
#
# A test that fails fails the run: none is run again.
#
# Environment: GO (default go), TEST_DOCKER_RECIPES (the packages of step 4,
# default "./zklock/ ./fairqueue/"), TEST_DOCKER_SKIP (go test -skip of step 4).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
GO=${GO:-go}
recipes=${TEST_DOCKER_RECIPES:-./zklock/ ./fairqueue/}
skip=${TEST_DOCKER_SKIP:-TestFault|TestFinding|Frozen|WatchOnlyTheirPredecessor|WatchOneNodeEach|TestRWMutexWatches|TestFairness\$|TestHandOutOrder\$|TestNoClaimLosesARace\$}
project=zkrecipes-test # not the zkrecipes of a developer's own ensemble
sockdir=/run/zkrecipes-docker
enginelog=/var/log/zkrecipes-dockerd.log
export TESTCONTAINERS_RYUK_DISABLED=${TESTCONTAINERS_RYUK_DISABLED:-true}

say() { printf '\ntest-docker: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# gotest PACKAGES FLAGS...: go test -count=1 FLAGS PACKAGES.
gotest() {
	local pkgs=$1
	shift
	# shellcheck disable=SC2086 # $pkgs is a list of packages
	"$GO" test -count=1 "$@" $pkgs
}

# Timings, printed at the end.
declare -a times=()
step_begin=$SECONDS
step() { # step NAME: the previous step ends here
	times+=("$(printf '%-40s %4ds' "$step_name" $((SECONDS - step_begin)))")
	step_name=$1 step_begin=$SECONDS
}
step_name="engine"
all_begin=$SECONDS

engine_pid= # set when this script started dockerd
zk_addr=    # set once zk-up.sh ran
cleanup() {
	local status=$?
	set +e
	if [[ -n $zk_addr ]]; then
		say "removing the ensemble"
		bash scripts/zk-down.sh "$zk_addr"
	fi
	if docker info >/dev/null 2>&1; then
		# The watchdogs of zktest remove the containers of the test
		# binaries as those exit: give them a moment.
		local left=
		for _ in $(seq 100); do
			left=$(docker ps -aq --filter label=org.zkrecipes.zktest.owner)
			left+=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
			[[ -z $left ]] && break
			sleep 0.3
		done
		say "docker ps -a (no container of zktest's nor of project $project may be left):"
		docker ps -a >&2
		if [[ -n $left ]]; then
			say "FAIL: containers left behind: $left"
			status=1
		fi
	fi
	if [[ -n $engine_pid ]]; then
		say "stopping the Docker engine this script started (pid $engine_pid)"
		kill "$engine_pid" 2>/dev/null
		for _ in $(seq 150); do
			kill -0 "$engine_pid" 2>/dev/null || break
			sleep 0.2
		done
	fi
	step "done"
	say "timings:"
	printf '  %s\n' "${times[@]}" >&2
	printf '  %-40s %4ds\n' total $((SECONDS - all_begin)) >&2
	if ((status == 0)); then say "PASS"; else say "FAIL (exit $status)"; fi
	exit "$status"
}
trap cleanup EXIT

# Debian's packages, as root.
apt_updated=false
apt_update() {
	$apt_updated && return
	apt-get update -qq
	apt_updated=true
}
# apt_install WHY PKG...: install the packages, or say why they are needed.
apt_install() {
	local why=$1
	shift
	[[ $(id -u) == 0 ]] || die "$why, and only root may install $* here: apt-get install $*, or run as root"
	say "$why: installing $* (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt_update
	apt-get install -y -qq "$@" >/dev/null
}
has_compose() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; }
# compose_package: the package of the compose plugin where the archive has
# one (Docker's archive: docker-compose-plugin; Ubuntu: docker-compose-v2),
# else docker-compose (Debian's: 1.29 on bookworm, the plugin from trixie on).
compose_package() {
	local p
	for p in docker-compose-plugin docker-compose-v2; do
		if apt-cache policy "$p" 2>/dev/null | grep -Eq '^ *Candidate: [0-9]'; then
			echo "$p"
			return
		fi
	done
	echo docker-compose
}

# 1. The engine.
engine_answers() { command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; }
if engine_answers; then
	say "a Docker engine answers (${DOCKER_HOST:-default socket}): using it"
else
	[[ $(id -u) == 0 ]] || die "no Docker engine answers, and only root may install and start one here: start Docker, or run as root"
	need=()
	command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
	command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
	if ((${#need[@]})); then
		apt_install "no Docker engine answers" "${need[@]}"
	fi
	mkdir -p "$sockdir"
	export DOCKER_HOST=unix://$sockdir/docker.sock
	say "starting dockerd on $DOCKER_HOST (log $enginelog)"
	setsid dockerd -H "$DOCKER_HOST" --pidfile "$sockdir/docker.pid" </dev/null >>"$enginelog" 2>&1 &
	engine_pid=$!
	for _ in $(seq 120); do
		engine_answers && break
		kill -0 "$engine_pid" 2>/dev/null || break
		sleep 0.5
	done
	if ! engine_answers; then
		tail -n 30 "$enginelog" >&2
		die "dockerd did not start; see $enginelog"
	fi
fi
if ! has_compose; then
	[[ $(id -u) == 0 ]] && apt_update
	apt_install "neither the docker compose plugin nor docker-compose is installed" "$(compose_package)"
	has_compose || die "still no docker compose plugin nor docker-compose after the install"
fi
docker version --format 'client {{.Client.Version}}, engine {{.Server.Version}}' >&2
{ docker compose version 2>/dev/null || docker-compose version --short; } | sed 's/^/compose /' >&2

# 2. The image (zookeeper:3.9 with ZKTEST_VERSION=3.9, for zktest/docker).
step "image (scripts/zk-image.sh)"
images=(3.8)
[[ ${ZKTEST_VERSION:-} == 3.9 ]] && images+=(3.9)
for v in "${images[@]}"; do
	if ! docker image inspect "zookeeper:$v" >/dev/null 2>&1 && ! command -v debootstrap >/dev/null 2>&1; then
		apt_install "no zookeeper:$v image, and scripts/zk-image.sh needs debootstrap to build its stand-in" debootstrap
	fi
	ZK_IMAGE_VERSION=$v bash scripts/zk-image.sh
done

# 3. testcontainers-go.
step "testcontainers: zktest/docker, zktest, zklock"
say "go test ./... in zktest/docker through testcontainers-go (no ZK_CONNECT; TESTCONTAINERS_RYUK_DISABLED=$TESTCONTAINERS_RYUK_DISABLED)"
since=$(date +%s)
unset ZK_CONNECT
(cd zktest/docker && gotest ./... -timeout 15m) || die "zktest/docker's tests failed"
bindir=$(mktemp -d)
"$GO" -C zktest/docker build -o "$bindir/zkcontainer" ./cmd/zkcontainer
say "zkcontainer go test ./zktest/ ./zklock/: against a container in ZK_CONNECT"
"$bindir/zkcontainer" "$GO" test -count=1 -timeout 15m ./zktest/ ./zklock/ || die "tests failed against zkcontainer's container"
rm -rf "$bindir"
# Each must have run its server in a container: one for zktest/docker's
# test binary, one for the child of its kill -9 test, one for zkcontainer.
started=$(docker events --since "$since" --until "$(date +%s)" --filter type=container --filter event=start \
	--filter label=org.zkrecipes.zktest.owner --format '{{.Actor.Attributes.name}}')
say "containers zktest started: ${started//$'\n'/ }"
(($(wc -w <<<"$started") >= 3)) || die "fewer containers than expected: the tests did not take the Docker path"

# 4. docker-compose.yml.
step "compose: up"
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
base=
for b in 218 228; do
	if port_free "${b}1" && port_free "${b}2" && port_free "${b}3"; then
		base=$b
		break
	fi
	say "127.0.0.1:${b}1-${b}3 are taken"
done
[[ -n $base ]] || die "no free client ports for the ensemble (tried 2181-2183 and 2281-2283)"
export ZK1_PORT=${base}1 ZK2_PORT=${base}2 ZK3_PORT=${base}3 COMPOSE_PROJECT_NAME=$project
zk_addr=127.0.0.1:$ZK1_PORT
bash scripts/zk-up.sh "$zk_addr"
[[ $(cat "/tmp/zkrecipes-zk-$ZK1_PORT/backend" 2>/dev/null) == docker ]] ||
	die "zk-up.sh did not start the compose ensemble (it fell back to a local server: see why above)"
for p in "$ZK1_PORT" "$ZK2_PORT" "$ZK3_PORT"; do
	printf '127.0.0.1:%s ' "$p" >&2
	timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf srvr >&3 && cat <&3' "$p" | grep Mode: >&2
done

step "compose: recipe tests"
export ZK_CONNECT=127.0.0.1:$ZK1_PORT,127.0.0.1:$ZK2_PORT,127.0.0.1:$ZK3_PORT
say "go test $recipes -skip '$skip' against ZK_CONNECT=$ZK_CONNECT"
gotest "$recipes" -timeout 15m -skip "$skip" || die "the recipe tests failed against the ensemble"

step "compose: down, checks"
bash scripts/zk-down.sh "$zk_addr"
zk_addr=
