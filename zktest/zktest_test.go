package zktest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// noLeaks checks, after every other cleanup of t (servers killed, clients
// closed), that no goroutine is left.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a session on addrs and waits until it is established. The
// connection is closed at t.Cleanup.
func connect(t *testing.T, addrs []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect(addrs, timeout, zk.WithLogger(quietLogger{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	deadline := time.After(settleBound)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-deadline:
			t.Fatalf("no session with %v after %v (state %v)", addrs, settleBound, conn.State())
		}
	}
}

// settleBound is how long these tests give an ensemble to settle (elect,
// serve) before they give up. Not a speed check: ZooKeeper's election can
// go round for tens of seconds on a loaded machine (a server that sees a
// leader only it has not yet agreed on backs off, doubling its wait).
const settleBound = 90 * time.Second

// retry runs op until it succeeds, for up to settleBound: operations fail
// while a client moves to another server.
func retry[T any](t *testing.T, what string, op func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(settleBound)
	for {
		v, err := op()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartSharedServer(t *testing.T) {
	noLeaks(t)
	begin := time.Now()
	srv := zktest.Start(t)
	t.Logf("Start took %v", time.Since(begin))

	again := zktest.Start(t)
	assert.Equal(t, srv.Addrs(), again.Addrs(), "Start must return the one shared server")
	assert.Equal(t, srv.Addr(), srv.Addrs()[0])

	conn := connect(t, srv.Addrs(), 10*time.Second)
	root := fmt.Sprintf("/zktest-%d", time.Now().UnixNano())
	_, err := conn.Create(root, []byte("hello"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	data, _, err := conn.Get(root)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(data))
	require.NoError(t, conn.Delete(root, -1))
	ok, _, err := conn.Exists(root)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestFourLetter(t *testing.T) {
	noLeaks(t)
	srv := zktest.Start(t)
	reply, err := zktest.FourLetter(srv.Addr(), "ruok")
	if errors.Is(err, zktest.ErrNotWhitelisted) {
		t.Skipf("server %s does not allow ruok", srv.Addr())
	}
	require.NoError(t, err)
	assert.Equal(t, "imok", strings.TrimSpace(reply))

	for _, cmd := range []string{"srvr", "mntr", "wchp"} {
		reply, err := zktest.FourLetter(srv.Addr(), cmd)
		if errors.Is(err, zktest.ErrNotWhitelisted) {
			continue
		}
		require.NoError(t, err, cmd)
		assert.NotEmpty(t, reply, cmd)
	}

	_, err = zktest.FourLetter(srv.Addr(), "toolong")
	assert.Error(t, err)
}

func TestPrivateStopRestart(t *testing.T) {
	noLeaks(t)
	srv := zktest.StartPrivate(t)
	require.Len(t, srv.Addrs(), 1)
	require.NotEmpty(t, srv.LogFile())

	// A zkrecipes Session, not a bare go-zookeeper client: a server that is
	// still starting may accept a connection and never answer its
	// handshake, and go-zookeeper alone would wait over a minute for it.
	s := zktest.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(20*time.Second))
	conn := s.Conn()
	_, err := conn.Create("/persistent", []byte("kept"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = conn.Create("/ephemeral", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	session := conn.SessionID()

	srv.Stop()
	_, err = zktest.FourLetter(srv.Addr(), "ruok")
	require.Error(t, err, "a stopped server must not answer")
	srv.Stop() // stopping twice does nothing

	begin := time.Now()
	srv.Restart()
	t.Logf("Restart took %v", time.Since(begin))
	reply, err := zktest.FourLetter(srv.Addr(), "ruok")
	require.NoError(t, err)
	assert.Equal(t, "imok", reply)

	// Same data directory: the node is still there, and the session (and
	// so its ephemeral node) survived, as the restart took less than its
	// timeout.
	data := retry(t, "get /persistent", func() ([]byte, error) {
		d, _, err := conn.Get("/persistent")
		return d, err
	})
	assert.Equal(t, "kept", string(data))
	ok := retry(t, "exists /ephemeral", func() (bool, error) {
		ok, _, err := conn.Exists("/ephemeral")
		return ok, err
	})
	assert.True(t, ok)
	assert.Equal(t, session, conn.SessionID())
	assert.NoError(t, s.Err())
}

func TestCluster(t *testing.T) {
	noLeaks(t)
	begin := time.Now()
	c := zktest.StartCluster(t, 3)
	t.Logf("StartCluster(3) took %v", time.Since(begin))

	addrs := c.Addrs()
	require.Len(t, addrs, 3)
	for i, a := range addrs {
		assert.Equal(t, a, c.Addr(i))
		assert.True(t, strings.HasPrefix(a, "127.0.0.1:"), a)
		assert.True(t, c.Running(i))
	}
	leader := c.Leader()
	require.GreaterOrEqual(t, leader, 0, "a started cluster has a leader")
	assert.Equal(t, leader, c.WaitForLeader())
	modes := map[string]int{}
	for _, a := range addrs {
		reply, err := zktest.FourLetter(a, "srvr")
		require.NoError(t, err)
		for line := range strings.Lines(reply) {
			if m, ok := strings.CutPrefix(line, "Mode: "); ok {
				modes[strings.TrimSpace(m)]++
			}
		}
	}
	assert.Equal(t, map[string]int{"leader": 1, "follower": 2}, modes)

	conn := connect(t, addrs, 4*time.Second)
	_, err := conn.Create("/before", []byte("v1"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	// Kill the leader: the two others elect a new one and keep the data.
	begin = time.Now()
	c.Stop(leader)
	assert.False(t, c.Running(leader))
	_, err = zktest.FourLetter(c.Addr(leader), "ruok")
	require.Error(t, err, "a stopped server must not answer")
	newLeader := c.WaitForLeader()
	t.Logf("new leader %d elected %v after killing leader %d", newLeader, time.Since(begin), leader)
	assert.NotEqual(t, leader, newLeader)
	assert.Equal(t, newLeader, c.Leader())

	data := retry(t, "get /before", func() ([]byte, error) {
		d, _, err := conn.Get("/before")
		return d, err
	})
	assert.Equal(t, "v1", string(data))
	retry(t, "create /during", func() (string, error) {
		p, err := conn.Create("/during", []byte("v2"), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return p, nil // an earlier try did create it
		}
		return p, err
	})

	// Bring the old leader back: it rejoins as a follower and catches up.
	begin = time.Now()
	c.Restart(leader)
	t.Logf("Restart(%d) took %v", leader, time.Since(begin))
	assert.True(t, c.Running(leader))
	assert.Equal(t, newLeader, c.WaitForLeader())
	only := connect(t, []string{c.Addr(leader)}, 4*time.Second)
	_, err = only.Sync("/")
	require.NoError(t, err)
	data, _, err = only.Get("/during")
	require.NoError(t, err)
	assert.Equal(t, "v2", string(data))
}

func TestClusterLosesQuorum(t *testing.T) {
	noLeaks(t)
	c := zktest.StartCluster(t, 3)
	leader := c.Leader()
	require.GreaterOrEqual(t, leader, 0)
	a, b := (leader+1)%3, (leader+2)%3

	c.Stop(a)
	c.Stop(b)
	// The leader alone has no quorum: it stops leading.
	deadline := time.Now().Add(30 * time.Second)
	for c.Leader() >= 0 {
		require.True(t, time.Now().Before(deadline), "a lone server kept leading")
		time.Sleep(50 * time.Millisecond)
	}
	_, err := zktest.FourLetter(c.Addr(leader), "srvr")
	assert.ErrorIs(t, err, zktest.ErrNotServing)

	c.Restart(a) // quorum again: returns once a serves
	got := c.WaitForLeader()
	assert.Contains(t, []int{leader, a}, got)
	c.Restart(b)
	c.WaitForLeader()
}

// Pdeathsig fires when the thread that forked the child exits, and Go ends
// the thread of a goroutine that exits while locked to it. Servers must
// survive such threads ending.
func TestServersSurviveThreadExits(t *testing.T) {
	noLeaks(t)
	c := zktest.StartCluster(t, 1)
	p := zktest.StartPrivate(t)
	shared := zktest.Start(t)
	for range 100 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			close(done)
		}()
		<-done
	}
	time.Sleep(500 * time.Millisecond) // SIGKILL, if sent, has landed by now
	assert.True(t, c.Running(0))
	for _, addr := range []string{c.Addr(0), p.Addr(), shared.Addr()} {
		_, err := zktest.FourLetter(addr, "srvr")
		if errors.Is(err, zktest.ErrNotWhitelisted) {
			continue
		}
		assert.NoError(t, err, addr)
	}
}

func TestSingleServerCluster(t *testing.T) {
	noLeaks(t)
	c := zktest.StartCluster(t, 1)
	assert.Equal(t, 0, c.Leader())
}

// StartCluster's options reach every member's configuration.
func TestClusterOptions(t *testing.T) {
	noLeaks(t)
	c := zktest.StartCluster(t, 1, zktest.WithTickTime(1500*time.Millisecond), zktest.WithSessionTimeouts(3*time.Second, 30*time.Second))
	conf, err := zktest.FourLetter(c.Addr(0), "conf")
	require.NoError(t, err)
	assert.Contains(t, conf, "tickTime=1500\n")
	assert.Contains(t, conf, "minSessionTimeout=3000\n")
	assert.Contains(t, conf, "maxSessionTimeout=30000\n")
}

// The user's test of example_test.go runs, as a user's would.
func TestExampleUserTest(t *testing.T) { testWriteReport(t) }
