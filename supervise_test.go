package zkrecipes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
func TestSuperviseServerSideExpiry(t *testing.T) {
	srv := setup(t)
	var fz zktest.Freezer
	r := newSessions()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- zkrecipes.Supervise(ctx, srv.Addrs(), r.run, zkrecipes.WithDialer(fz.Dial),
			zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithLossFraction(10))
	}()
	first := r.next(t)
	fz.Freeze()
	time.Sleep(4 * time.Second) // the server expires the session
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
