package zktest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// debianJar is where Debian's and Ubuntu's libzookeeper-java put the server.
const debianJar = "/usr/share/java/zookeeper.jar"

// errNoLocal is returned when no local ZooKeeper installation is found.
var errNoLocal = errors.New("zktest: no local ZooKeeper installation (set ZK_HOME or ZOOKEEPER_JAR, or apt-get install zookeeper)")

// errBadInstall is returned when ZK_HOME or ZOOKEEPER_JAR names no usable
// installation: a mistake to report, not a reason to skip.
var errBadInstall = errors.New("zktest: bad local ZooKeeper installation")

// versionEnv names the environment variable that chooses the ZooKeeper
// release zktest runs: 3.8 or 3.9 (see the package doc).
const versionEnv = "ZKTEST_VERSION"

// cacheEnv names the environment variable that moves the cache where
// scripts/zk39-fetch.sh puts ZooKeeper 3.9.
const cacheEnv = "ZKTEST_CACHE"

// localInstall is a runnable local ZooKeeper.
type localInstall struct {
	java      string // path of the java executable
	classpath string
	from      string // where it was found, for messages
	// want is the release ZKTEST_VERSION asks for ("3.8", "3.9"), which
	// every server started must report; "" when it is unset.
	want string
}

// findLocal looks for a local installation once per test binary.
var findLocal = sync.OnceValues(lookLocal)

func lookLocal() (*localInstall, error) {
	java := "java"
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		if p := filepath.Join(jh, "bin", "java"); isFile(p) {
			java = p
		}
	}
	java, err := exec.LookPath(java)
	if err != nil {
		return nil, fmt.Errorf("%w: java not found: %w", errNoLocal, err)
	}
	li, err := lookInstall(java)
	if err != nil {
		return nil, err
	}
	li.want = os.Getenv(versionEnv)
	return li, nil
}

// lookInstall finds the installation ZK_HOME, ZOOKEEPER_JAR or
// ZKTEST_VERSION names, else Debian's.
func lookInstall(java string) (*localInstall, error) {
	switch v := os.Getenv(versionEnv); {
	case v != "" && v != "3.8" && v != "3.9":
		return nil, fmt.Errorf("%w: %s=%s: want 3.8 or 3.9", errBadInstall, versionEnv, v)
	case v == "3.9" && os.Getenv("ZK_HOME") == "" && os.Getenv("ZOOKEEPER_JAR") == "":
		return look39(java)
	}
	if home := os.Getenv("ZK_HOME"); home != "" {
		if !isDir(filepath.Join(home, "lib")) {
			return nil, fmt.Errorf("%w: ZK_HOME=%s has no lib directory", errBadInstall, home)
		}
		// Java expands "dir/*" to the jars of dir. conf holds logback.xml.
		cp := strings.Join([]string{
			filepath.Join(home, "conf"),
			filepath.Join(home, "lib", "*"),
			filepath.Join(home, "*"),
		}, string(os.PathListSeparator))
		return &localInstall{java: java, classpath: cp, from: "ZK_HOME=" + home}, nil
	}

	jar, from := os.Getenv("ZOOKEEPER_JAR"), "ZOOKEEPER_JAR="
	if jar == "" {
		jar, from = debianJar, ""
	}
	if !isFile(jar) {
		if from != "" {
			return nil, fmt.Errorf("%w: ZOOKEEPER_JAR=%s does not exist", errBadInstall, jar)
		}
		return nil, errNoLocal
	}
	// The jar's manifest Class-Path names its dependencies but, on Debian,
	// no slf4j binding: without one the server logs nothing at all.
	cp := jar
	if simple := filepath.Join(filepath.Dir(jar), "slf4j-simple.jar"); isFile(simple) {
		cp += string(os.PathListSeparator) + simple
	}
	// Nor, on Debian, netty-codec, which Netty's TLS handler needs (the
	// secure port of WithTLS): it is in libnetty-java, beside netty-handler.
	if codec := filepath.Join(filepath.Dir(jar), "netty-codec.jar"); isFile(codec) {
		cp += string(os.PathListSeparator) + codec
	}
	return &localInstall{java: java, classpath: cp, from: from + jar}, nil
}

// look39 finds ZooKeeper 3.9 where scripts/zk39-fetch.sh puts it: Debian
// trixie's jars, and a file naming the classpath in the order they need
// (3.9's jute before the 3.8 jute that the server jar's manifest names).
func look39(java string) (*localInstall, error) {
	cache := os.Getenv(cacheEnv)
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("%w: %s=3.9: no cache directory (set %s): %w", errBadInstall, versionEnv, cacheEnv, err)
		}
		cache = filepath.Join(dir, "zkrecipes")
	}
	dir := filepath.Join(cache, "zookeeper-3.9")
	b, err := os.ReadFile(filepath.Join(dir, "classpath"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s=3.9, but no ZooKeeper 3.9 in %s (run scripts/zk39-fetch.sh): %w", errBadInstall, versionEnv, dir, err)
	}
	cp := strings.TrimSpace(string(b))
	for entry := range strings.SplitSeq(cp, string(os.PathListSeparator)) {
		if !isFile(entry) {
			return nil, fmt.Errorf("%w: %s=3.9: %s names %s, which is missing (run scripts/zk39-fetch.sh --force)", errBadInstall, versionEnv, filepath.Join(dir, "classpath"), entry)
		}
	}
	return &localInstall{java: java, classpath: cp, from: dir}, nil
}

// jvmFlags start the JVM fastest with little memory (measured with Java 17
// and ZooKeeper 3.8: about 0.6 s until the server answers srvr).
var jvmFlags = []string{
	"-Xmx256m",
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-XX:-UsePerfData", // no /tmp/hsperfdata_* file
	"-Djava.net.preferIPv4Stack=true",
	// slf4j-simple: timestamps, INFO and above, to stderr (the log file).
	"-Dorg.slf4j.simpleLogger.showDateTime=true",
	"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
	"-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
	// Not a line per four-letter word: zktest polls with srvr.
	"-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn",
	"-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NettyServerCnxn=warn",
}

// command returns the java command line running the server with cfgFile.
func (li *localInstall) command(cfgFile string) []string {
	args := []string{li.java}
	args = append(args, jvmFlags...)
	return append(args, "-cp", li.classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgFile)
}

// Option changes the configuration of the servers started by [StartPrivate]
// and [StartCluster].
type Option func(*config)

// WithTickTime sets tickTime, ZooKeeper's basic time unit (default 2 s for
// [StartPrivate], 500 ms for [StartCluster]). Session expiry is checked once
// per tick.
func WithTickTime(d time.Duration) Option {
	return func(c *config) { c.tickTime = d }
}

// WithSessionTimeouts sets the smallest and largest session timeouts the
// server grants (defaults: 1 s and 60 s).
func WithSessionTimeouts(lowest, highest time.Duration) Option {
	return func(c *config) { c.minSession, c.maxSession = lowest, highest }
}

// WithConfig adds the line key=value to the server's zoo.cfg after the
// lines zktest writes, so it overrides them. A 4lw.commands.whitelist set
// this way must contain srvr and ruok, which zktest uses to see whether the
// server is ready.
func WithConfig(key, value string) Option {
	return func(c *config) { c.extra = append(c.extra, key+"="+value) }
}

// WithTLS makes the server of [StartPrivate] also serve TLS clients on a
// secureClientPort of 127.0.0.1 (see [Server.SecureAddr]), with Netty
// (serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory, for
// both ports), the keystore and truststore of files (see [TLSFiles]), and
// ssl.clientAuth set to clientAuth: "need" (a client must present a
// certificate signed by the CA of files), "want" or "none". The plaintext
// client port stays open: zktest polls it. Add other ssl.* settings with
// [WithConfig].
func WithTLS(files *TLS, clientAuth string) Option {
	return func(c *config) { c.tls = &tlsOption{files, clientAuth} }
}

// tlsLines are the zoo.cfg lines of WithTLS, for secureClientPort port.
func (c config) tlsLines(port int) ([]string, error) {
	f, auth := c.tls.files, c.tls.clientAuth
	switch {
	case f == nil:
		return nil, errors.New("zktest: WithTLS: nil files")
	case auth != "need" && auth != "want" && auth != "none":
		return nil, fmt.Errorf("zktest: WithTLS: client auth %q is none of need, want, none", auth)
	}
	return []string{
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"secureClientPort=" + strconv.Itoa(port),
		"secureClientPortAddress=127.0.0.1",
		"ssl.keyStore.location=" + f.KeyStore,
		"ssl.keyStore.password=" + f.Password,
		"ssl.keyStore.type=PKCS12",
		"ssl.trustStore.location=" + f.TrustStore,
		"ssl.trustStore.password=" + f.Password,
		"ssl.trustStore.type=PKCS12",
		"ssl.clientAuth=" + auth,
	}, nil
}

// config is what goes into zoo.cfg besides ports and directories.
type config struct {
	tickTime   time.Duration
	initLimit  int // in ticks
	syncLimit  int // in ticks
	minSession time.Duration
	maxSession time.Duration
	extra      []string
	tls        *tlsOption // WithTLS: a secureClientPort; nil: none
}

// tlsOption is what WithTLS was given.
type tlsOption struct {
	files      *TLS
	clientAuth string // ssl.clientAuth
}

// standaloneConfig is the configuration of [Start] and [StartPrivate].
func standaloneConfig(opts ...Option) config {
	c := config{
		tickTime:   2 * time.Second,
		initLimit:  10,
		syncLimit:  5,
		minSession: time.Second,
		maxSession: time.Minute,
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// clusterConfig is the configuration of [StartCluster]: a short tick so that
// followers sync fast and sessions expire close to their timeout; initLimit
// 10 s and syncLimit 5 s so that a busy machine does not break the quorum.
// A longer tick from opts keeps those limits in ticks: no shorter in time.
func clusterConfig(opts ...Option) config {
	c := config{
		tickTime:   500 * time.Millisecond,
		initLimit:  20,
		syncLimit:  10,
		minSession: time.Second,
		maxSession: time.Minute,
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// peer is one member of an ensemble as named in zoo.cfg.
type peer struct {
	id                                   int
	clientPort, quorumPort, electionPort int
}

// render returns zoo.cfg for server self. With no peers the server runs
// standalone.
func (c config) render(dataDir string, clientPort int, peers []peer) string {
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	b.WriteString("# written by github.com/zkrecipes/zkrecipes/zktest, for tests only\n")
	line("tickTime", c.tickTime.Milliseconds())
	line("initLimit", c.initLimit)
	line("syncLimit", c.syncLimit)
	line("dataDir", dataDir)
	line("clientPort", clientPort)
	line("clientPortAddress", "127.0.0.1")
	line("minSessionTimeout", c.minSession.Milliseconds())
	line("maxSessionTimeout", c.maxSession.Milliseconds())
	line("4lw.commands.whitelist", "*")
	line("admin.enableServer", "false")
	line("forceSync", "no") // no fsync: tests only, see the package doc
	line("maxClientCnxns", 0)
	line("snapshot.trust.empty", "true")
	line("autopurge.purgeInterval", 0)
	if len(peers) > 0 {
		// A 1-server "ensemble" is a quorum of one, not a standalone server.
		line("standaloneEnabled", "false")
		line("reconfigEnabled", "false")
		for _, p := range peers {
			line("server."+strconv.Itoa(p.id), fmt.Sprintf("127.0.0.1:%d:%d", p.quorumPort, p.electionPort))
		}
	}
	for _, e := range c.extra {
		b.WriteString(e + "\n")
	}
	return b.String()
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// tail returns the last n lines of the file at path, or a note saying why
// it cannot.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
