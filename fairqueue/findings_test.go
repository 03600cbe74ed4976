package fairqueue_test

// Regression tests for the fairqueue findings of issue 7 ("Core: one
// waiting-line engine, one owner per lease — and ten correctness bugs it
// must end"), against a real ZooKeeper. Each asserts the correct behaviour
// the finding describes. Connection blips that the session survives come
// from zktest.Dropper. The zklock findings are in zklock/findings_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// liveWait bounds the waits for liveness properties (an item is
// delivered): generous, never a measure of speed.
const liveWait = 20 * time.Second

func fq(t *testing.T, s *zkrecipes.Session, p string, opts ...fairqueue.Option) *fairqueue.Queue {
	t.Helper()
	return newQueue(t, s, p, opts...)
}

// names lists dir through s (synced first); a missing dir is empty. It
// may be called from a condition of require.Eventually, so it does not stop
// the test.
func names(t *testing.T, s *zkrecipes.Session, dir string) []string {
	t.Helper()
	zktest.CatchUp(t, s.Conn(), dir)
	ns, _, err := s.Conn().Children(dir)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("list %s: %v", dir, err)
	}
	return ns
}

// fired waits until d has cut n times, for at most wait.
func fired(d *zktest.Dropper, n int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for d.Fired() < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// takeWithin takes one item with a fresh ctx bounded by liveWait, and says
// what stands in the queue's way if none comes.
func takeWithin(t *testing.T, q *fairqueue.Queue, s *zkrecipes.Session, p, what string) *fairqueue.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveWait)
	defer cancel()
	j, err := q.Take(ctx)
	require.NoError(t, err, "%s (ready/: %v, consumers/: %v)", what, names(t, s, p+"/ready"), names(t, s, p+"/consumers"))
	return j
}

// Finding 4: Take with an ended ctx, or one that ends while Take joins the
// consumers' line, must leave no node in line/ (an orphan there blocks
// every consumer of the queue while its session lives), and must not
// block later consumers.
func TestFinding4TakeWithEndedCtxLeavesNoLineNode(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s, other := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	q := fq(t, s, p)
	ctx := bg(t, 60*time.Second)
	// line/ exists from now on: a create in it can land.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := q.Take(wctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	for i := range 20 {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := q.Take(cctx)
		require.ErrorIs(t, err, context.Canceled, "Take %d with an ended ctx", i)
	}
	for i := range 30 {
		end := []time.Duration{20 * time.Microsecond, 100 * time.Microsecond, time.Millisecond}[i%3]
		cctx, cancel := context.WithTimeout(ctx, end)
		_, err := q.Take(cctx)
		cancel()
		require.Error(t, err, "Take %d with a ctx ending at %v on an empty queue", i, end)
	}
	require.Eventually(t, func() bool { return len(names(t, other, p+"/ready")) == 0 }, 10*time.Second, 5*time.Millisecond,
		"abandoned Takes left nodes in line/: %v", names(t, other, p+"/ready"))

	// A later consumer is not blocked.
	oq := fq(t, other, p)
	got := make(chan *fairqueue.Job, 1)
	go func() {
		tctx, cancel := context.WithTimeout(ctx, liveWait)
		defer cancel()
		j, err := oq.Take(tctx)
		if assert.NoError(t, err, "a later consumer (line/: %v)", names(t, other, p+"/ready")) {
			got <- j
		}
		close(got)
	}()
	_, err = q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, ok := <-got
	require.True(t, ok, "a later consumer never got the item put")
	require.Equal(t, "x", string(j.Data()))
	require.NoError(t, j.Ack(ctx))
}

// Finding 4, the claim half: a Take whose ctx ends while it claims an item
// must leave no claim behind (an orphan claim hides the item while the
// session lives), nor a line node. Takes with contexts that end anywhere
// in their first few milliseconds; the item must stay deliverable.
func TestFinding4TakeWithEndingCtxLeavesNoClaim(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s, other := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	q := fq(t, s, p)
	ctx := bg(t, 60*time.Second)
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	// Warm up (every directory exists), and learn how long a Take takes
	// here, to spread the ends of the contexts over it.
	var took time.Duration
	for range 3 {
		began := time.Now()
		j, err := q.Take(ctx)
		took = max(took, time.Since(began))
		require.NoError(t, err)
		require.NoError(t, j.Nack(ctx))
	}

	taken := 0
	for i := range 150 {
		end := took * time.Duration(i%30) / 20 // from 0 to 1.5 times a Take
		cctx, cancel := context.WithTimeout(ctx, end)
		j, err := q.Take(cctx)
		cancel()
		if err == nil {
			taken++
			require.NoError(t, j.Nack(ctx), "Nack after Take %d", i)
		}
	}
	t.Logf("%d of 150 Takes got the item before their ctx ended", taken)

	oq := fq(t, other, p)
	j := takeWithin(t, oq, other, p, "the item, after Takes with ending contexts")
	require.Equal(t, id, j.ID())
	require.NoError(t, j.Ack(ctx))
	require.Eventually(t, func() bool {
		return len(names(t, other, p+"/ready")) == 0
	}, 10*time.Second, 5*time.Millisecond, "tickets left: %v", names(t, other, p+"/ready"))
}

// Finding 5: a connection blip during the read that sets the watch on a
// Job's ticket must not make the job lost: Done stays open, Ack succeeds,
// and the item is gone.
func TestFinding5BlipOnClaimReadKeepsJob(t *testing.T) {
	for _, mode := range []zktest.Mode{zktest.LoseReply, zktest.AfterWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := setup(t)
			p := queuePath(t, srv.Addrs())
			d := &zktest.Dropper{}
			s := d.Connect(t, srv.Addrs())
			q := fq(t, s, p)
			ctx := bg(t, 60*time.Second)
			id, err := q.Put(ctx, []byte("job"))
			require.NoError(t, err)
			d.Arm(zktest.Match{Op: zktest.OpGetData, Path: p + "/ready/"}, mode)
			j, err := q.Take(ctx)
			require.NoError(t, err)
			require.Equal(t, id, j.ID())
			// The Job's owner reads its claim (getData, setting its watch)
			// a moment after it starts: the first read under ready/.
			require.True(t, fired(d, 1, 5*time.Second), "the %v on the read of the claim did not fire", mode)
			select {
			case <-j.Done():
				t.Fatalf("the job was lost to a %v the session survived", mode)
			case <-time.After(300 * time.Millisecond):
			}
			require.NoError(t, j.Ack(ctx), "Ack after a blip")
			_, err = q.TryTake(ctx)
			require.ErrorIs(t, err, fairqueue.ErrEmpty, "the acked item is gone")
		})
	}
}

// staleTail makes producer a's idea of the newest bucket stale: a fills
// bucket 0 (and so knows only bucket 0), then b puts six more items
// (buckets 1 to 3, two items each), and a consumer acks the first six, so
// that buckets 0 to 2 are drained and deleted. It returns the ids put so
// far, and the consumer's job on the seventh item (3-0), still claimed; the
// eighth (3-1) is pending. With nack set, the consumer gives the third item
// (1-0) back instead of acking it (with WithMaxAttempts(1), a dead letter).
func staleTail(t *testing.T, ctx context.Context, a, b, c *fairqueue.Queue, nack bool) ([]string, *fairqueue.Job) {
	t.Helper()
	var ids []string
	for i := range 2 {
		id, err := a.Put(ctx, fmt.Appendf(nil, "a%d", i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for i := range 6 {
		id, err := b.Put(ctx, fmt.Appendf(nil, "b%d", i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.True(t, slices.IsSorted(ids), "ids in put order: %v", ids)
	for i := range 6 {
		j, err := c.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i], j.ID())
		if nack && i == 2 {
			require.NoError(t, j.Nack(ctx))
			continue
		}
		require.NoError(t, j.Ack(ctx))
	}
	j, err := c.Take(ctx) // on its way, drops the drained bucket 2
	require.NoError(t, err)
	require.Equal(t, ids[6], j.ID())
	return ids, j
}

// Finding 6: a producer with a stale idea of the newest bucket must not
// re-create a drained bucket below the newest: ids are never reused while
// the queue is not empty, a later put sorts after the earlier ones, and a
// consumer waiting in Take gets the item.
func TestFinding6StaleTailNeverReusesIDs(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	sa, sb, sc := connect(t, srv.Addrs()), connect(t, srv.Addrs()), connect(t, srv.Addrs())
	a := fq(t, sa, p, fairqueue.WithBucketSize(2))
	b := fq(t, sb, p, fairqueue.WithBucketSize(2))
	c := fq(t, sc, p, fairqueue.WithBucketSize(2))
	ctx := bg(t, 60*time.Second)
	ids, held := staleTail(t, ctx, a, b, c, false)

	// A consumer waits: the pending item (3-1) is claimed too.
	j8, err := c.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[7], j8.ID())
	wq := fq(t, connect(t, srv.Addrs()), p, fairqueue.WithBucketSize(2))
	got := make(chan *fairqueue.Job, 1)
	go func() {
		tctx, cancel := context.WithTimeout(ctx, liveWait)
		defer cancel()
		j, err := wq.Take(tctx)
		if assert.NoError(t, err, "the waiting consumer") {
			got <- j
		}
		close(got)
	}()
	require.Eventually(t, func() bool { return len(waiting(t, sc, p)) == 1 }, liveWait, 2*time.Millisecond)

	id, err := a.Put(ctx, []byte("late"))
	require.NoError(t, err)
	assert.NotContains(t, ids, id, "the stale producer reused an id while the queue held %s and %s", ids[6], ids[7])
	assert.Greater(t, id, ids[len(ids)-1], "a put after the others must sort after them")

	j, ok := <-got
	require.True(t, ok, "the waiting consumer never got the item put")
	require.Equal(t, "late", string(j.Data()))
	require.Equal(t, id, j.ID())
	for _, j := range []*fairqueue.Job{j, held, j8} {
		require.NoError(t, j.Ack(ctx))
	}
	_, err = c.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// Finding 6, the dead-letter clash: an id reused by a stale producer that
// matches a dead letter made Nack fail forever and the item invisible. A
// Nack at max attempts of the late item must work, and both dead letters
// be kept apart.
func TestFinding6StaleTailDeadLetterClash(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	sa, sb, sc := connect(t, srv.Addrs()), connect(t, srv.Addrs()), connect(t, srv.Addrs())
	a := fq(t, sa, p, fairqueue.WithBucketSize(2))
	b := fq(t, sb, p, fairqueue.WithBucketSize(2))
	c := fq(t, sc, p, fairqueue.WithBucketSize(2), fairqueue.WithMaxAttempts(1))
	ctx := bg(t, 60*time.Second)
	ids, held := staleTail(t, ctx, a, b, c, true)
	dead, err := c.DeadLetters(ctx)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, ids[2], dead[0].ID)

	id, err := a.Put(ctx, []byte("late"))
	require.NoError(t, err)
	// Two items are pending: the eighth and the late one, in either order.
	for range 2 {
		j, err := c.Take(ctx)
		require.NoError(t, err)
		if string(j.Data()) != "late" {
			require.Equal(t, ids[7], j.ID())
			require.NoError(t, j.Ack(ctx))
			continue
		}
		require.Equal(t, id, j.ID())
		require.NoError(t, j.Nack(ctx), "Nack at max attempts of the late item %s (dead letters: %+v)", id, dead)
	}
	dead, err = c.DeadLetters(ctx)
	require.NoError(t, err)
	require.Len(t, dead, 2, "both dead letters kept: %+v", dead)
	require.NoError(t, held.Ack(ctx))

	// Empty the queue for its clean-up check.
	for _, dl := range dead {
		_, err := c.Requeue(ctx, dl.ID)
		require.NoError(t, err)
		j, err := c.Take(ctx)
		require.NoError(t, err)
		require.NoError(t, j.Ack(ctx))
	}
}

// Finding 9: Nack at max attempts must move the item to the dead letters
// even when dead/ goes (the server reaps an empty container) between its
// creation and the move: the item ends up in DeadLetters and the claim is
// gone. Another session plays the reaper: it deletes dead/ the moment it
// appears, as often as that takes to win the race once.
func TestFinding9NackAtMaxAttemptsWhileDeadIsReaped(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s, reaper := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	q := fq(t, s, p, fairqueue.WithMaxAttempts(1))
	ctx := bg(t, 60*time.Second)
	dead := p + "/dead"
	won := 0
	for i := 0; i < 60 && won < 3; i++ {
		id, err := q.Put(ctx, []byte("poison"))
		require.NoError(t, err)
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, id, j.ID())

		// dead/ is gone, and the reaper waits for it to come back.
		if err := reaper.Conn().Delete(dead, -1); err != nil {
			require.ErrorIs(t, err, zk.ErrNoNode)
		}
		found, _, ev, err := reaper.Conn().ExistsW(dead)
		require.NoError(t, err)
		require.False(t, found)
		reaped := make(chan error, 1)
		go func() {
			e := <-ev
			if e.Type != zk.EventNodeCreated {
				reaped <- fmt.Errorf("event %v", e.Type)
				return
			}
			reaped <- reaper.Conn().Delete(dead, -1)
		}()

		err = j.Nack(ctx)
		var rerr error
		select {
		case rerr = <-reaped:
		case <-time.After(liveWait):
			t.Fatal("dead/ was never created")
		}
		if rerr == nil {
			won++
		}
		require.NoError(t, err, "Nack %d at max attempts (dead/ reaped under it: %v)", i, rerr == nil)
		require.Empty(t, names(t, s, p+"/ready"), "Nack %d left its ticket", i)
		dls, err := q.DeadLetters(ctx)
		require.NoError(t, err)
		require.Len(t, dls, 1, "Nack %d: dead letters %+v", i, dls)
		require.Equal(t, id, dls[0].ID)

		// Empty dead/ again.
		_, err = q.Requeue(ctx, id)
		require.NoError(t, err)
		j, err = q.Take(ctx)
		require.NoError(t, err)
		require.NoError(t, j.Ack(ctx))
	}
	t.Logf("the reaper won the race %d times", won)
}

// Finding 10 (first item): an idle Take that is cancelled must leave no
// container that never had a child: the server never reaps those, so the
// queue's nodes would stay forever.
func TestFinding10IdleTakeLeavesNoUnusedContainers(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	q := fq(t, s, p)
	tctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := q.Take(tctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, s.Close())

	fresh := connect(t, srv.Addrs())
	var unused []string
	var walk func(string)
	walk = func(n string) {
		ok, st, err := fresh.Conn().Exists(n)
		require.NoError(t, err)
		if !ok {
			return
		}
		if st.NumChildren == 0 && st.Cversion == 0 && st.EphemeralOwner == 0 {
			unused = append(unused, n)
		}
		for _, c := range names(t, fresh, n) {
			walk(n + "/" + c)
		}
	}
	walk(p)
	require.Empty(t, unused, "containers that never had a child (never reaped)")
}
