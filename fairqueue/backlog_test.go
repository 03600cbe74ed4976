package fairqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// putN puts n items "0".."n-1" and returns their ids, oldest first.
func putN(t *testing.T, ctx context.Context, q *fairqueue.Queue, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id, err := q.Put(ctx, fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// takeAck takes the next item, checks it is want (at attempt), and acks it.
func takeAck(t *testing.T, ctx context.Context, q *fairqueue.Queue, want string, attempt int) {
	t.Helper()
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, want, j.ID())
	require.Equal(t, attempt, j.Attempt())
	require.NoError(t, j.Ack(ctx))
}

// While items wait, a Take after the first is served from the backlog its
// look left: it reads items and claims one, and lists nothing (a Dropper
// armed on every listing of the queue does not fire). Order holds
// throughout.
func TestTakeFromBacklogSendsNoListing(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	q := fq(t, s, p, fairqueue.WithBacklogTTL(time.Minute))
	ctx := bg(t, 60*time.Second)
	ids := putN(t, ctx, q, fairqueue.BacklogMin+4)

	takeAck(t, ctx, q, ids[0], 1) // a look, which leaves the rest as a backlog
	for _, op := range []int32{zktest.OpGetChildren, zktest.OpGetChildren2} {
		d.Arm(zktest.Match{Op: op, Path: p}, zktest.AfterWrite)
		takeAck(t, ctx, q, ids[1], 1)
		require.Zero(t, d.Fired(), "a Take served from the backlog listed the queue (%s)", opNames[op])
		d.Disarm()
		ids = ids[1:]
	}
	for _, id := range ids[1:] {
		takeAck(t, ctx, q, id, 1)
	}
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// A Nack puts the item back ahead of everything put after it, also for a
// Queue whose next Takes would be served from a backlog of newer items.
func TestBacklogNackKeepsPlace(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	q := fq(t, connect(t, srv.Addrs()), p, fairqueue.WithBacklogTTL(time.Minute))
	ctx := bg(t, 60*time.Second)
	ids := putN(t, ctx, q, fairqueue.BacklogMin+2)

	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[0], j.ID())
	require.NoError(t, j.Nack(ctx))
	takeAck(t, ctx, q, ids[0], 2)
	for _, id := range ids[1:] {
		takeAck(t, ctx, q, id, 1)
	}
}

// An item another consumer loses (its session ends) comes back to a
// consumer that takes from a backlog: found by its next look, as a
// redelivery, and that consumer's first deliveries keep their order.
func TestBacklogFindsAnotherConsumersLoss(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	q := fq(t, connect(t, srv.Addrs()), p) // the default backlog time
	ids := putN(t, ctx, q, 3*fairqueue.BacklogMin)

	gone := connect(t, srv.Addrs())
	j, err := fq(t, gone, p).Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[0], j.ID())
	takeAck(t, ctx, q, ids[1], 1) // q's look leaves a backlog
	gone.Close()                  // ids[0]'s claim goes with the session

	seen := map[string]int{}
	prev := ids[1]
	for len(seen) < len(ids)-1 {
		j, err := q.Take(ctx)
		require.NoError(t, err)
		if j.Attempt() == 1 {
			require.Greater(t, j.ID(), prev, "first deliveries in id order")
			prev = j.ID()
		} else {
			require.Equal(t, ids[0], j.ID(), "only the lost item comes back")
			require.Equal(t, 2, j.Attempt())
		}
		seen[j.ID()]++
		require.NoError(t, j.Ack(ctx))
	}
	require.Equal(t, 1, seen[ids[0]], "the lost item, delivered again once")
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}
