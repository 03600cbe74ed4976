package fairqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// PutMany puts a batch in order, all or nothing, and the batch is taken in
// that order.
func TestPutMany(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p, fairqueue.WithBucketSize(4))
	ctx := bg(t, 30*time.Second)

	var batch [][]byte
	for i := range 10 {
		batch = append(batch, fmt.Appendf(nil, "job %d", i))
	}
	ids, err := q.PutMany(ctx, batch)
	require.NoError(t, err)
	require.Len(t, ids, 10)
	require.True(t, sort.StringsAreSorted(ids), "ids in batch order: %v", ids)
	more, err := q.PutMany(ctx, batch[:3])
	require.NoError(t, err)
	require.Greater(t, more[0], ids[9], "a later batch sorts after")
	for i, id := range append(ids, more...) {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, id, j.ID())
		require.Equal(t, batch[i%10], j.Data())
		require.NoError(t, j.Ack(ctx))
	}
}

func TestPutManyBadInput(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)

	_, err := q.PutMany(ctx, nil)
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	_, err = q.PutMany(ctx, make([][]byte, fairqueue.MaxBatch+1))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	require.ErrorContains(t, err, fmt.Sprint(fairqueue.MaxBatch))
	big := make([]byte, 300<<10)
	_, err = q.PutMany(ctx, [][]byte{big, big, big, big})
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)

	// All or nothing: a batch the server refuses (here, one too large for
	// the server's request limit once framed) leaves nothing behind.
	n, err := q.Len(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a refused batch wrote nothing")
}

// A producer that retries a Put with the same key, after an outcome it
// could not know, creates no second item.
func TestPutWithKeyIsSafeToRetry(t *testing.T) {
	srv := setup(t)
	var d zktest.Dropper
	s := d.Connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)

	// Warm up, so the next put is one multi.
	first, err := q.Put(ctx, []byte("warm"), fairqueue.WithKey("warm"))
	require.NoError(t, err)
	again, err := q.Put(ctx, []byte("warm, again"), fairqueue.WithKey("warm"))
	require.NoError(t, err)
	require.Equal(t, first, again, "same key, same item")

	d.Arm(zktest.Match{Op: zktest.OpMulti, Path: "/items/"}, zktest.LoseReply)
	_, err = q.Put(ctx, []byte("order 42"), fairqueue.WithKey("order-42"))
	require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown)
	require.Equal(t, 1, d.Fired(), "the put's reply was lost")
	id, err := q.Put(ctx, []byte("order 42"), fairqueue.WithKey("order-42"))
	require.NoError(t, err, "the retry")

	n, err := q.Len(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the lost reply's put landed once, the retry added nothing")
	got := map[string]string{}
	for range 2 {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		got[j.ID()] = string(j.Data())
		require.NoError(t, j.Ack(ctx))
	}
	require.Equal(t, map[string]string{first: "warm", id: "order 42"}, got)

	// Once acked, the key is free again.
	later, err := q.Put(ctx, []byte("order 42, a new one"), fairqueue.WithKey("order-42"))
	require.NoError(t, err)
	require.NotEqual(t, id, later)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Ack(ctx))
}

func TestPutOptionsBadInput(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)
	for _, opt := range []fairqueue.PutOption{
		fairqueue.WithKey(""),
		fairqueue.WithKey("a/b"),
		fairqueue.WithKey("a.b"),
		fairqueue.WithKey("tab\there"),
		fairqueue.WithKey(strings.Repeat("k", 201)),
		fairqueue.WithDelay(0),
		fairqueue.WithDelay(-time.Second),
	} {
		_, err := q.Put(ctx, []byte("x"), opt)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	}
	n, err := q.Len(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing written")
}

// A delayed item stays out of reach until due, then takes its place at the
// end of the queue, with a queue id: no consumer sees ids go backwards.
func TestPutWithDelay(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)

	const delay = 700 * time.Millisecond
	put := time.Now()
	did, err := q.Put(ctx, []byte("later"), fairqueue.WithDelay(delay), fairqueue.WithKey("later"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(did, "d-"), did)
	again, err := q.Put(ctx, []byte("later"), fairqueue.WithDelay(delay), fairqueue.WithKey("later"))
	require.NoError(t, err)
	require.Equal(t, did, again, "same key, same delayed item")
	now, err := q.Put(ctx, []byte("now"))
	require.NoError(t, err)

	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, now, j.ID(), "the item put later but not delayed comes first")
	require.NoError(t, j.Ack(ctx))

	j, err = q.Take(ctx) // waits until the delayed one is due
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(put), delay, "not before it was due")
	require.Equal(t, "later", string(j.Data()))
	require.Greater(t, j.ID(), now, "its queue id sorts after what was put before it came due")
	require.Equal(t, 1, j.Attempt())
	require.NoError(t, j.Ack(ctx))
}

// NackAfter keeps the item's place but not before the back-off has passed.
func TestNackAfter(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)

	a, err := q.Put(ctx, []byte("a"))
	require.NoError(t, err)
	b, err := q.Put(ctx, []byte("b"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, a, j.ID())
	require.ErrorIs(t, j.NackAfter(ctx, 0), zkrecipes.ErrInvalidArgument)
	const backoff = 600 * time.Millisecond
	nacked := time.Now()
	require.NoError(t, j.NackAfter(ctx, backoff))
	require.ErrorIs(t, j.Ack(ctx), fairqueue.ErrSettled, "settled: Ack after NackAfter changes nothing")

	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, b, j.ID(), "the held item is skipped while held")
	require.NoError(t, j.Ack(ctx))

	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(nacked), backoff)
	require.Equal(t, a, j.ID(), "back in its place")
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// A consumer frozen while it waits first in line is offered the oldest
// item and holds it, as it would a job it had taken, until its session
// expires: nothing else waits on it. The others are served every later
// item at once, and the frozen one's item comes back (Attempt 2) once its
// session has expired.
func TestNoHeadOfLineStall(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	const frozenTimeout = 4 * time.Second

	var fz zktest.Freezer
	fs := connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(frozenTimeout))
	frozen := newQueue(t, fs, p)
	others := connect(t, srv.Addrs())
	q := newQueue(t, others, p)
	producer := newQueue(t, connect(t, srv.Addrs()), p)
	// q takes first: it is the dispatcher (a frozen dispatcher stalls
	// hand-out until its session expires: see TestFrozenDispatcher).
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)

	// The frozen consumer waits first.
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	done := make(chan error, 1)
	go func() {
		j, err := frozen.Take(fctx)
		if err == nil {
			err = errors.New("the frozen consumer took " + j.ID())
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(waiting(t, others, p)) == 1 }, liveWait, 5*time.Millisecond)
	fz.Freeze()
	frozenAt := time.Now()

	// The oldest item goes to the frozen consumer; the others get the rest.
	first, err := producer.Put(ctx, []byte("first"))
	require.NoError(t, err)
	var batch [][]byte
	for i := range 20 {
		batch = append(batch, fmt.Appendf(nil, "%d", i))
	}
	ids, err := producer.PutMany(ctx, batch)
	require.NoError(t, err)
	for _, id := range ids {
		j := takeWithin(t, q, others, p, "an item while a frozen consumer holds the oldest")
		require.Equal(t, id, j.ID())
		require.NoError(t, j.Ack(ctx))
	}
	j := takeWithin(t, q, others, p, "the frozen consumer's item, once its session expired")
	require.Equal(t, first, j.ID())
	require.Equal(t, 2, j.Attempt(), "it was offered to the frozen consumer")
	t.Logf("the frozen consumer's item came back %v after the freeze (session timeout %v)",
		time.Since(frozenAt).Round(time.Millisecond), frozenTimeout)
	require.NoError(t, j.Ack(ctx))
	fcancel()
	fz.Thaw()
	require.Error(t, <-done)
}

// An Ack sent just as the network froze, and never answered before the
// session ended, says its outcome is unknown, and not that the claim was
// lost: ErrClaimLost promises a redelivery that an applied ack would never
// bring. Here the freeze dropped the ack, so the item does come back.
func TestAckUnansweredAtSessionEnd(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	var fz zktest.Freezer
	defer fz.Thaw()
	fs := connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(2*time.Second))
	frozen := newQueue(t, fs, p)
	q := newQueue(t, connect(t, srv.Addrs()), p)
	_, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := frozen.Take(ctx)
	require.NoError(t, err)

	fz.Freeze()
	err = j.Ack(ctx) // returns once the client gives the session up
	require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, fairqueue.ErrClaimLost)
	<-j.Done()

	again, err := q.Take(ctx) // once the server expires the frozen session
	require.NoError(t, err)
	require.Equal(t, "x", string(again.Data()))
	require.NoError(t, again.Ack(ctx))
}

// A job settled one way cannot be settled the other way: Ack after Nack,
// and Nack after Ack, say so with ErrSettled and change nothing; the same
// call again is nil.
func TestSettledJobRefusesTheOtherWay(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 30*time.Second)

	_, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	require.NoError(t, j.Nack(ctx), "Nack after Nack")
	err = j.Ack(ctx)
	require.ErrorIs(t, err, fairqueue.ErrSettled, "Ack after Nack")
	require.ErrorContains(t, err, "ack after nack")

	j, err = q.Take(ctx) // the item is back: the Ack changed nothing
	require.NoError(t, err)
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	require.NoError(t, j.Ack(ctx), "Ack after Ack")
	require.ErrorIs(t, j.Nack(ctx), fairqueue.ErrSettled, "Nack after Ack")
	require.ErrorIs(t, j.NackAfter(ctx, time.Second), fairqueue.ErrSettled, "NackAfter after Ack")
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "the Nack after Ack gave nothing back")
}

// PutMany stores its payloads once, in one blob, which its items name: a
// consumer reads the blob for the items of it it holds (those whose offers
// do not carry them), the dispatcher reads it to bury an item that came
// back, and it is deleted with its bucket.
func TestPutManyPayloadsInOneBlob(t *testing.T) {
	srv := setup(t)
	other := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	d := standFirst(t, ctx, other, p, fairqueue.WithMaxAttempts(1))
	big := strings.Repeat("z", 8<<10) // too large for an offer to carry
	ids, err := d.PutMany(ctx, [][]byte{[]byte("x"), []byte(big), []byte("y")})
	require.NoError(t, err)
	bucket, blobs := p+"/items/b"+ids[0][:10], p+"/items/p"+ids[0][:10]
	kids, _, err := other.Conn().Children(blobs)
	require.NoError(t, err)
	require.Len(t, kids, 1, "one blob for the batch")
	items, _, err := other.Conn().Children(bucket)
	require.NoError(t, err)
	require.Len(t, items, 3)
	for _, it := range items {
		data, _, err := other.Conn().Get(bucket + "/" + it)
		require.NoError(t, err)
		require.Empty(t, data, "an item of a blob holds no data of its own")
	}

	// x's consumer dies holding it: x comes back at its one attempt, and
	// the dispatcher buries it with its payload, read from the blob.
	s := connect(t, srv.Addrs())
	j, err := newQueue(t, s, p).Take(ctx)
	require.NoError(t, err)
	require.Equal(t, "x", string(j.Data()))
	require.NoError(t, s.Close())
	for i, want := range []string{big, "y"} {
		j, err := d.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i+1], j.ID())
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	dead := deadLetters(t, ctx, d, 10*time.Second, "x never buried")
	require.Equal(t, []fairqueue.DeadLetter{{ID: ids[0], Data: []byte("x"), Attempts: 1}}, dead)
	_, err = d.Requeue(ctx, ids[0])
	require.NoError(t, err)
	j, err = d.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, "x", string(j.Data()))
	require.NoError(t, j.Ack(ctx))
	// The blob stays while its bucket does: the dispatcher deletes the
	// bucket, drained while no one waits, and its blobs with it.
	require.Eventually(t, func() bool {
		_, _, err := other.Conn().Children(blobs)
		return errors.Is(err, zk.ErrNoNode)
	}, 10*time.Second, 10*time.Millisecond, "the blob left with its bucket")
}

// A PutMany into a bucket made with no blob directory (by an older
// producer) writes its items each with its own payload, not in a blob.
func TestPutManyIntoABucketWithNoBlobDirectory(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, s, p)
	first, err := q.Put(ctx, []byte("first"))
	require.NoError(t, err)
	require.NoError(t, s.Conn().Delete(p+"/items/p"+first[:10], -1), "the bucket's blob directory, empty")
	a, b := tooLargeForAName("a"), tooLargeForAName("b")
	ids, err := q.PutMany(ctx, [][]byte{[]byte(a), []byte(b)})
	require.NoError(t, err)
	require.Equal(t, first[:10], ids[0][:10], "put into the same bucket")
	names, _, err := s.Conn().Children(p + "/items/b" + first[:10])
	require.NoError(t, err)
	require.Len(t, names, 3)
	for _, name := range names {
		require.NotContains(t, name, "i-p.", "an item of a blob")
	}
	for _, want := range []string{"first", a, b} {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
}

// An item of a PutMany given back is delivered again with its payload (the
// dispatcher reads it, and its blob, to bump it), its attempt counted.
func TestPutManyItemGivenBack(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, s, p)
	a, b := tooLargeForAName("a"), tooLargeForAName("b")
	ids, err := q.PutMany(ctx, [][]byte{[]byte(a), []byte(b)})
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	for _, want := range []struct {
		id, data string
		attempt  int
	}{{ids[0], a, 2}, {ids[1], b, 1}} {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, want.id, j.ID())
		require.Equal(t, want.data, string(j.Data()))
		require.Equal(t, want.attempt, j.Attempt())
		require.NoError(t, j.Ack(ctx))
	}
}

// A small payload of an item put alone rides in the item's name: the
// dispatcher learns it from its listing of the bucket and the consumer
// from the name in its offer, so that no one reads the item. Given back, the item is read
// for its version (its next offer bumps it) and keeps its payload, to a
// dead letter and back. A payload a byte larger is the node's data, and
// read.
func TestSmallPayloadInItsName(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	itemReads := &zktest.Counter{Path: p + "/items/b"}
	s := connect(t, srv.Addrs(), zkrecipes.WithDialer(itemReads.Dial))
	other := connect(t, srv.Addrs()) // the test's own reads
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, s, p, fairqueue.WithMaxAttempts(2))
	small := []byte(strings.Repeat("s", fairqueue.InlineMax))
	var ids []string
	for _, data := range []string{"a", "b", string(small)} {
		id, err := q.Put(ctx, []byte(data))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	id := ids[2]
	bucket := p + "/items/b" + id[:10]
	zktest.CatchUp(t, other.Conn(), bucket) // q's session put them: other's member may lag
	names, _, err := other.Conn().Children(bucket)
	require.NoError(t, err)
	require.Len(t, names, 3)
	require.NotContains(t, names, "i-"+id[11:], "the payload is in the name")
	for _, name := range names {
		data, _, err := other.Conn().Get(bucket + "/" + name)
		require.NoError(t, err)
		require.Empty(t, data)
	}

	// The first Take's ticket is handed "a" at once, and the dispatcher
	// would read "b" and the small one ahead, to carry them: not these.
	for i, want := range []string{"a", "b"} {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i], j.ID())
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, small, j.Data())
	require.Zero(t, itemReads.Requests(zktest.OpGetData), "an item read")
	require.NoError(t, j.Nack(ctx))
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, small, j.Data())
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Nack(ctx))
	dead := deadLetters(t, ctx, q, 10*time.Second, "never buried")
	require.Equal(t, []fairqueue.DeadLetter{{ID: id, Data: small, Attempts: 2}}, dead)
	_, err = q.Requeue(ctx, id)
	require.NoError(t, err)
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, small, j.Data())
	require.NoError(t, j.Ack(ctx))

	before := itemReads.Requests(zktest.OpGetData)
	larger := append(small, 'l')
	id, err = q.Put(ctx, larger)
	require.NoError(t, err)
	zktest.CatchUp(t, other.Conn(), p+"/items")
	data, _, err := other.Conn().Get(p + "/items/b" + id[:10] + "/i-" + id[11:])
	require.NoError(t, err)
	require.Equal(t, larger, data)
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, larger, j.Data())
	require.NoError(t, j.Ack(ctx))
	require.Greater(t, itemReads.Requests(zktest.OpGetData), before, "the larger item never read: the count misses reads")
}

// A PutMany whose payloads all fit in their items' names puts no blob: no
// one reads anything to take them. One payload a byte larger puts them all
// in a blob.
func TestSmallPutManyInTheirNames(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	reads := &zktest.Counter{Path: p + "/items/"}
	s := connect(t, srv.Addrs(), zkrecipes.WithDialer(reads.Dial))
	other := connect(t, srv.Addrs()) // the test's own reads
	ctx := bg(t, 30*time.Second)
	q := newQueue(t, s, p)
	small := strings.Repeat("s", fairqueue.InlineMax)
	batch := []string{"a", "", small}
	ids, err := q.PutMany(ctx, [][]byte{[]byte("a"), []byte(""), []byte(small)})
	require.NoError(t, err)
	blobs := p + "/items/p" + ids[0][:10]
	zktest.CatchUp(t, other.Conn(), blobs) // q's session put them: other's member may lag
	kids, _, err := other.Conn().Children(blobs)
	require.NoError(t, err)
	require.Empty(t, kids, "a blob of payloads that fit their names")
	for i, want := range batch {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i], j.ID())
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	require.Zero(t, reads.Requests(zktest.OpGetData), "a read under items/")

	larger := small + "l"
	ids, err = q.PutMany(ctx, [][]byte{[]byte("a"), []byte(larger)})
	require.NoError(t, err)
	zktest.CatchUp(t, other.Conn(), p+"/items")
	kids, _, err = other.Conn().Children(p + "/items/p" + ids[0][:10])
	require.NoError(t, err)
	require.Len(t, kids, 1, "one blob, for a batch with a payload too large for a name")
	for i, want := range []string{"a", larger} {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		require.Equal(t, ids[i], j.ID())
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	require.NotZero(t, reads.Requests(zktest.OpGetData), "the blob never read: the count misses reads")
}

// A consumer reads a blob once for all the items of it an answer holds
// (whose offers do not carry them: too large), not once an item.
func TestBlobReadOncePerAnswer(t *testing.T) {
	srv := setup(t)
	other := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	d := standFirst(t, ctx, other, p)
	const n = 4
	var batch [][]byte
	for i := range n {
		batch = append(batch, []byte(strings.Repeat(fmt.Sprint(i), 8<<10)))
	}
	_, err := d.PutMany(ctx, batch)
	require.NoError(t, err)

	blobReads := &zktest.Counter{Path: p + "/items/p"}
	c := newQueue(t, connect(t, srv.Addrs(), zkrecipes.WithDialer(blobReads.Dial)), p)
	got := make(chan string, n)
	stop := work(t, ctx, c, func(ctx context.Context, j *fairqueue.Job) error {
		got <- string(j.Data())
		return nil
	}, fairqueue.WithHandlers(n), fairqueue.WithPrefetch(0))
	for range n {
		select {
		case data := <-got:
			require.Contains(t, batch, []byte(data))
		case <-time.After(liveWait):
			t.Fatal("a job never came")
		}
	}
	require.ErrorIs(t, stop(), context.Canceled)
	require.Equal(t, int64(1), blobReads.Requests(zktest.OpGetData), "blob reads for %d items in one answer", n)
}

// An item whose name holds its payload, left by a consumer that died at
// its last attempt, is buried by the dispatcher with its payload: the
// dispatcher reads the item for its version, and the payload is in the
// name, not the node.
func TestSmallPayloadBuriedByTheDispatcher(t *testing.T) {
	srv := setup(t)
	other := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	d := standFirst(t, ctx, other, p, fairqueue.WithMaxAttempts(1))
	id, err := d.Put(ctx, []byte("x"))
	require.NoError(t, err)
	s := connect(t, srv.Addrs())
	j, err := newQueue(t, s, p).Take(ctx)
	require.NoError(t, err)
	require.Equal(t, "x", string(j.Data()))
	require.NoError(t, s.Close())
	// The dispatcher buries as it hands out: a TryTake in line each time.
	var dead []fairqueue.DeadLetter
	require.Eventually(t, func() bool {
		_, err := d.TryTake(ctx)
		require.ErrorIs(t, err, fairqueue.ErrEmpty, "x delivered past its last attempt")
		dead, err = d.DeadLetters(ctx)
		require.NoError(t, err)
		return len(dead) > 0
	}, 10*time.Second, 10*time.Millisecond, "x never buried")
	require.Equal(t, []fairqueue.DeadLetter{{ID: id, Data: []byte("x"), Attempts: 1}}, dead)
	_, err = d.Requeue(ctx, id)
	require.NoError(t, err)
	j, err = d.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, "x", string(j.Data()))
	require.NoError(t, j.Ack(ctx))
}
