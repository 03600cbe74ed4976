package zkrecipes_test

// End-to-end tests across recipes, with faults injected for real: a holder
// process killed with SIGKILL, a holder's network frozen until its session
// expires, the ensemble's leader killed mid-run.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
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

// When an ensemble expires a stopped client's session, the follower it is
// connected to deletes the client's ephemeral node, and tells the client's
// own watch on it, before it closes the connection. A client that wakes
// (here: its network stalled, then let through at once, as for SIGSTOP and
// SIGCONT) and releases reads that deletion just as its release fails on the
// closed connection: the node is gone and a release was sent, yet the
// release deleted nothing. It must not be reported done: an Ack says its
// outcome is unknown (another consumer has the item by then), an Unlock that
// the lease was lost. (Found by the chaos suite: an item acked twice.)
//
// The follower does not always send the deletion before it closes, so each
// case is played several times.
func TestReleaseMeetsExpiryDeletion(t *testing.T) {
	cluster := zktest.StartCluster(t, 3)
	zktest.CheckGoroutines(t)
	addrs := cluster.Addrs()
	follower := (cluster.Leader() + 1) % len(addrs)
	// hold makes session a hold a node that its owner watches with
	// getData; b takes over once a's session is expired.
	type holding struct {
		watched  string                          // a path under a's node's watch
		takeOver func(ctx context.Context) error // b's take-over, and its release
		release  func(ctx context.Context) error // a's release
		left     func(t *testing.T) []string     // what is left behind
	}
	cases := []struct {
		name  string
		hold  func(t *testing.T, ctx context.Context, path string, a, b *zkrecipes.Session) holding
		check func(t *testing.T, err error)
	}{
		{
			name: "Job.Ack",
			hold: func(t *testing.T, ctx context.Context, path string, a, b *zkrecipes.Session) holding {
				qa, err := fairqueue.New(a, path)
				require.NoError(t, err)
				qb, err := fairqueue.New(b, path)
				require.NoError(t, err)
				_, err = qb.Put(ctx, []byte("x"))
				require.NoError(t, err)
				j, err := qa.Take(ctx)
				require.NoError(t, err)
				return holding{
					// a's inbox, where its delivery is written, watched by
					// a's reader.
					watched: path + "/consumers/",
					takeOver: func(ctx context.Context) error {
						jb, err := qb.Take(ctx)
						if err != nil {
							return err
						}
						if jb.Attempt() != 2 {
							return fmt.Errorf("b's delivery is attempt %d, want 2", jb.Attempt())
						}
						return jb.Ack(ctx)
					},
					release: j.Ack,
					left: func(t *testing.T) []string {
						// b's inbox and election node go with its Queue.
						require.NoError(t, qb.Close(context.Background()))
						return queueLeft(t, b.Conn(), path)
					},
				}
			},
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown, "an Ack that met the expiry")
				require.NotErrorIs(t, err, fairqueue.ErrClaimLost)
			},
		},
		{
			name: "Lease.Unlock",
			hold: func(t *testing.T, ctx context.Context, path string, a, b *zkrecipes.Session) holding {
				ma, err := zklock.NewMutex(a, path)
				require.NoError(t, err)
				mb, err := zklock.NewMutex(b, path)
				require.NoError(t, err)
				// a waits behind b, so a holds with its node's own watch
				// (an uncontended lease watches the directory instead).
				lb, err := mb.Lock(ctx)
				require.NoError(t, err)
				got := make(chan *zklock.Lease, 1)
				go func() {
					l, err := ma.Lock(ctx)
					assert.NoError(t, err)
					got <- l
				}()
				require.Eventually(t, func() bool {
					cs, err := mb.Contenders(ctx)
					return err == nil && len(cs) == 2
				}, 10*time.Second, 5*time.Millisecond)
				require.NoError(t, lb.Unlock(ctx))
				la := <-got
				require.NotNil(t, la)
				return holding{
					watched: la.Path(),
					takeOver: func(ctx context.Context) error {
						l, err := mb.Lock(ctx)
						if err != nil {
							return err
						}
						return l.Unlock(ctx)
					},
					release: la.Unlock,
					left: func(t *testing.T) []string {
						names, _, err := b.Conn().Children(path)
						if errors.Is(err, zk.ErrNoNode) {
							return nil
						}
						require.NoError(t, err)
						return names
					},
				}
			},
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, zklock.ErrLockLost, "an Unlock that met the expiry")
			},
		},
	}
	const rounds = 3
	for _, c := range cases {
		for round := range rounds {
			t.Run(fmt.Sprintf("%s/%d", c.name, round), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				path := zktest.Path(t, "/e2e-expiry")
				var net zktest.Freezer
				defer net.Thaw()
				// a talks to one follower only. Its own loss timer is set past
				// the timeout: the ensemble expires the session first, as for
				// a stopped process.
				a := connect(t, []string{cluster.Addr(follower)}, zkrecipes.WithSessionTimeout(2*time.Second),
					zkrecipes.WithDialer(net.Dial), zkrecipes.WithLossFraction(10), debugLog(t))
				b := connect(t, addrs)
				h := c.hold(t, ctx, path, a, b)
				require.Eventually(t, func() bool {
					out, err := zktest.FourLetter(cluster.Addr(follower), "wchp")
					return err == nil && strings.Contains(out, h.watched)
				}, 10*time.Second, 5*time.Millisecond, "a's node is never watched")

				net.Stall()
				require.NoError(t, h.takeOver(ctx), "b takes over once the server expires a's session")
				released := make(chan error, 1)
				go func() { released <- h.release(ctx) }()
				// Let a's release reach the stalled connection, so that it
				// is sent as the connection thaws.
				time.Sleep(100 * time.Millisecond)
				select {
				case <-a.Done():
					t.Fatal("the client gave up first; this test is about the server's expiry")
				default:
				}
				net.Thaw()
				err := <-released
				t.Logf("a's release: %v", err)
				c.check(t, err)
				<-a.Done()
				require.ErrorIs(t, a.Err(), zkrecipes.ErrSessionExpired)
				require.Empty(t, h.left(t), "nodes left behind")
			})
		}
	}
}

// queueLeft lists what a queue at p holds: items, tickets, inboxes,
// dispatcher candidates, dead letters, held-back items and keys (its
// directories are containers, which the server reaps once empty).
func queueLeft(t *testing.T, c *zk.Conn, p string) []string {
	var out []string
	children := func(dir string) []string {
		names, _, err := c.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		require.NoError(t, err)
		for i := range names {
			names[i] = dir + "/" + names[i]
		}
		return names
	}
	for _, d := range []string{"ready", "consumers", "dispatch", "dead", "held", "delayed", "keys"} {
		out = append(out, children(p+"/"+d)...)
	}
	for _, bucket := range children(p + "/items") {
		out = append(out, children(bucket)...)
	}
	return out
}
