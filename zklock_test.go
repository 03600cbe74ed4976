package zkrecipes_test

// End-to-end tests across recipes, with faults injected for real: a holder
// process killed with SIGKILL, a holder's network frozen until its session
// expires, the ensemble's leader killed mid-run.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestMain doubles as a child process for the tests that kill one.
func TestMain(m *testing.M) {
	if os.Getenv("ZKRECIPES_CHILD") == "holder" {
		holdLock()
		return
	}
	os.Exit(zktest.Main(m))
}

// holdLock takes the lock named by the environment, prints its token and
// holds it until killed.
func holdLock() {
	ctx := context.Background()
	timeout, _ := time.ParseDuration(os.Getenv("ZKRECIPES_TIMEOUT"))
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Getenv("ZKRECIPES_ADDRS"), ","), zkrecipes.WithSessionTimeout(timeout))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	m, _ := zklock.NewMutex(s, os.Getenv("ZKRECIPES_PATH"))
	l, err := m.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("token", l.Token())
	select {}
}

func setup(t *testing.T) *zktest.Server {
	t.Helper()
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	return srv
}

func connect(t testing.TB, addrs []string, opts ...zkrecipes.Option) *zkrecipes.Session {
	t.Helper()
	return zktest.Connect(t, addrs, opts...)
}

func noNodesLeft(t *testing.T, addrs []string, dir string) {
	t.Helper()
	s := connect(t, addrs)
	children, _, err := s.Conn().Children(dir)
	if err == nil {
		require.Empty(t, children, "nodes left behind in %s", dir)
	}
	require.NoError(t, s.Close())
}

// A holder process killed with SIGKILL frees the lock once the ensemble
// expires its session, not before.
func TestKilledHolderFreesLockAtSessionExpiry(t *testing.T) {
	srv := setup(t)
	const timeout = 2 * time.Second
	path := fmt.Sprintf("/e2e/killed-%d", time.Now().UnixNano())
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "ZKRECIPES_CHILD=holder", "ZKRECIPES_ADDRS="+strings.Join(srv.Addrs(), ","),
		"ZKRECIPES_PATH="+path, "ZKRECIPES_TIMEOUT="+timeout.String())
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "token "), "child said %q", line)

	s := connect(t, srv.Addrs())
	m, _ := zklock.NewMutex(s, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked, "the child holds the lock")

	require.NoError(t, child.Process.Kill()) // SIGKILL: no goodbye to the server
	killed := time.Now()
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	waited := time.Since(killed)
	t.Logf("lock free %v after SIGKILL (session timeout %v)", waited, timeout)
	// The lock can only be free once the server expires the session, a
	// full timeout after it last heard from the child.
	require.GreaterOrEqual(t, waited, timeout/2)
	require.NoError(t, l.Unlock(ctx))
	noNodesLeft(t, srv.Addrs(), path)
}

// A holder whose network is frozen is told its lease is over (Done closes)
// before any other session can acquire the lock. Both instants are read
// from this process's monotonic clock.
func TestFrozenHolderIsToldBeforeAnotherAcquires(t *testing.T) {
	srv := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := fmt.Sprintf("/e2e/frozen-%d", time.Now().UnixNano())
	var net zktest.Freezer
	defer net.Thaw()
	a := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithDialer(net.Dial))
	b := connect(t, srv.Addrs())
	ma, _ := zklock.NewMutex(a, path)
	mb, _ := zklock.NewMutex(b, path)
	la, err := ma.Lock(ctx)
	require.NoError(t, err)

	var toldAt, acquiredAt time.Time
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-la.Done()
		toldAt = time.Now()
	}()
	var lb *zklock.Lease
	go func() {
		defer wg.Done()
		var err error
		lb, err = mb.Lock(ctx)
		acquiredAt = time.Now()
		assert.NoError(t, err)
	}()
	time.Sleep(200 * time.Millisecond) // b is in line
	frozenAt := time.Now()
	net.Freeze()
	wg.Wait()

	t.Logf("holder told after %v, other acquired after %v (timeout %v)",
		toldAt.Sub(frozenAt), acquiredAt.Sub(frozenAt), a.Timeout())
	require.True(t, toldAt.Before(acquiredAt), "holder told at %v, other acquired at %v", toldAt, acquiredAt)
	require.ErrorIs(t, la.Err(), zklock.ErrLockLost)
	require.ErrorIs(t, la.Err(), zkrecipes.ErrSessionLost)
	require.ErrorIs(t, a.Err(), zkrecipes.ErrSessionLost)
	require.NoError(t, lb.Unlock(ctx))
	net.Thaw()
	noNodesLeft(t, srv.Addrs(), path)
}

// When the ensemble expires the session first (here the client's own loss
// timer is set past the timeout, so the server wins), the Session learns it
// on reconnecting, ends with ErrSessionExpired, and never comes back as a new
// session; its leases end with it.
func TestSessionExpiredByServer(t *testing.T) {
	srv := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := zktest.Path(t, "/e2e")
	var net zktest.Freezer
	defer net.Thaw()
	a := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second),
		zkrecipes.WithDialer(net.Dial), zkrecipes.WithLossFraction(10))
	b := connect(t, srv.Addrs())
	ma, _ := zklock.NewMutex(a, path)
	mb, _ := zklock.NewMutex(b, path)
	la, err := ma.Lock(ctx)
	require.NoError(t, err)
	id := a.ID()

	net.Freeze()
	lb, err := mb.Lock(ctx) // granted once the server expires a's session
	require.NoError(t, err)
	select {
	case <-a.Done():
		t.Fatal("the client gave up first; this test is about the server's expiry")
	default:
	}
	net.Thaw()
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the session never learned it had expired")
	}
	require.ErrorIs(t, a.Err(), zkrecipes.ErrSessionExpired)
	<-la.Done()
	require.ErrorIs(t, la.Err(), zklock.ErrLockLost)
	require.ErrorIs(t, la.Err(), zkrecipes.ErrSessionExpired)
	require.Equal(t, id, a.ID(), "a Session stays bound to its one session id")
	_, err = ma.Lock(ctx)
	require.ErrorIs(t, err, zkrecipes.ErrSessionExpired)
	require.NoError(t, lb.Unlock(ctx))
	noNodesLeft(t, srv.Addrs(), path)
}

// debugLog is a logger for the sessions of a test with faults: what they
// and go-zookeeper said, at debug level, printed only if the test fails.
func debugLog(t *testing.T) zkrecipes.Option {
	var mu sync.Mutex
	var buf bytes.Buffer
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the sessions' log:\n%s", buf.String())
		}
	})
	return zkrecipes.WithLogger(slog.New(h))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
