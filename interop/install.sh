#!/usr/bin/env bash
# Installs what the interop tests (go test -tags interop ./interop/) need, from
# Debian bookworm: kazoo for /usr/bin/python3, Curator's jars in
# /usr/share/java (with guava, slf4j, zookeeper.jar as dependencies), a JDK
# for javac, and ZooKeeper itself for zktest's local server.
# Idempotent: runs apt-get only when a package is missing.
set -euo pipefail

packages=(
	python3-kazoo             # tested: 2.8.0-2
	libcurator-recipes-java   # tested: 5.4.0-3 (framework, client: same)
	libcurator-framework-java
	libcurator-client-java
	libslf4j-java             # slf4j-nop.jar, to keep Curator quiet
	zookeeper                 # 3.8.0: server for zktest, zookeeper.jar
	openjdk-17-jdk-headless   # javac (17.0.15)
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "interop: all packages installed"
	exit 0
fi

sudo=
if [[ $(id -u) != 0 ]]; then
	sudo=sudo
fi
echo "interop: installing ${missing[*]}"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
