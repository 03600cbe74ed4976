package zktest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errExited is returned when a server process ends while we wait for it.
var errExited = errors.New("zktest: ZooKeeper process exited")

// errWrongVersion is returned when a server started for ZKTEST_VERSION
// reports another release.
var errWrongVersion = errors.New("zktest: ZooKeeper of another release")

// node is one private local server process: a direct child of the test
// binary, in its own process group. Its methods are called with the owning
// Cluster's or Server's mutex held.
type node struct {
	dir     string // data directory, holding zoo.cfg, myid and zookeeper.log
	cfgFile string
	logFile string
	addr    string // 127.0.0.1:clientPort
	// secureAddr is 127.0.0.1:secureClientPort (WithTLS), or "". Once
	// the server answers srvr, wait also waits until it accepts
	// connections there.
	secureAddr string
	// want is the release the server must report (ZKTEST_VERSION, "" for
	// any); version is the one it reported to srvr, once it served.
	want, version string

	pid  int
	done chan struct{} // closed once the process is reaped; nil when never started
}

// newNode writes the configuration of a server into dir.
func newNode(dir string, id int, clientPort int, cfg config, peers []peer) (*node, error) {
	n := &node{
		dir:     dir,
		cfgFile: filepath.Join(dir, "zoo.cfg"),
		logFile: filepath.Join(dir, "zookeeper.log"),
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort)),
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	if len(peers) > 0 {
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("zktest: %w", err)
		}
	}
	if err := os.WriteFile(n.cfgFile, []byte(cfg.render(data, clientPort, peers)), 0o644); err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	return n, nil
}

// running reports whether the process was started and not yet reaped.
func (n *node) running() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// start starts the JVM. The process gets SIGKILL if the thread that forks it
// exits (Pdeathsig), and Go ends a thread when a goroutine locked to it
// returns, so the fork happens in a goroutine that locks its thread for
// good and waits for the process: the thread lives exactly as long as the
// child, and the goroutine returns once the child has been reaped.
func (n *node) start(li *localInstall) error {
	if n.running() {
		return nil
	}
	logf, err := os.OpenFile(n.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "==== zktest: starting %s at %s\n", n.addr, time.Now().Format(time.RFC3339Nano))

	argv := li.command(n.cfgFile)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // killed by us, or died: either way it is gone now
	}()
	if err := <-started; err != nil {
		<-done
		return fmt.Errorf("zktest: start %s: %w", argv[0], err)
	}
	n.pid, n.done, n.want = cmd.Process.Pid, done, li.want
	return nil
}

// kill kills the process group with SIGKILL and returns once the process
// has been reaped (so its ports are closed) and its goroutine has returned.
func (n *node) kill() {
	if !n.running() {
		return
	}
	// The JVM leads its process group (Setpgid); ESRCH just means it has
	// died already.
	_ = syscall.Kill(-n.pid, syscall.SIGKILL)
	<-n.done
}

// wait polls the server with srvr until ok accepts its mode. It fails when
// the process exits or timeout passes.
func (n *node) wait(timeout time.Duration, ok func(mode string) bool) error {
	return n.waitFor(timeout, ok, n.running)
}

// waitFor is wait with alive telling whether the process still runs.
func (n *node) waitFor(timeout time.Duration, ok func(mode string) bool, alive func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if !alive() {
			return fmt.Errorf("%w: %s (see %s)", errExited, n.addr, n.logFile)
		}
		mode, version, err := serverInfo(n.addr, time.Second)
		if err == nil {
			if err := n.saw(version); err != nil {
				return err
			}
		}
		if err == nil && ok(mode) {
			if n.secureAddr == "" {
				return nil
			}
			var c net.Conn
			if c, err = net.DialTimeout("tcp", n.secureAddr, time.Second); err == nil {
				_ = c.Close()
				return nil
			}
		}
		if err == nil {
			err = fmt.Errorf("zktest: %s is in mode %s", n.addr, mode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: %s not ready after %v: %w", n.addr, timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// saw records the version the server reported, and fails when it is not
// of the release ZKTEST_VERSION asks for.
func (n *node) saw(version string) error {
	n.version = version
	if n.want != "" && !strings.HasPrefix(version, n.want+".") {
		return fmt.Errorf("%w: %s=%s, but %s runs ZooKeeper %q (see %s)", errWrongVersion, versionEnv, n.want, n.addr, version, n.logFile)
	}
	return nil
}

// waitUp polls with ruok until the server answers imok (it may still be
// looking for a quorum).
func (n *node) waitUp(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if !n.running() {
			return fmt.Errorf("%w: %s (see %s)", errExited, n.addr, n.logFile)
		}
		reply, err := fourLetter(n.addr, "ruok", time.Second)
		if err == nil && strings.TrimSpace(reply) == "imok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: %s does not answer ruok after %v (last: %q, %v)", n.addr, timeout, reply, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// bindFailed reports whether the server's log says a port was taken.
func (n *node) bindFailed() bool {
	b, err := os.ReadFile(n.logFile)
	return err == nil && strings.Contains(string(b), "Address already in use")
}
