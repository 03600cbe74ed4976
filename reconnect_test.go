//go:build !race

package zkrecipes_test

// Tests in which a client reconnects while it has watches set. They run
// without the race detector (make test runs them in a second pass): on such
// a reconnect go-zookeeper v1.0.4 reads Conn.lastZxid in sendSetWatches
// while its receive loop writes it, a data race in the client itself
// (samuel/go-zookeeper#178 and #260, go-zookeeper/zk#35, unfixed in the
// latest release), which -race reports as a failure of whatever test is
// running.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Killing the ensemble's leader mid-run: sessions survive the election, no
// two contenders ever hold the lock at once, and work resumes.
func TestLeaderKilledMidRun(t *testing.T) {
	setup(t)
	cluster := zktest.StartCluster(t, 3)
	path := fmt.Sprintf("/e2e/leader-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var inside atomic.Int32
	var before, after atomic.Int64
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		s := connect(t, cluster.Addrs(), zkrecipes.WithSessionTimeout(15*time.Second), debugLog(t))
		m, _ := zklock.NewMutex(s, path, zklock.WithData([]byte(fmt.Sprint(i))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := m.Lock(lctx)
				lcancel()
				if err != nil {
					if errors.Is(err, zklock.ErrLockLost) || s.Err() != nil {
						t.Errorf("session should survive a leader election: %v", err)
						return
					}
					time.Sleep(50 * time.Millisecond) // the ensemble is electing
					continue
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if killed.Load() {
					after.Add(1)
				} else {
					before.Add(1)
				}
				for {
					err := l.Unlock(ctx)
					if err == nil {
						break
					}
					if errors.Is(err, zklock.ErrLockLost) {
						t.Errorf("lease lost across a leader election: %v", err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	leader := cluster.Leader()
	require.GreaterOrEqual(t, leader, 0)
	killed.Store(true)
	cluster.Stop(leader)
	t.Logf("killed leader %d after %d cycles", leader, before.Load())
	require.Eventually(t, func() bool { return after.Load() >= 50 }, 60*time.Second, 50*time.Millisecond,
		"work resumes after the leader is killed")
	close(stop)
	wg.Wait()
	t.Logf("%d cycles before the kill, %d after", before.Load(), after.Load())
	noNodesLeft(t, cluster.Addrs(), path)
}

// A brief outage, shorter than the session timeout, is not an end: the
// Session reconnects to the same session and keeps going.
func TestSessionSurvivesServerRestart(t *testing.T) {
	setup(t)
	srv := zktest.StartPrivate(t)
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(20*time.Second))
	id := s.ID()
	_, err := s.Conn().Create("/survivor", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	srv.Stop()
	srv.Restart()
	require.Eventually(t, func() bool { return s.Conn().State() == zk.StateHasSession }, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, s.Err())
	require.Equal(t, id, s.Conn().SessionID())
	ok, _, err := s.Conn().Exists("/survivor")
	require.NoError(t, err)
	require.True(t, ok, "the session's ephemeral node survived")
	select {
	case <-s.Done():
		t.Fatal("session ended on a short outage")
	default:
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Err(), zkrecipes.ErrClosed)
	require.NoError(t, s.Close(), "Close is idempotent")
	other := connect(t, srv.Addrs())
	ok, _, err = other.Conn().Exists("/survivor")
	require.NoError(t, err)
	require.False(t, ok, "Close deletes the session's ephemeral nodes")
}

// Supervise around Election.Run, through a full ensemble restart: every
// candidate's session is lost, Supervise makes new ones and Run campaigns
// again, and afterwards exactly one candidate leads.
func TestSuperviseElectionThroughEnsembleRestart(t *testing.T) {
	setup(t)
	cluster := zktest.StartCluster(t, 3)
	path := fmt.Sprintf("/e2e/supervise-%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	leading := map[int]bool{}
	sessions := map[int]map[int64]bool{}
	var wg sync.WaitGroup
	for i := range 2 {
		sessions[i] = map[int64]bool{}
		wg.Go(func() {
			err := zkrecipes.Supervise(ctx, cluster.Addrs(), func(ctx context.Context, s *zkrecipes.Session) error {
				mu.Lock()
				sessions[i][s.ID()] = true
				mu.Unlock()
				el, err := zklock.NewElection(s, path)
				if err != nil {
					return err
				}
				return el.Run(ctx, nil, func(lctx context.Context) error {
					mu.Lock()
					leading[i] = true
					mu.Unlock()
					<-lctx.Done()
					mu.Lock()
					leading[i] = false
					mu.Unlock()
					return nil
				})
			}, zkrecipes.WithSessionTimeout(4*time.Second))
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
	leaders := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range leading {
			if l {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return leaders() == 1 }, 30*time.Second, 20*time.Millisecond)

	for i := range 3 {
		cluster.Stop(i)
	}
	require.Eventually(t, func() bool { return leaders() == 0 }, 30*time.Second, 20*time.Millisecond,
		"with the ensemble down, the leader is told its session is lost")
	for i := range 3 {
		cluster.Restart(i)
	}
	require.Eventually(t, func() bool { return leaders() == 1 }, 60*time.Second, 20*time.Millisecond)
	// Each candidate's new session comes when its client gets through to
	// a restarted server, which may be well after the first one's did (it
	// waits a second after each round of refused attempts).
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sessions[0]) >= 2 && len(sessions[1]) >= 2
	}, 60*time.Second, 20*time.Millisecond, "every candidate is given a new session")
	time.Sleep(time.Second)
	require.Equal(t, 1, leaders(), "still exactly one leader")
	cancel()
	wg.Wait()
}
