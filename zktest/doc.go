// Package zktest gives tests real ZooKeeper servers: no mocks, no fakes.
//
// [Start] returns one ZooKeeper shared by every test of the test binary.
// [StartCluster] and [StartPrivate] return servers that belong to one test
// and that the test may kill -9 and restart; they are killed, and their data
// removed, when the test ends.
//
// # Where the servers come from
//
// [Start] takes the first of these that is available:
//
//  1. The ensemble named by the environment variable ZK_CONNECT
//     (comma-separated host:port list). zktest does not manage it.
//  2. A locally installed ZooKeeper, run as a child JVM
//     (org.apache.zookeeper.server.quorum.QuorumPeerMain) on a free
//     127.0.0.1 port with its data under os.TempDir()/zktest-<pid>.
//
// [StartFrom] and [MainFrom] try a [Source] of their caller's between the
// two. A container of the official zookeeper:3.8 image, started with
// testcontainers-go when a Docker engine answers, is such a source: it is
// in the module github.com/zkrecipes/zkrecipes/zktest/docker, kept apart so
// that neither this package nor the recipes bring Docker's modules into
// their importers' builds.
//
// [StartCluster] and [StartPrivate] always use a local installation, because
// they must kill -9 and restart servers with the same data directory and
// ports; they ignore ZK_CONNECT and any Source.
//
// When nothing is available the test is skipped with t.Skip.
//
// A local installation is found, in this order, from:
//
//   - ZK_HOME: an unpacked Apache ZooKeeper binary release (ZK_HOME/lib/*.jar,
//     ZK_HOME/conf on the classpath);
//   - ZOOKEEPER_JAR: a zookeeper jar whose manifest Class-Path names its
//     dependencies (as Debian's does);
//   - /usr/share/java/zookeeper.jar, from Debian's or Ubuntu's zookeeper
//     package (apt-get install zookeeper).
//
// With the last two, slf4j-simple.jar from the jar's directory, when present,
// is added to the classpath so that the server log is written (Debian ships
// no slf4j binding with ZooKeeper), and so is netty-codec.jar, which the TLS
// port of [WithTLS] needs and the jar's manifest omits (on Debian it comes
// with libnetty-java, a dependency of the zookeeper package). Java is
// $JAVA_HOME/bin/java or java on PATH; [TLSFiles] runs the keytool beside it.
//
// # Which release
//
// The environment variable ZKTEST_VERSION chooses the release of every
// server zktest starts (the shared one, private ones, ensembles): 3.8 (the
// default, Debian bookworm's package as above) or 3.9: Debian trixie's jars,
// which scripts/zk39-fetch.sh fetches into $ZKTEST_CACHE/zookeeper-3.9
// (ZKTEST_CACHE defaults to os.UserCacheDir()/zkrecipes), with a classpath
// that puts 3.9's jute before the 3.8 jute named by the jar's manifest.
// ZK_HOME or ZOOKEEPER_JAR, when set, still name the installation. When
// ZKTEST_VERSION is set, every server must report (to srvr) a release of
// that line, or the test fails; a 3.9 that was never fetched fails too,
// naming the script: a run asked to prove 3.9 does not pass on 3.8 or on
// nothing. Each start logs the version every server reports, as does the
// shared server from ZK_CONNECT or a Source (which ZKTEST_VERSION does not
// choose).
//
// # Local server configuration
//
// Local servers listen on 127.0.0.1 only and are configured for tests, not
// for production:
//
//   - forceSync=no: the transaction log is not fsynced, so a machine crash
//     (not a process crash: kill -9 loses nothing) may lose acknowledged
//     writes. This makes writes fast.
//   - minSessionTimeout=1000 and maxSessionTimeout=60000 (milliseconds):
//     clients may ask for sessions as short as one second.
//   - 4lw.commands.whitelist=*: every four-letter word (see [FourLetter]) is
//     allowed.
//   - admin.enableServer=false, maxClientCnxns=0 (no per-IP limit),
//     snapshot.trust.empty=true (a server killed before its first snapshot
//     can restart).
//   - tickTime=2000 for [Start] and [StartPrivate]; tickTime=500 for
//     [StartCluster], so that session expiry is fine-grained and followers
//     sync quickly. See [WithTickTime] and the other options of
//     [StartPrivate].
//
// Each server's output goes to a log file in its data directory; when a test
// fails, the last lines of the logs of the servers it used are printed with
// t.Log.
//
// # Lifetime
//
// The shared server of [Start] must not outlive the test binary, yet Go
// tests have no hook that runs at exit unless the package defines TestMain.
// The JVM is therefore started under a small /bin/sh watchdog that holds the
// read end of a pipe whose write end only the test binary holds: when the
// binary exits, however it exits (even kill -9), the kernel closes the write
// end, the watchdog reads EOF, kills the JVM and removes the data directory.
// This needs no goroutine, so goleak.VerifyNone is not disturbed by the
// shared server.
//
// Private servers ([StartCluster], [StartPrivate]) are direct children of
// the test binary in their own process group, killed with SIGKILL at
// t.Cleanup. They are also started with Pdeathsig=SIGKILL. Pdeathsig fires
// when the thread that forked the child exits, not when the process does
// (see https://github.com/golang/go/issues/27505), and Go may end a thread
// whenever a goroutine locked to it exits. So each such child is started
// from a goroutine that locks its OS thread, never unlocks it, and then
// waits for the child: the thread lives exactly as long as the child. The
// goroutine has returned by the time the test's cleanups have run.
package zktest
