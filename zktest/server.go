package zktest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a ZooKeeper server, or an existing ensemble, for a test. It is
// made by [Start] (shared by the test binary) or by [StartPrivate] (owned
// by one test).
type Server struct {
	t       testing.TB
	addrs   []string
	logFile string // "" when zktest has no log (ZK_CONNECT, a Source)
	from    string // where the server comes from, for messages
	secure  string // the TLS address ("" without WithTLS)

	mu   sync.Mutex
	node *node // non-nil only for StartPrivate
	li   *localInstall
}

// Addr returns the client address ("host:port") of the server; for an
// ensemble given by ZK_CONNECT, that of its first member. For local servers
// the host is 127.0.0.1.
func (s *Server) Addr() string { return s.addrs[0] }

// Addrs returns the client addresses of every member (one for a single
// server). Join them with "," for a connect string.
func (s *Server) Addrs() []string { return append([]string(nil), s.addrs...) }

// SecureAddr returns the TLS client address ("127.0.0.1:port", the
// secureClientPort) of a server started by [StartPrivate] with [WithTLS];
// "" for any other server.
func (s *Server) SecureAddr() string { return s.secure }

// LogFile returns the path of the server's log file, or "" when zktest does
// not run the server itself (ZK_CONNECT, a [Source]).
func (s *Server) LogFile() string { return s.logFile }

// Stop kills a server made by [StartPrivate] with SIGKILL and returns once
// the process is gone and its port is closed. Stopping a stopped server
// does nothing. On a server from [Start] the test fails: use StartPrivate.
func (s *Server) Stop() {
	s.t.Helper()
	n := s.private("Stop")
	s.mu.Lock()
	defer s.mu.Unlock()
	n.kill()
}

// Restart starts a server made by [StartPrivate] again, with the same data
// directory and port, killing it first if it runs, and returns once it
// serves requests. On a server from [Start] the test fails.
func (s *Server) Restart() {
	s.t.Helper()
	n := s.private("Restart")
	s.mu.Lock()
	defer s.mu.Unlock()
	n.kill()
	if err := n.start(s.li); err != nil {
		s.t.Fatalf("zktest: Restart: %v", err)
	}
	if err := n.wait(startTimeout, isStandalone); err != nil {
		s.t.Fatalf("zktest: Restart: %v", err)
	}
}

func (s *Server) private(method string) *node {
	s.t.Helper()
	if s.node == nil {
		s.t.Fatalf("zktest: %s needs a server of its own; %s is shared (%s): use StartPrivate", method, s.Addr(), s.from)
	}
	return s.node
}

// StartPrivate starts a standalone ZooKeeper server for this test only,
// from a local installation (see the package doc; the test is skipped when
// there is none), and returns once it serves requests. The test may [Server.Stop]
// and [Server.Restart] it. At t.Cleanup it is killed with SIGKILL and its
// data removed; if the test failed, the end of its log is printed first.
//
// Without options it is configured like the local server of [Start]
// (tickTime 2 s, sessions of 1 s to 60 s, every four-letter word allowed).
func StartPrivate(t testing.TB, opts ...Option) *Server {
	t.Helper()
	li := needLocal(t)
	root := t.TempDir()
	s := &Server{t: t, li: li, from: li.from}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.node == nil {
			return
		}
		s.node.kill()
		if t.Failed() {
			t.Logf("zktest: last lines of private server %s log %s:\n%s", s.node.addr, s.node.logFile, tail(s.node.logFile, logTailLines))
		}
	})
	cfg := standaloneConfig(opts...)
	begin := time.Now()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var n *node
		if n, err = startStandalone(li, filepath.Join(root, "try"+strconv.Itoa(attempt)), cfg); n != nil {
			s.mu.Lock()
			s.node = n
			s.mu.Unlock()
		}
		if err == nil {
			s.addrs, s.logFile, s.secure = []string{n.addr}, n.logFile, n.secureAddr
			t.Logf("zktest: started private ZooKeeper %s, ZooKeeper %s, in %v (%s)", n.addr, n.version, time.Since(begin).Round(time.Millisecond), li.from)
			return s
		}
		if n == nil || !n.bindFailed() {
			break
		}
		n.kill() // its port was taken meanwhile: try another one
	}
	t.Fatalf("zktest: StartPrivate: %v", err)
	return nil
}

// startStandalone starts a private standalone server under dir and waits
// until it serves. It returns the node, if one was started, even on error.
func startStandalone(li *localInstall, dir string, cfg config) (*node, error) {
	nports := 1
	if cfg.tls != nil {
		nports = 2 // and a secureClientPort
	}
	ports, err := freePorts(nports)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil {
		lines, err := cfg.tlsLines(ports[1])
		if err != nil {
			return nil, err
		}
		cfg.extra = append(lines, cfg.extra...) // WithConfig's lines last: they override
	}
	n, err := newNode(dir, 0, ports[0], cfg, nil)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil {
		n.secureAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	}
	if err := n.start(li); err != nil {
		return nil, err
	}
	return n, n.wait(startTimeout, isStandalone)
}

// The shared server of Start. It is per test binary: the first Start
// starts it, it is never stopped by zktest, and it dies with the binary (see
// the package doc). A package-level variable is the only place for such a
// fixture without TestMain; shared.mu guards it.
var shared struct {
	mu      sync.Mutex
	started bool
	srv     origin // Start makes a Server of it for each caller
	skip    string // when set, Start skips with this message
	err     error  // when set, Start fails with this error
	// watchdog is the write end of the pipe the JVM's watchdog reads;
	// keeping it referenced keeps it open (an unreachable *os.File is
	// closed by its finalizer) until the process exits.
	watchdog *os.File
}

// errNoServer is the reason for skipping when no server can be had.
var errNoServer = errors.New("zktest: no ZooKeeper available: set ZK_CONNECT, or `apt-get install zookeeper`")

// ErrUnavailable is returned (wrapped) by a [Source] that has no server to
// offer, e.g. because no Docker engine answers: the shared server then
// comes from a local installation.
var ErrUnavailable = errors.New("zktest: source unavailable")

// A Source starts the shared server of a test binary for [StartFrom] and
// [MainFrom], which call it at most once per test binary, under a lock. It
// returns the server's client addresses and where the server comes from,
// for messages ("Docker image zookeeper:3.8"). The server must outlive
// every test of the binary and must not outlive the binary: the Source
// arranges its removal, as zktest does for its local server (see the
// package doc). With no server to offer it returns an error wrapping
// [ErrUnavailable]; any other error fails the tests.
//
// The Docker source, which brings testcontainers-go and the Docker client
// with it, lives in a module of its own, so that this package does not:
// github.com/zkrecipes/zkrecipes/zktest/docker.
type Source func() (addrs []string, from string, err error)

// Start returns the ZooKeeper shared by every test of this test binary,
// starting it on first use; concurrent first calls wait for one start. The
// server comes from ZK_CONNECT, else a local installation (see the package
// doc); without either, the test is skipped.
//
// Tests must not assume an empty tree: they share the server, so each
// should work under a znode path of its own. The server cannot be stopped
// by a test (use [StartPrivate]). If the test fails and zktest runs the
// server locally, the end of the server log is printed.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartFrom(t, nil)
}

// StartFrom is [Start], with src tried between ZK_CONNECT and a local
// installation when the shared server is not started yet. The first call
// of Start, StartFrom or [MainFrom] in a test binary decides where the
// shared server comes from; later calls return that server whatever their
// src. So every test of a binary should call StartFrom with the same src,
// or TestMain should call MainFrom. A nil src is Start.
func StartFrom(t testing.TB, src Source) *Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.started {
		begin := time.Now()
		shared.srv, shared.skip, shared.err = startShared(src)
		shared.started = true
		if shared.err == nil && shared.skip == "" {
			t.Logf("zktest: shared ZooKeeper %v, ZooKeeper %s, ready in %v (%s)", shared.srv.addrs, shared.srv.version, time.Since(begin).Round(time.Millisecond), shared.srv.from)
		}
	}
	srv, skip, err := shared.srv, shared.skip, shared.err
	s := &Server{t: t, addrs: srv.addrs, logFile: srv.logFile, from: srv.from}
	shared.mu.Unlock()

	switch {
	case skip != "":
		t.Skip(skip)
	case err != nil:
		t.Fatalf("zktest: Start: %v", err)
	}
	if s.logFile != "" {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("zktest: last lines of shared server %s log %s:\n%s", s.Addr(), s.logFile, tail(s.logFile, logTailLines))
			}
		})
	}
	return s
}

// origin says where the shared server is.
type origin struct {
	addrs   []string
	logFile string // "" when zktest does not run the server
	from    string // for messages
	version string // what each server reports to srvr, for messages
}

// startShared finds or starts the shared server: ZK_CONNECT, else src
// (when not nil), else a local installation. It returns either the server,
// or a reason to skip, or an error. Called with shared.mu held.
func startShared(src Source) (origin, string, error) {
	if env := os.Getenv("ZK_CONNECT"); strings.TrimSpace(env) != "" {
		var addrs []string
		for a := range strings.SplitSeq(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return origin{addrs: addrs, from: "ZK_CONNECT", version: versionsOf(addrs)}, "", nil
	}
	var unavailable error // src's reason, for the message when nothing else serves
	if src != nil {
		addrs, from, err := src()
		switch {
		case err == nil && len(addrs) == 0:
			return origin{}, "", fmt.Errorf("zktest: source %s gave no address", from)
		case err == nil:
			return origin{addrs: addrs, from: from, version: versionsOf(addrs)}, "", nil
		case !errors.Is(err, ErrUnavailable):
			return origin{}, "", err
		}
		unavailable = err
	}
	li, err := findLocal()
	if errors.Is(err, errNoLocal) {
		if unavailable != nil {
			err = fmt.Errorf("%w; %w", unavailable, err)
		}
		return origin{}, fmt.Sprintf("%v (%v)", errNoServer, err), nil
	}
	if err != nil {
		return origin{}, "", err
	}
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		srv, bindFailed, err := startSharedLocal(li)
		if err == nil {
			if unavailable != nil {
				srv.from += fmt.Sprintf("; not the source: %v", unavailable)
			}
			return srv, "", nil
		}
		last = err
		if !bindFailed {
			break
		}
	}
	return origin{}, "", last
}

// versionsOf asks each server at addrs which release it runs, for
// messages: "3.9.3" for one server, "3.9.3, 3.9.3, 3.9.3" for three, with
// "unknown (why)" for one that does not say.
func versionsOf(addrs []string) string {
	vs := make([]string, len(addrs))
	for i, a := range addrs {
		v, err := serverVersion(a, 2*time.Second)
		if err != nil {
			v = fmt.Sprintf("unknown (%v)", err)
		}
		vs[i] = v
	}
	return strings.Join(vs, ", ")
}

// watchdogScript runs the JVM ("$@") and a watcher that kills it when fd 3
// reaches EOF, i.e. when the test binary, the only holder of the pipe's
// write end, has exited, however it exited. After the watcher's kill (exit
// status 137) it removes the data directory $1. When the JVM dies on its own
// it stops the watcher (which must not kill a pid that may be reused) and
// leaves the directory, so that zktest can show the log.
const watchdogScript = `dir=$1; shift
"$@" 3<&- </dev/null &
jvm=$!
{ read -r _ <&3; [ -d "$dir" ] && kill -9 "$jvm"; } </dev/null >/dev/null 2>&1 &
watch=$!
exec 3<&-
wait "$jvm"
status=$?
if [ "$status" -eq 137 ]; then rm -rf "$dir"; else kill "$watch"; fi 2>/dev/null
exit "$status"
`

// startSharedLocal starts the shared local server under the watchdog and
// waits until it serves. bindFailed reports a port taken meanwhile.
func startSharedLocal(li *localInstall) (srv origin, bindFailed bool, err error) {
	removeStale()
	dir := filepath.Join(os.TempDir(), sharedDirPrefix+strconv.Itoa(os.Getpid()))
	removeAll(dir) // left by an earlier attempt
	ports, err := freePorts(1)
	if err != nil {
		return origin{}, false, err
	}
	n, err := newNode(dir, 0, ports[0], standaloneConfig(), nil)
	if err != nil {
		return origin{}, false, err
	}
	n.want = li.want
	logf, err := os.OpenFile(n.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return origin{}, false, fmt.Errorf("zktest: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe() // both ends close-on-exec: no other child inherits w
	if err != nil {
		return origin{}, false, fmt.Errorf("zktest: %w", err)
	}
	defer r.Close()

	argv := append([]string{"/bin/sh", "-c", watchdogScript, "zktest-watchdog", dir}, li.command(n.cfgFile)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{r} // fd 3
	// Own process group: a ^C meant for `go test` reaches the test binary,
	// whose exit then stops the server through the pipe.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return origin{}, false, fmt.Errorf("zktest: start %s: %w", argv[0], err)
	}
	// Never waited for with cmd.Wait (no goroutine may outlive a test):
	// exited polls it while it starts.
	pid := cmd.Process.Pid
	fail := func(err error) (origin, bool, error) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		w.Close()
		for !exited(pid) {
			time.Sleep(10 * time.Millisecond)
		}
		bindFailed, log := n.bindFailed(), tail(n.logFile, logTailLines)
		removeAll(dir)
		return origin{}, bindFailed, fmt.Errorf("%w; end of its log:\n%s", err, log)
	}
	if err := n.waitFor(startTimeout, isStandalone, func() bool { return !exited(pid) }); err != nil {
		return fail(err)
	}
	shared.watchdog = w
	return origin{addrs: []string{n.addr}, logFile: n.logFile, from: li.from, version: n.version}, false, nil
}

// sharedDirPrefix starts the name of the shared server's directory in
// os.TempDir(); the test binary's pid follows.
const sharedDirPrefix = "zktest-"

// removeStale removes the directories of shared servers whose test binary
// is gone but whose directory was left behind (their JVM died on its own,
// or the watchdog was killed).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), sharedDirPrefix))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			removeAll(d)
		}
	}
}

// removeAll removes dir, ignoring errors; for best-effort cleanups.
func removeAll(dir string) { _ = os.RemoveAll(dir) }

// exited reports whether child pid has exited, reaping it if so.
func exited(pid int) bool {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return got == pid || errors.Is(err, syscall.ECHILD)
}
