package zktest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeouts for servers to become ready. Generous: three JVMs starting on a
// loaded CI machine are slow.
const (
	startTimeout  = 60 * time.Second
	leaderTimeout = 30 * time.Second
)

// logTailLines is how many lines of each server log a failed test prints.
const logTailLines = 60

// Cluster is a ZooKeeper ensemble private to one test, made by
// [StartCluster]. Its methods may be called from several goroutines; they
// must not be called after the test has ended.
type Cluster struct {
	t     testing.TB
	li    *localInstall
	mu    sync.Mutex
	nodes []*node
	links *links // proxies between members; nil but for StartLinkedCluster
	cfg   config // every member's
}

// StartCluster starts n ZooKeeper servers (n >= 1) forming one ensemble on
// 127.0.0.1 and returns once every server serves requests and one of them is
// the leader. The servers use a local installation (see the package doc;
// ZK_CONNECT and Sources are not used because servers must be killed and
// restarted); the test is skipped when there is none.
//
// The servers belong to the test: at t.Cleanup they are killed with SIGKILL
// and waited for, and their data directories are removed. If the test
// failed, the end of each server's log is printed first.
//
// Options change every server's configuration as for [StartPrivate] (e.g.
// [WithTickTime] for measurements at ZooKeeper's default tick), except
// [WithTLS], which fails the test.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return startCluster(t, n, nil, opts...)
}

func startCluster(t testing.TB, n int, ln *links, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("zktest: StartCluster(%d): need at least one server", n)
	}
	cfg := clusterConfig(opts...)
	if cfg.tls != nil {
		t.Fatalf("zktest: StartCluster: WithTLS is for StartPrivate only")
	}
	li := needLocal(t)
	c := &Cluster{t: t, li: li, links: ln, cfg: cfg}
	root := t.TempDir()
	t.Cleanup(c.cleanup) // runs before t.TempDir's removal

	begin := time.Now()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = c.tryStart(filepath.Join(root, "try"+strconv.Itoa(attempt)), n); err == nil {
			t.Logf("zktest: started %d-server ensemble %v, ZooKeeper %s, in %v (%s)", n, c.Addrs(), c.versions(), time.Since(begin).Round(time.Millisecond), li.from)
			return c
		}
		if !c.bindFailed() {
			break
		}
		c.killAll() // a port was taken meanwhile: try other ports
	}
	t.Fatalf("zktest: StartCluster(%d): %v", n, err)
	return nil
}

// tryStart starts n fresh servers under dir and waits for a leader.
func (c *Cluster) tryStart(dir string, n int) error {
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	peers := make([]peer, n)
	for i := range peers {
		peers[i] = peer{id: i + 1, clientPort: ports[3*i], quorumPort: ports[3*i+1], electionPort: ports[3*i+2]}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = make([]*node, n)
	for i, p := range peers {
		view, err := c.view(i, peers)
		if err != nil {
			return err
		}
		nd, err := newNode(filepath.Join(dir, "server"+strconv.Itoa(i)), p.id, p.clientPort, c.cfg, view)
		if err != nil {
			return err
		}
		c.nodes[i] = nd
	}
	for _, nd := range c.nodes {
		if err := nd.start(c.li); err != nil {
			return err
		}
	}
	_, err = c.waitLeaderLocked(startTimeout)
	return err
}

// Addrs returns the client addresses ("127.0.0.1:port") of the servers, in
// server order, stopped ones included. Join them with "," for a connect
// string.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		addrs[i] = nd.addr
	}
	return addrs
}

// Addr returns the client address of server i (0-based).
func (c *Cluster) Addr(i int) string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.node(i).addr
}

// LogFile returns the path of server i's log file.
func (c *Cluster) LogFile(i int) string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.node(i).logFile
}

// Running reports whether server i's process is alive (it may still be
// electing a leader or syncing).
func (c *Cluster) Running(i int) bool {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.node(i).running()
}

// Stop kills server i with SIGKILL (its whole process group) and returns
// once the process is gone and its ports are closed. Stopping a stopped
// server does nothing.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.node(i).kill()
}

// Restart starts server i again, with the same data directory and ports,
// and returns once it serves requests as leader or follower. When too few
// servers are running for a quorum, it returns as soon as the server answers
// ruok instead. A running server is killed first. The test fails if the
// server is not ready within a minute.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.node(i)
	nd.kill()
	if err := nd.start(c.li); err != nil {
		c.t.Fatalf("zktest: Restart(%d): %v", i, err)
	}
	var err error
	if 2*c.liveLocked() > len(c.nodes) {
		err = nd.wait(startTimeout, isMember)
	} else {
		err = nd.waitUp(startTimeout)
	}
	if err != nil {
		c.t.Fatalf("zktest: Restart(%d): %v", i, err)
	}
}

// Leader returns the index of the server that currently says (to srvr) it
// is the leader, or -1 when no running server does, e.g. during an election.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, nd := range c.nodes {
		if !nd.running() {
			continue
		}
		if mode, err := serverMode(nd.addr, time.Second); err == nil && mode == "leader" {
			return i
		}
	}
	return -1
}

// WaitForLeader waits until every running server serves requests and
// exactly one of them is the leader, and returns the leader's index. The
// test fails after 30 seconds, e.g. when too few servers run for a quorum.
func (c *Cluster) WaitForLeader() int {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	leader, err := c.waitLeaderLocked(leaderTimeout)
	if err != nil {
		c.t.Fatalf("zktest: WaitForLeader: %v", err)
	}
	return leader
}

// errNoLeader is returned when an ensemble has no leader in time.
var errNoLeader = errors.New("zktest: no leader elected")

func (c *Cluster) waitLeaderLocked(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		leader, err := c.pollLocked()
		if err == nil {
			return leader, nil
		}
		if errors.Is(err, errExited) || errors.Is(err, errWrongVersion) || time.Now().After(deadline) {
			return -1, fmt.Errorf("%w after %v: %w", errNoLeader, timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// pollLocked asks every running server for its mode once and returns the
// leader's index if all serve and exactly one leads.
func (c *Cluster) pollLocked() (int, error) {
	leader, live := -1, 0
	for i, nd := range c.nodes {
		if nd.done == nil {
			continue // never started (only during tryStart errors)
		}
		if !nd.running() {
			continue
		}
		live++
		mode, version, err := serverInfo(nd.addr, time.Second)
		if err != nil {
			return -1, err
		}
		if err := nd.saw(version); err != nil {
			return -1, err
		}
		switch mode {
		case "leader":
			if leader >= 0 {
				return -1, fmt.Errorf("zktest: servers %d and %d both lead", leader, i)
			}
			leader = i
		case "follower", "observer":
		default:
			return -1, fmt.Errorf("zktest: server %d is in mode %s", i, mode)
		}
	}
	if leader < 0 {
		return -1, fmt.Errorf("zktest: %d running servers, none leads", live)
	}
	return leader, nil
}

// versions returns the release each server reported, in server order
// ("3.9.3, 3.9.3, 3.9.3").
func (c *Cluster) versions() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		vs[i] = nd.version
	}
	return strings.Join(vs, ", ")
}

func (c *Cluster) liveLocked() int {
	live := 0
	for _, nd := range c.nodes {
		if nd.running() {
			live++
		}
	}
	return live
}

func (c *Cluster) node(i int) *node {
	c.t.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("zktest: no server %d in a %d-server cluster", i, len(c.nodes))
	}
	return c.nodes[i]
}

func (c *Cluster) bindFailed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd != nil && nd.bindFailed() {
			return true
		}
	}
	return false
}

func (c *Cluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd != nil {
			nd.kill()
		}
	}
}

// cleanup kills every server, and first prints the ends of their logs if
// the test failed.
func (c *Cluster) cleanup() {
	c.killAll()
	if c.t.Failed() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, nd := range c.nodes {
			if nd != nil {
				c.t.Logf("zktest: last lines of server %d (%s) log %s:\n%s", i, nd.addr, nd.logFile, tail(nd.logFile, logTailLines))
			}
		}
	}
}

func isMember(mode string) bool { return mode == "leader" || mode == "follower" || mode == "observer" }

func isStandalone(mode string) bool { return mode == "standalone" }

// needLocal returns the local installation or skips the test.
func needLocal(t testing.TB) *localInstall {
	t.Helper()
	li, err := findLocal()
	switch {
	case errors.Is(err, errNoLocal):
		t.Skipf("zktest: no ZooKeeper available for a private server: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	return li
}
