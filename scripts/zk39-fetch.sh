#!/usr/bin/env bash
# zk39-fetch.sh - fetch ZooKeeper 3.9 for zktest (ZKTEST_VERSION=3.9) into a
# cache directory, changing nothing else on the machine.
#
# The server comes from Debian trixie's libzookeeper-java package (3.9.3),
# fetched with `apt-get download` through an apt configuration of the
# cache's own (its own sources list naming trixie, its own package lists and
# archives): /etc/apt is not touched and nothing is installed; apt checks
# the package against trixie's signed index as for any download.
#
# Its jars need what Debian's 3.8 `zookeeper` package brings (netty, slf4j,
# commons-cli/io, metrics, snappy, ... in /usr/share/java), which their
# manifest's Class-Path names and which bookworm's versions satisfy. One
# trap: that Class-Path also names /usr/share/java/zookeeper-jute.jar, 3.8's
# jute, which the JVM opens right after zookeeper-3.9.3.jar, before any
# later zookeeper-jute-3.9.3.jar, and every client connect then dies with
# NoSuchMethodError: ConnectRequest.setReadOnly. So the classpath written
# here puts jute 3.9 first.
#
# Result, in $ZKTEST_CACHE/zookeeper-3.9 (ZKTEST_CACHE defaults to
# ${XDG_CACHE_HOME:-$HOME/.cache}/zkrecipes, which is where zktest looks):
#   zookeeper-3.9.x.jar, zookeeper-jute-3.9.x.jar
#   classpath   the server's classpath, in order, on one line
#   version     the Debian package's version, e.g. 3.9.3-1+deb13u1
# When classpath is there and names files that exist, nothing is fetched.
#
# Usage: scripts/zk39-fetch.sh [--force]
# Environment: ZKTEST_CACHE, ZK39_MIRROR (default http://deb.debian.org/debian),
# ZK39_SUITE (default trixie), ZK39_KEYRING (default Debian's archive keyring).
set -euo pipefail

cache=${ZKTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zkrecipes}
dir=$cache/zookeeper-3.9
mirror=${ZK39_MIRROR:-http://deb.debian.org/debian}
suite=${ZK39_SUITE:-trixie}
keyring=${ZK39_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
java_dir=/usr/share/java
force=false
[[ ${1:-} == --force ]] && force=true

say() { printf 'zk39-fetch: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# cached: the classpath file is there and every entry of it exists.
cached() {
	[[ -f $dir/classpath ]] || return 1
	local entry
	IFS=: read -ra entries <"$dir/classpath"
	for entry in "${entries[@]}"; do [[ -f $entry ]] || return 1; done
}

if ! $force && cached; then
	say "ZooKeeper $(cat "$dir/version" 2>/dev/null || echo 3.9) is in $dir: cached, nothing to do"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "no apt-get: this script fetches Debian's package (on another system, unpack an Apache 3.9 release and point ZK_HOME at it)"
command -v dpkg-deb >/dev/null 2>&1 || die "no dpkg-deb"
command -v unzip >/dev/null 2>&1 || die "no unzip (apt-get install unzip)"
[[ -f $keyring ]] || die "no keyring $keyring (apt-get install debian-archive-keyring)"

work=$(mktemp -d "${TMPDIR:-/tmp}/zk39-fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt's sandbox user (_apt) must be able to write where it downloads.
chmod 755 "$work"
mkdir -p "$work"/apt/{lists/partial,archives/partial,cache,parts,prefs} "$work/debs" "$work/x"
echo "deb [signed-by=$keyring] $mirror $suite main" >"$work/apt/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$work/apt/sources.list"
	-o "Dir::Etc::SourceParts=$work/apt/parts"
	-o "Dir::Etc::Preferences=/dev/null"
	-o "Dir::Etc::PreferencesParts=$work/apt/prefs"
	-o "Dir::State::Lists=$work/apt/lists"
	-o "Dir::Cache=$work/apt/cache"
	-o "Dir::Cache::Archives=$work/apt/archives"
	-o "Acquire::Languages=none"
	-o "APT::Sandbox::User=$(id -un)"
)

say "reading $suite's package index from $mirror (a private apt configuration in $work)"
apt-get "${apt_opts[@]}" -qq update >&2 || die "apt-get update of $suite failed"
deb_version=$(apt-cache "${apt_opts[@]}" show libzookeeper-java 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
[[ -n $deb_version ]] || die "$suite has no libzookeeper-java"
upstream=${deb_version%%-*}
upstream=${upstream#*:}
[[ $upstream == 3.9.* ]] || die "$suite's libzookeeper-java is $deb_version, not 3.9"

say "downloading libzookeeper-java $deb_version"
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "libzookeeper-java=$deb_version") >&2 ||
	die "apt-get download libzookeeper-java=$deb_version failed"
dpkg-deb -x "$work"/debs/libzookeeper-java_*.deb "$work/x"

server=zookeeper-$upstream.jar
jute=zookeeper-jute-$upstream.jar
for j in "$server" "$jute"; do
	[[ -f $work/x/usr/share/java/$j ]] || die "the package has no /usr/share/java/$j"
done

# Every dependency the server jar's manifest names must be there, but 3.8's
# jute, which jute 3.9 shadows, and jline, which only the command-line
# client uses (Debian's 3.8 runs without it too).
missing=()
manifest=$(unzip -p "$work/x/usr/share/java/$server" META-INF/MANIFEST.MF | tr -d '\r' |
	sed -e ':a' -e 'N' -e '$!ba' -e 's/\n //g')
for dep in $(sed -n 's/^Class-Path: //p' <<<"$manifest"); do
	case $(basename "$dep") in zookeeper-jute.jar | jline.jar) continue ;; esac
	[[ -f $dep ]] || missing+=("$dep")
done
if ((${#missing[@]})); then
	die "ZooKeeper $upstream's jar needs ${missing[*]}: apt-get install zookeeper (Debian's own package brings them), then run this again"
fi

mkdir -p "$dir"
cp "$work/x/usr/share/java/$server" "$work/x/usr/share/java/$jute" "$dir/"
# jute 3.9 first (see above); then the server; then, as zktest does for
# Debian's 3.8, slf4j-simple (Debian ships no slf4j binding: without it the
# server logs nothing) and netty-codec (Netty's TLS handler needs it and the
# manifest omits it).
classpath=$dir/$jute:$dir/$server
for extra in slf4j-simple.jar netty-codec.jar; do
	[[ -f $java_dir/$extra ]] && classpath+=:$java_dir/$extra
done
echo "$deb_version" >"$dir/version"
echo "$classpath" >"$dir/classpath"
say "ZooKeeper $upstream ($deb_version) is in $dir; tests use it with ZKTEST_VERSION=3.9"
