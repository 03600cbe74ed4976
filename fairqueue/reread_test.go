package fairqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// The dispatcher reads the queue again after a reconnect: an item put
// while it was away is handed out, even if the watches go-zookeeper re-set
// missed the put (it may re-set them with a zxid newer than the last one it
// saw; see session.NextReconnect). Forced here: the dispatcher's connection
// is cut right after its watch on the newest bucket is set (Dropper
// AfterReply), it cannot reconnect while the item is put (Pause), and its
// re-set watches claim every zxid (LoseMissedEvents).
func TestTakeRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t, 60*time.Second)
	p := queuePath(t, srv.Addrs())
	producer := fq(t, connect(t, srv.Addrs()), p)
	d := &zktest.Dropper{}
	consumer := fq(t, d.Connect(t, srv.Addrs()), p)
	// One item, taken and held by the consumer, which, taking first, is the
	// dispatcher: bucket 0 stays, with nothing free in it, and the
	// dispatcher watches it for the next put.
	_, err := producer.Put(ctx, []byte("first"))
	require.NoError(t, err)
	first, err := consumer.Take(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, first.Ack(ctx)) }()

	d.LoseMissedEvents()
	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpGetChildren2, Path: p + "/items/", Watch: true}, zktest.AfterReply)
	// A put makes the dispatcher list the bucket again, watching it.
	_, err = producer.Put(ctx, []byte("while there"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return d.Fired() == 1 }, 30*time.Second, 2*time.Millisecond,
		"the dispatcher watched the bucket, and its connection was cut right after")
	_, err = producer.Put(ctx, []byte("while away"))
	require.NoError(t, err)
	d.Resume()
	for _, want := range []string{"while there", "while away"} {
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		j, err := consumer.Take(tctx)
		cancel()
		require.NoError(t, err, "the consumer takes %q", want)
		require.Equal(t, want, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	require.Equal(t, 2, d.Fired(), "the client re-set its watches, with every zxid claimed")
}
