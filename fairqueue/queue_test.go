package fairqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// newQueue returns the queue at p on s, closed when the test ends (before
// queuePath's check, so that its inbox and its election node are gone).
func newQueue(t *testing.T, s *zkrecipes.Session, p string, opts ...fairqueue.Option) *fairqueue.Queue {
	t.Helper()
	q, err := fairqueue.New(s, p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, q.Close(ctx))
	})
	return q
}

func TestPutTakeAckInOrder(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p, fairqueue.WithBucketSize(4))
	ctx := bg(t, 30*time.Second)

	var ids []string
	for i := range 10 {
		id, err := q.Put(ctx, fmt.Appendf(nil, "job %d", i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.True(t, sort.StringsAreSorted(ids), "ids sort in put order: %v", ids)
	n, err := q.Len(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n)

	for i := range 10 {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i], j.ID())
		require.Equal(t, fmt.Sprintf("job %d", i), string(j.Data()))
		require.Equal(t, 1, j.Attempt())
		require.NoError(t, j.Ack(ctx))
		require.NoError(t, j.Ack(ctx), "Ack is idempotent")
	}
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

func TestTryTakeEmpty(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, queuePath(t, srv.Addrs()))
	_, err := q.TryTake(bg(t, 10*time.Second))
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	n, err := q.Len(bg(t, 10*time.Second))
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestLenExcludesClaimed(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, queuePath(t, srv.Addrs()), fairqueue.WithBucketSize(2))
	ctx := bg(t, 30*time.Second)
	for i := range 5 {
		_, err := q.Put(ctx, []byte{byte(i)})
		require.NoError(t, err)
	}
	j1, err := q.Take(ctx)
	require.NoError(t, err)
	j2, err := q.TryTake(ctx)
	require.NoError(t, err)
	n, err := q.Len(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, j1.Ack(ctx))
	require.NoError(t, j2.Nack(ctx))
	n, err = q.Len(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	drain(t, q, 4)
}

// drain takes and acks n items and checks the queue is then empty.
func drain(t *testing.T, q *fairqueue.Queue, n int) []string {
	t.Helper()
	ctx := bg(t, 60*time.Second)
	var ids []string
	for range n {
		j, err := q.TryTake(ctx)
		require.NoError(t, err)
		ids = append(ids, j.ID())
		require.NoError(t, j.Ack(ctx))
	}
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	return ids
}

func TestNackKeepsPlace(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, queuePath(t, srv.Addrs()))
	ctx := bg(t, 30*time.Second)
	a, err := q.Put(ctx, []byte("a"))
	require.NoError(t, err)
	b, err := q.Put(ctx, []byte("b"))
	require.NoError(t, err)

	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, a, j.ID())
	// While a is claimed, the next consumer gets b.
	jb, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, b, jb.ID())
	require.NoError(t, j.Nack(ctx))
	require.NoError(t, jb.Nack(ctx))

	// a is back ahead of b, its second delivery.
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, a, j.ID())
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	require.ErrorIs(t, j.Nack(ctx), fairqueue.ErrSettled, "settled job: Nack after Ack changes nothing")
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, b, j.ID())
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
}

func TestMaxAttemptsDeadLetterRequeue(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, queuePath(t, srv.Addrs()), fairqueue.WithMaxAttempts(3))
	ctx := bg(t, 30*time.Second)
	poison, err := q.Put(ctx, []byte("poison"))
	require.NoError(t, err)
	good, err := q.Put(ctx, []byte("good"))
	require.NoError(t, err)

	for attempt := 1; attempt <= 3; attempt++ {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, poison, j.ID())
		require.Equal(t, attempt, j.Attempt())
		require.NoError(t, j.Nack(ctx))
	}
	// The third Nack moved it: the next item is the good one.
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, good, j.ID())
	require.NoError(t, j.Ack(ctx))
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)

	dead, err := q.DeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, []fairqueue.DeadLetter{{ID: poison, Data: []byte("poison"), Attempts: 3}}, dead)

	_, err = q.Requeue(ctx, "0000000099-0000000000")
	require.ErrorIs(t, err, fairqueue.ErrNoDeadLetter)
	_, err = q.Requeue(ctx, "nonsense")
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	requeued, err := q.Requeue(ctx, poison)
	require.NoError(t, err)
	require.Greater(t, requeued, good, "a new id, at the end of the queue")
	dead, err = q.DeadLetters(ctx)
	require.NoError(t, err)
	require.Empty(t, dead)

	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, "poison", string(j.Data()))
	require.Equal(t, 1, j.Attempt(), "a requeued item starts over")
	require.Equal(t, requeued, j.ID(), "the id Requeue returned")
	require.NoError(t, j.Ack(ctx))
}

// A consumer that dies without Nack: its item's attempts are counted at the
// next take, and the limit moves it to the dead letters there.
func TestMaxAttemptsOnLostClaims(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, p, fairqueue.WithMaxAttempts(2))
	ctx := bg(t, 30*time.Second)
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	for attempt := 1; attempt <= 2; attempt++ {
		cs := connect(t, srv.Addrs())
		cq := newQueue(t, cs, p, fairqueue.WithMaxAttempts(2))
		j, err := cq.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, attempt, j.Attempt())
		cs.Close() // its claim goes with its session
		<-j.Done()
		require.ErrorIs(t, j.Ack(ctx), fairqueue.ErrClaimLost)
	}
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	dead, err := q.DeadLetters(ctx)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, id, dead[0].ID)
	require.Equal(t, 2, dead[0].Attempts)
	_, err = q.Requeue(ctx, id)
	require.NoError(t, err)
	drain(t, q, 1)
}

func TestFairness(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ps := connect(t, srv.Addrs())
	q := newQueue(t, ps, p)
	ctx := bg(t, 30*time.Second)

	type got struct {
		who int
		job *fairqueue.Job
		err error
	}
	results := make(chan got, 3)
	for who := range 3 {
		s := connect(t, srv.Addrs())
		cq := newQueue(t, s, p)
		go func() {
			j, err := cq.Take(ctx)
			results <- got{who, j, err}
		}()
		// Wait until this consumer stands in line before the next comes.
		require.Eventually(t, func() bool {
			names, _, err := ps.Conn().Children(p + "/ready")
			return err == nil && len(names) == who+1
		}, 10*time.Second, 5*time.Millisecond)
	}
	for i := range 3 {
		_, err := q.Put(ctx, []byte{byte(i)})
		require.NoError(t, err)
		r := <-results
		require.NoError(t, r.err)
		assert.Equal(t, i, r.who, "consumers are served in the order they began waiting")
		assert.Equal(t, []byte{byte(i)}, r.job.Data())
		require.NoError(t, r.job.Ack(ctx))
	}
}

// A put wakes one waiting consumer: the others stay blocked.
func TestTakeWaitsAndCancels(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	q := newQueue(t, s, queuePath(t, srv.Addrs()))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := q.Take(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestBucketsDrainInOrder(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	const n, size = 500, 10
	q := newQueue(t, s, p, fairqueue.WithBucketSize(size))
	ctx := bg(t, 60*time.Second)

	// Four concurrent producers, each keeping its own order.
	var wg sync.WaitGroup
	var mu sync.Mutex
	putIDs := map[string]string{}
	for w := range 4 {
		wg.Go(func() {
			pq := newQueue(t, s, p, fairqueue.WithBucketSize(size))
			prev := ""
			for i := range n / 4 {
				data := fmt.Sprintf("%d-%d", w, i)
				id, err := pq.Put(ctx, []byte(data))
				if !assert.NoError(t, err) {
					return
				}
				assert.Greater(t, id, prev, "a producer's ids grow")
				prev = id
				mu.Lock()
				putIDs[id] = data
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, putIDs, n)

	buckets, _, err := s.Conn().Children(p + "/items")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(buckets), n/(size+3), "a bucket holds at most size + producers-1 items")
	for _, b := range buckets {
		items, _, err := s.Conn().Children(p + "/items/" + b)
		require.NoError(t, err)
		require.LessOrEqual(t, len(items), size+3, "bucket %s holds at most size + producers-1 items", b)
	}
	cnt, err := q.Len(ctx)
	require.NoError(t, err)
	require.Equal(t, n, cnt)

	got := drain(t, q, n)
	require.True(t, sort.StringsAreSorted(got), "drained in id order")
	require.Len(t, got, n)
	// The dispatcher deletes a drained bucket once it learns it is.
	require.Eventually(t, func() bool {
		buckets, _, err = s.Conn().Children(p + "/items")
		return err == nil && len(buckets) == 0
	}, 10*time.Second, 10*time.Millisecond, "drained buckets are removed: %v", buckets)
}

func TestBadInput(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	_, err := fairqueue.New(nil, "/q")
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	for _, p := range []string{"", "q", "/", "/q/", "/a//b", "/zookeeper/q"} {
		_, err := fairqueue.New(s, p)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "path %q", p)
	}
	_, err = fairqueue.New(s, "/q", fairqueue.WithMaxAttempts(0))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	_, err = fairqueue.New(s, "/q", fairqueue.WithACL(nil))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)

	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	_, err = q.Put(bg(t, 10*time.Second), bytes.Repeat([]byte("x"), zkrecipes.MaxDataSize+1))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)
	exists, _, err := s.Conn().Exists(p)
	require.NoError(t, err)
	require.False(t, exists, "nothing written")

	// The largest allowed payload goes through.
	big := bytes.Repeat([]byte("y"), zkrecipes.MaxDataSize)
	_, err = q.Put(bg(t, 10*time.Second), big)
	require.NoError(t, err)
	j, err := q.Take(bg(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, big, j.Data())
	require.NoError(t, j.Ack(bg(t, 10*time.Second)))

	// Puts on a closed session fail clearly.
	s2 := connect(t, srv.Addrs())
	q2 := newQueue(t, s2, p)
	s2.Close()
	_, err = q2.Put(bg(t, 10*time.Second), []byte("x"))
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
	_, err = fairqueue.New(s2, p)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
}

// A Put cut off mid-call says its outcome is unknown.
func TestPutOutcomeUnknown(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 10*time.Second)
	_, err := q.Put(ctx, []byte("warm up")) // the directories exist now
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.Put(cctx, []byte("x"))
	require.Error(t, err)
	require.True(t, errors.Is(err, fairqueue.ErrOutcomeUnknown) || errors.Is(err, context.Canceled), "%v", err)
	// Whatever happened, the queue holds one or two items and drains.
	time.Sleep(100 * time.Millisecond)
	n, err := q.Len(ctx)
	require.NoError(t, err)
	drain(t, q, n)
}

// Producers and consumers at once: every item is delivered once, and each
// consumer's ids grow, but for items that came back.
func TestManyProducersAndConsumers(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	const producers, consumers, perProducer = 4, 4, 500
	const total = producers * perProducer
	ctx := bg(t, 90*time.Second)

	var wg sync.WaitGroup
	for w := range producers {
		s := connect(t, srv.Addrs())
		q := newQueue(t, s, p, fairqueue.WithBucketSize(100))
		wg.Go(func() {
			for i := range perProducer {
				_, err := q.Put(ctx, fmt.Appendf(nil, "%d-%d", w, i))
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	var mu sync.Mutex
	acked := map[string]int{}
	took := make([][]got, consumers)
	var cwg sync.WaitGroup
	for i := range consumers {
		s := connect(t, srv.Addrs())
		q := newQueue(t, s, p, fairqueue.WithBucketSize(100))
		cwg.Go(func() {
			for {
				mu.Lock()
				done := len(acked) >= total
				mu.Unlock()
				if done {
					return
				}
				tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				j, err := q.Take(tctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				took[i] = append(took[i], got{j.ID(), j.Attempt()})
				if !assert.NoError(t, j.Ack(ctx)) {
					return
				}
				mu.Lock()
				acked[string(j.Data())]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	cwg.Wait()
	require.Len(t, acked, total)
	for k, v := range acked {
		require.Equal(t, 1, v, "item %s acked once", k)
	}
	back := 0
	for _, jobs := range took {
		back += assertOrder(t, jobs)
	}
	t.Logf("%d items came back out of order", back)
	q := newQueue(t, connect(t, srv.Addrs()), p)
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// Ids keep growing after the newest bucket was drained and deleted, even
// for a producer that never saw it.
func TestIDsGrowAcrossDrains(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, s, p, fairqueue.WithBucketSize(2))
	var last string
	for range 3 {
		// Keep one item claimed, so items/ (a container) stays.
		id, err := q.Put(ctx, []byte("x"))
		require.NoError(t, err)
		require.Greater(t, id, last)
		last = id
	}
	hold, err := q.TryTake(ctx)
	require.NoError(t, err)
	drain(t, q, 2) // the newest bucket is drained and deleted
	fresh := newQueue(t, s, p, fairqueue.WithBucketSize(2))
	id, err := fresh.Put(ctx, []byte("y"))
	require.NoError(t, err)
	require.Greater(t, id, last, "a fresh producer does not reuse a drained bucket's number")
	require.NoError(t, hold.Ack(ctx))
	drain(t, q, 1)
}

// A claim deleted by another client is a lost claim, whether the delete
// comes before the Job's owner first watches the claim or after: Done is
// closed, Ack refuses, and the item is delivered again.
func TestClaimDeletedByAnotherClient(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, connect(t, srv.Addrs()), p)
	other := connect(t, srv.Addrs())
	for i, after := range []time.Duration{0, 200 * time.Millisecond} {
		_, err := q.Put(ctx, []byte("x"))
		require.NoError(t, err)
		j, err := q.Take(ctx)
		require.NoError(t, err)
		time.Sleep(after)
		require.NoError(t, deleteTicket(t, other, p, j))
		select {
		case <-j.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("case %d: the claim was deleted and Done stays open", i)
		}
		require.ErrorIs(t, j.Ack(ctx), fairqueue.ErrClaimLost)
		again, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, j.ID(), again.ID())
		require.Equal(t, 2, again.Attempt())
		require.NoError(t, again.Ack(ctx))
	}
}
