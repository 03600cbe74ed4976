package zkrecipes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// sessions records the sessions Supervise hands to run, and lets the test
// end each run.
type sessions struct {
	mu    sync.Mutex
	ids   []int64
	ends  []error // context.Cause of each run's ctx
	calls chan int64
}

func newSessions() *sessions { return &sessions{calls: make(chan int64, 16)} }

// run waits until its ctx ends and records why.
func (r *sessions) run(ctx context.Context, s *zkrecipes.Session) error {
	r.mu.Lock()
	r.ids = append(r.ids, s.ID())
	r.mu.Unlock()
	r.calls <- s.ID()
	<-ctx.Done()
	r.mu.Lock()
	r.ends = append(r.ends, context.Cause(ctx))
	r.mu.Unlock()
	return context.Cause(ctx)
}

func (r *sessions) next(t *testing.T) int64 {
	t.Helper()
	select {
	case id := <-r.calls:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("run was not called again")
		return 0
	}
}

// A connection frozen past the session timeout: run's ctx ends with
// ErrSessionLost, and once the network is back run is called again with a
// new session.
func TestSuperviseFrozenPastExpiry(t *testing.T) {
	srv := setup(t)
	var fz zktest.Freezer
	r := newSessions()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- zkrecipes.Supervise(ctx, srv.Addrs(), r.run,
			zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(2*time.Second))
	}()
	first := r.next(t)
	fz.Freeze()
	time.Sleep(3 * time.Second) // past the timeout: the Session gives itself up
	fz.Thaw()
	second := r.next(t)
	require.NotEqual(t, first, second)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.ErrorIs(t, r.ends[0], zkrecipes.ErrSessionLost)
	require.ErrorIs(t, r.ends[1], context.Canceled)
}

// A session the server expires (the client's own timer pushed past the
// timeout): run's ctx ends with ErrSessionExpired, and run is called again.
// The connection stays frozen until the server has expired the session (its
// ephemeral node is gone), not for a fixed time: when that happens depends
// on the timeout the server grants and on its tickTime, zktest's or those
// of a server ZK_CONNECT names (one that grants no less than 4 s, as by
// default at tickTime 2 s, expires a session 4 to 6 s after its last
// packet).
func TestSuperviseServerSideExpiry(t *testing.T) {
	srv := setup(t)
	var fz zktest.Freezer
	defer fz.Thaw()
	r := newSessions()
	other := connect(t, srv.Addrs())
	p := zktest.Path(t, "")
	created := make(chan error, 1)
	var once sync.Once
	run := func(ctx context.Context, s *zkrecipes.Session) error {
		once.Do(func() {
			_, err := s.Conn().Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			created <- err
		})
		return r.run(ctx, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- zkrecipes.Supervise(ctx, srv.Addrs(), run, zkrecipes.WithDialer(fz.Dial),
			zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithLossFraction(10))
	}()
	first := r.next(t)
	require.NoError(t, <-created)
	fz.Freeze()
	require.Eventually(t, func() bool {
		found, _, err := other.Conn().Exists(p)
		require.NoError(t, err)
		return !found
	}, 2*time.Minute, 50*time.Millisecond, "the server expires the frozen session")
	fz.Thaw()
	second := r.next(t)
	require.NotEqual(t, first, second)
	cancel()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	require.ErrorIs(t, r.ends[0], zkrecipes.ErrSessionExpired)
}

// Supervise returns what run returns, unless that is its session's end.
func TestSuperviseReturns(t *testing.T) {
	srv := setup(t)
	ctx := context.Background()
	boom := errors.New("boom")
	calls := 0
	err := zkrecipes.Supervise(ctx, srv.Addrs(), func(ctx context.Context, s *zkrecipes.Session) error {
		calls++
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls)
	err = zkrecipes.Supervise(ctx, srv.Addrs(), func(ctx context.Context, s *zkrecipes.Session) error { return nil })
	require.NoError(t, err)

	// A session closed by run is no session loss either.
	err = zkrecipes.Supervise(ctx, srv.Addrs(), func(ctx context.Context, s *zkrecipes.Session) error {
		s.Close()
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, zkrecipes.ErrClosed)

	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = zkrecipes.Supervise(cctx, []string{"127.0.0.1:1"}, func(context.Context, *zkrecipes.Session) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing answers: retried until ctx ends")

	err = zkrecipes.Supervise(ctx, srv.Addrs(), nil)
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	err = zkrecipes.Supervise(ctx, srv.Addrs(), func(context.Context, *zkrecipes.Session) error { return nil },
		zkrecipes.WithSessionTimeout(-1))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
}

// There are never two live Sessions of one Supervise: once a session is
// lost, the next is made only after run has returned. Here run goes on for
// a while after its ctx ends (as a slow clean-up does); the next call of
// run must find the previous one returned, and its Session over.
func TestSuperviseNeverTwoSessionsAtOnce(t *testing.T) {
	srv := setup(t)
	var fz zktest.Freezer
	defer fz.Thaw()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		prev     *zkrecipes.Session
		returned bool // the previous run has returned
		overlaps []string
	)
	ended := make(chan struct{}, 1) // the first run's ctx ended
	finish := make(chan struct{})   // lets the first run return
	calls := make(chan int64, 4)
	done := make(chan error, 1)
	go func() {
		done <- zkrecipes.Supervise(ctx, srv.Addrs(), func(rctx context.Context, s *zkrecipes.Session) error {
			mu.Lock()
			first := prev == nil
			if !first {
				if !returned {
					overlaps = append(overlaps, "run called again while the previous run had not returned")
				}
				select {
				case <-prev.Done():
				default:
					overlaps = append(overlaps, "run called with a new Session while the previous one lived")
				}
			}
			prev, returned = s, false
			mu.Unlock()
			calls <- s.ID()
			<-rctx.Done()
			if first {
				ended <- struct{}{}
				<-finish // a slow clean-up
			}
			mu.Lock()
			returned = true
			mu.Unlock()
			return context.Cause(rctx)
		}, zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(2*time.Second))
	}()
	next := func() int64 {
		t.Helper()
		select {
		case id := <-calls:
			return id
		case <-time.After(30 * time.Second):
			t.Fatal("run was not called")
			return 0
		}
	}
	first := next()
	fz.Freeze() // past the timeout: the Session gives itself up
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("run's ctx did not end with its session")
	}
	fz.Thaw()
	// While run is busy, Supervise must not connect again: a call of run
	// now is a second live Session. Give it time to show itself (the
	// back-off's first step is 100 ms), then let run return.
	select {
	case <-calls:
		t.Error("run called again while the previous run was still running")
		close(finish)
	case <-time.After(2 * time.Second):
		close(finish)
		require.NotEqual(t, first, next())
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlaps)
}
