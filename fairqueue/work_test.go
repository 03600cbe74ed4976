package fairqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// work runs Work on q in the background until the test's clean-up, and
// returns a function that stops it and returns its error.
func work(t *testing.T, ctx context.Context, q *fairqueue.Queue, h fairqueue.Handler, opts ...fairqueue.WorkOption) func() error {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- q.Work(wctx, h, opts...) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Work runs the handler on every job, several at once, acks what it
// finished, and stands in line again in the multi of its acks: while jobs
// wait, most creates that put its node in line ride with acks (one goes
// alone when Work was served fewer jobs than it had handlers free, and
// stands in line again for the others at once).
func TestWorkAcksAndJoinsWithTheAcks(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	var w wire
	q := fq(t, connect(t, srv.Addrs(), zkrecipes.WithDialer(w.Dial)), p)
	ps := connect(t, srv.Addrs())
	producer := fq(t, ps, p)
	const n = 60
	var mu sync.Mutex
	done := map[string]int{}
	all := make(chan struct{})
	var batch [][]byte
	for i := range n {
		batch = append(batch, fmt.Appendf(nil, "%d", i))
	}
	_, err := producer.PutMany(ctx, batch)
	require.NoError(t, err)
	stop := work(t, ctx, q, func(ctx context.Context, j *fairqueue.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if done[string(j.Data())]++; len(done) == n {
			close(all)
		}
		return nil
	}, fairqueue.WithHandlers(4))
	select {
	case <-all:
	case <-time.After(liveWait):
		t.Fatalf("%d of %d jobs done", len(done), n)
	}
	require.ErrorIs(t, stop(), context.Canceled)
	for d, k := range done {
		require.Equal(t, 1, k, "job %s done %d times", d, k)
	}
	_, err = producer.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "every job acked")
	joinsAlone := w.count(func(m *sentMulti) bool { return m.has(1, "/ready/") && !m.has(2, "/items/") })
	joinsWithAcks := w.count(func(m *sentMulti) bool { return m.has(1, "/ready/") && m.has(2, "/items/") })
	t.Logf("joins: %d with acks, %d alone", joinsWithAcks, joinsAlone)
	require.Greater(t, joinsWithAcks, joinsAlone, "joins that ride with acks")
	require.Eventually(t, func() bool { return len(names(t, ps, p+"/ready")) == 0 }, liveWait, 5*time.Millisecond,
		"Work left its tickets in line")
}

// A handler's error gives the job back, held for the back-off, doubling
// with each delivery; a panic is recovered and counts as an error; after
// WithMaxAttempts deliveries the job goes to the dead letters.
func TestWorkFailuresBackOffAndDie(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	q := fq(t, connect(t, srv.Addrs()), p, fairqueue.WithMaxAttempts(3))
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	const backoff = 200 * time.Millisecond
	var mu sync.Mutex
	var at []time.Time
	var attempts []int
	third := make(chan struct{})
	stop := work(t, ctx, q, func(ctx context.Context, j *fairqueue.Job) error {
		mu.Lock()
		at, attempts = append(at, time.Now()), append(attempts, j.Attempt())
		n := len(at)
		mu.Unlock()
		switch n {
		case 1:
			return errors.New("failed")
		case 2:
			panic("boom")
		}
		close(third)
		return errors.New("failed again")
	}, fairqueue.WithBackoff(backoff, time.Minute))
	select {
	case <-third:
	case <-time.After(liveWait):
		t.Fatal("the job was not delivered three times")
	}
	var dead []fairqueue.DeadLetter
	require.Eventually(t, func() bool {
		dead, err = q.DeadLetters(ctx)
		return err == nil && len(dead) == 1
	}, liveWait, 10*time.Millisecond)
	require.ErrorIs(t, stop(), context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, attempts)
	require.GreaterOrEqual(t, at[1].Sub(at[0]), backoff, "held back after the error")
	require.GreaterOrEqual(t, at[2].Sub(at[1]), 2*backoff, "held back twice as long after the panic")
	require.Equal(t, id, dead[0].ID)
	require.Equal(t, 3, dead[0].Attempts)
	_, err = q.Requeue(ctx, id)
	require.NoError(t, err)
	drain(t, q, 1)
}

// When Work's ctx ends, it returns with ctx's cause once its handlers have
// returned; a job whose handler was running is given back at once (no
// back-off), and nothing of Work's stays in line.
func TestWorkStopsAndGivesBack(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	q := fq(t, connect(t, srv.Addrs()), p)
	other := connect(t, srv.Addrs())
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	running := make(chan struct{})
	var calls atomic.Int32
	stop := work(t, ctx, q, func(ctx context.Context, j *fairqueue.Job) error {
		calls.Add(1)
		close(running)
		<-ctx.Done()
		return ctx.Err()
	}, fairqueue.WithHandlers(3), fairqueue.WithBackoff(time.Hour, time.Hour))
	<-running
	require.ErrorIs(t, stop(), context.Canceled)
	j := takeWithin(t, fq(t, other, p), other, p, "the job given back")
	require.Equal(t, id, j.ID())
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	require.Equal(t, int32(1), calls.Load())
	require.Empty(t, names(t, other, p+"/ready"))
}

// fourJobs is a consumer q with the jobs "0" to "3" put for it in one
// PutMany, by producer on another session; a handler that begins a job
// with begin waits for its release.
type fourJobs struct {
	q, producer *fairqueue.Queue
	other       *zkrecipes.Session
	release     map[string]chan struct{}
	started     chan struct{}
	mu          sync.Mutex
	item        map[string]string // a job's data: its item's path
}

func newFourJobs(t *testing.T, ctx context.Context, srv *zktest.Server, p string) *fourJobs {
	f := &fourJobs{q: fq(t, connect(t, srv.Addrs()), p), other: connect(t, srv.Addrs()),
		release: map[string]chan struct{}{}, started: make(chan struct{}, 4), item: map[string]string{}}
	f.producer = fq(t, f.other, p)
	var batch [][]byte
	for _, d := range []string{"0", "1", "2", "3"} {
		batch = append(batch, []byte(d))
		f.release[d] = make(chan struct{})
	}
	_, err := f.producer.PutMany(ctx, batch)
	require.NoError(t, err)
	return f
}

// begin notes j's item, tells that j started, and returns j's release.
func (f *fourJobs) begin(j *fairqueue.Job) <-chan struct{} {
	f.mu.Lock()
	f.item[string(j.Data())] = j.Guard().Path
	f.mu.Unlock()
	f.started <- struct{}{}
	return f.release[string(j.Data())]
}

// started2 waits until two more jobs have begun.
func (f *fourJobs) started2(t *testing.T) {
	for range 2 {
		recv(t, f.started, "the jobs to start")
	}
}

// allStarted waits until the four jobs have begun.
func (f *fourJobs) allStarted(t *testing.T) {
	for range 4 {
		recv(t, f.started, "the jobs to start")
	}
}

// acked says whether job d's item is gone.
func (f *fourJobs) acked(t *testing.T, d string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok, _, err := f.other.Conn().Exists(f.item[d])
	require.NoError(t, err)
	return !ok
}

// Work acks in lots of one job per handler: a finished job's ack waits for
// the lot's other job, and both go out once it is done; when Work stops,
// an ack still waiting for its lot is sent (nothing finished is left
// unacked), and a job whose handler ended with Work is given back.
func TestWorkAcksInLots(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	f := newFourJobs(t, ctx, srv, p)
	q, other, producer, release := f.q, f.other, f.producer, f.release
	stop := work(t, ctx, q, func(ctx context.Context, j *fairqueue.Job) error {
		select {
		case <-f.begin(j):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, fairqueue.WithHandlers(2), fairqueue.WithPrefetch(0), fairqueue.WithAckLinger(time.Hour),
		fairqueue.WithBackoff(time.Hour, time.Hour))
	f.started2(t)
	acked := func(d string) bool { return f.acked(t, d) }
	close(release["0"])
	require.Never(t, func() bool { return acked("0") }, 300*time.Millisecond, 10*time.Millisecond,
		"job 0 acked alone: a lot is 2 jobs (2 handlers)")
	close(release["1"])
	require.Eventually(t, func() bool { return acked("0") && acked("1") }, liveWait, 5*time.Millisecond,
		"the lot of jobs 0 and 1 acked")
	f.started2(t) // jobs 2 and 3, on the ticket the lot's ack put in line
	close(release["2"])
	require.Never(t, func() bool { return acked("2") }, 300*time.Millisecond, 10*time.Millisecond,
		"job 2 acked alone")
	require.ErrorIs(t, stop(), context.Canceled)
	zktest.CatchUp(t, other.Conn(), p) // q's session sent the ack: other's member may lag
	require.True(t, acked("2"), "job 2's ack, waiting for its lot, sent when Work stopped")
	require.False(t, acked("3"), "job 3, whose handler ended with Work, acked")
	j := takeWithin(t, producer, other, p, "job 3 given back")
	require.Equal(t, "3", string(j.Data()))
	// 3 if, given back, it was offered to the ticket Work's first lot
	// made, before Work left the line (that offer is given back too).
	require.Contains(t, []int{2, 3}, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	require.Empty(t, names(t, other, p+"/ready"))
}

// Close while Work holds part of a lot (jobs offered on one ticket, some
// settled): the jobs still running keep their delivery, and their acks,
// the last with the ticket's delete, land; the inbox goes after them.
func TestCloseWhileWorkHoldsPartOfALot(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	f := newFourJobs(t, ctx, srv, p)
	q, other, producer, release := f.q, f.other, f.producer, f.release
	var lost atomic.Int32
	stop := work(t, ctx, q, func(ctx context.Context, j *fairqueue.Job) error {
		<-f.begin(j)
		select {
		case <-j.Done():
			lost.Add(1)
		default:
		}
		return nil
	}, fairqueue.WithHandlers(4), fairqueue.WithPrefetch(0))
	f.allStarted(t)
	acked := func(d string) bool { return f.acked(t, d) }
	close(release["0"])
	close(release["1"])
	require.Eventually(t, func() bool { return acked("0") && acked("1") }, liveWait, 5*time.Millisecond,
		"the lot of jobs 0 and 1 acked")
	require.NoError(t, q.Close(ctx))
	close(release["2"])
	close(release["3"])
	require.ErrorIs(t, stop(), fairqueue.ErrClosed)
	require.Zero(t, lost.Load(), "a delivery of the lot lost to Close")
	zktest.CatchUp(t, other.Conn(), p)
	require.True(t, acked("2") && acked("3"), "jobs 2 and 3 acked after Close")
	_, err := producer.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "an item of the lot came back")
	inbox := p + "/consumers/" + fairqueue.Name(q)
	require.Eventually(t, func() bool {
		ok, _, err := other.Conn().Exists(inbox)
		return err == nil && !ok
	}, liveWait, 10*time.Millisecond, "the closed Queue's inbox removed after its last job")
}

// A handler whose job's claim is lost sees its ctx end, with ErrClaimLost.
func TestWorkHandlerSeesClaimLost(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	q := fq(t, connect(t, srv.Addrs()), p)
	other := connect(t, srv.Addrs())
	_, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	lost := make(chan error, 2)
	stop := work(t, ctx, q, func(hctx context.Context, j *fairqueue.Job) error {
		if j.Attempt() > 1 {
			return nil
		}
		require.NoError(t, deleteTicket(t, other, p, j))
		<-hctx.Done()
		lost <- context.Cause(hctx)
		return hctx.Err()
	})
	select {
	case err := <-lost:
		require.ErrorIs(t, err, fairqueue.ErrClaimLost)
	case <-time.After(liveWait):
		t.Fatal("the handler's ctx did not end with its claim")
	}
	require.Eventually(t, func() bool {
		n, err := fq(t, other, p).Len(ctx)
		return err == nil && n == 0 && len(names(t, other, p+"/claims")) == 0
	}, liveWait, 10*time.Millisecond, "the job, delivered again, was done")
	require.ErrorIs(t, stop(), context.Canceled)
}

func TestWorkBadInput(t *testing.T) {
	srv := setup(t)
	q := fq(t, connect(t, srv.Addrs()), queuePath(t, srv.Addrs()))
	ctx := bg(t, 10*time.Second)
	ok := func(context.Context, *fairqueue.Job) error { return nil }
	for _, opts := range [][]fairqueue.WorkOption{
		{fairqueue.WithHandlers(0)},
		{fairqueue.WithBackoff(-time.Second, time.Second)},
		{fairqueue.WithBackoff(time.Minute, time.Second)},
	} {
		require.ErrorIs(t, q.Work(ctx, ok, opts...), zkrecipes.ErrInvalidArgument)
	}
	require.ErrorIs(t, q.Work(ctx, nil), zkrecipes.ErrInvalidArgument)
}

// Work on a session that ends returns the session's error.
func TestWorkSessionEnds(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	q := fq(t, s, p)
	done := make(chan error, 1)
	go func() {
		done <- q.Work(bg(t, 30*time.Second), func(context.Context, *fairqueue.Job) error { return nil })
	}()
	require.Eventually(t, func() bool { return len(names(t, connect(t, srv.Addrs()), p+"/ready")) == 1 }, liveWait, 5*time.Millisecond)
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, zkrecipes.ErrClosed)
	case <-time.After(liveWait):
		t.Fatal("Work did not return when its session ended")
	}
}
