package fairqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// A Take waiting for items reads the queue again after a reconnect: an item
// put while it was away is its, even if the watches go-zookeeper re-set
// missed the put (it may re-set them with a zxid newer than the last one it
// saw; see session.NextReconnect). Forced here: the consumer's connection is
// cut right after its watch on the newest bucket is set (Dropper
// AfterReply), it cannot reconnect while the item is put (Pause), and its
// re-set watches claim every zxid (LoseMissedEvents).
func TestTakeRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t, 60*time.Second)
	p := queuePath(t, srv.Addrs())
	producer := fq(t, connect(t, srv.Addrs()), p)
	// One item, taken and held: bucket 0 stays, with nothing in it for
	// the consumer, which watches it for the next put.
	_, err := producer.Put(ctx, []byte("first"))
	require.NoError(t, err)
	first, err := producer.Take(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, first.Ack(ctx)) }()

	d := &zktest.Dropper{}
	consumer := fq(t, d.Connect(t, srv.Addrs()), p)
	d.LoseMissedEvents()
	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpGetChildren2, Path: p + "/items/", Watch: true}, zktest.AfterReply)

	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	type taken struct {
		data string
		err  error
	}
	got := make(chan taken, 1)
	go func() {
		j, err := consumer.Take(tctx)
		if err != nil {
			got <- taken{err: err}
			return
		}
		got <- taken{string(j.Data()), j.Ack(ctx)}
	}()
	require.Eventually(t, func() bool { return d.Fired() == 1 }, 30*time.Second, 2*time.Millisecond,
		"the consumer watched the bucket, and its connection was cut right after")
	_, err = producer.Put(ctx, []byte("second"))
	require.NoError(t, err)
	d.Resume()
	r := <-got
	require.NoError(t, r.err, "the consumer takes the item put while it was away")
	require.Equal(t, "second", r.data)
	require.Equal(t, 2, d.Fired(), "the client re-set its watches, with every zxid claimed")
}
