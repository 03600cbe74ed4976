package fairqueue_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// dispatcherOf reads which consumer dispatches the queue at p: the data of
// the lowest node in dispatch/ ("" when none).
func dispatcherOf(t *testing.T, s *zkrecipes.Session, p string) string {
	t.Helper()
	nodes := names(t, s, p+"/dispatch")
	if len(nodes) == 0 {
		return ""
	}
	lowest := nodes[0]
	for _, n := range nodes {
		if n[len(n)-10:] < lowest[len(lowest)-10:] {
			lowest = n
		}
	}
	data, _, err := s.Conn().Get(p + "/dispatch/" + lowest)
	if errors.Is(err, zk.ErrNoNode) {
		return ""
	}
	require.NoError(t, err)
	return string(data)
}

// A dispatcher that closes hands over at once: the next taking Queue is
// elected and hands out long before the closed one's session could have
// expired (its timeout here is 30s: a handover that waited for expiry
// would take that long).
func TestCleanCloseHandsOverAtOnce(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	long := []zkrecipes.Option{zkrecipes.WithSessionTimeout(30 * time.Second)}
	a := newQueue(t, connect(t, srv.Addrs(), long...), p)
	b := newQueue(t, connect(t, srv.Addrs(), long...), p)
	_, err := a.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	_, err = b.TryTake(ctx) // b stands behind a
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	watch := connect(t, srv.Addrs())
	first := dispatcherOf(t, watch, p)
	require.NotEmpty(t, first)

	took := make(chan time.Time, 1)
	go func() {
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		j, err := b.Take(tctx)
		if err == nil {
			took <- time.Now()
			err = j.Ack(ctx)
		}
		require.NoError(t, err)
	}()
	require.Eventually(t, func() bool { return len(waiting(t, watch, p)) == 1 }, liveWait, time.Millisecond)
	closed := time.Now()
	require.NoError(t, a.Close(ctx))
	_, err = a.Put(ctx, []byte("x")) // a closed Queue still puts
	require.NoError(t, err)
	select {
	case at := <-took:
		t.Logf("handed out %v after the dispatcher's Close", at.Sub(closed).Round(time.Millisecond))
		require.Less(t, at.Sub(closed), 20*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("no hand-out after the dispatcher closed")
	}
	require.NotEqual(t, first, dispatcherOf(t, watch, p), "another Queue dispatches")
	_, err = a.Take(ctx)
	require.ErrorIs(t, err, fairqueue.ErrClosed)
}

// A dispatcher whose connection freezes (a stopped process, a machine cut
// off) stalls hand-out until its session expires: no other Queue is
// elected while its node stands. Then the next one hands out, and the
// items are delivered once each, with their Attempt exact.
func TestFrozenDispatcherStallsUntilExpiry(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	const timeout = 4 * time.Second
	var fz zktest.Freezer
	ds := connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(timeout))
	d := newQueue(t, ds, p)
	_, err := d.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	cs := connect(t, srv.Addrs())
	c := newQueue(t, cs, p)
	id, err := c.Put(ctx, []byte("x"))
	require.NoError(t, err)

	fz.Freeze()
	frozen := time.Now()
	defer fz.Thaw()
	j, err := c.Take(ctx)
	require.NoError(t, err)
	stall := time.Since(frozen)
	require.Error(t, ds.Err(), "handed out while the frozen dispatcher's session lived")
	require.Equal(t, id, j.ID())
	require.Equal(t, 1, j.Attempt(), "never handed out before")
	require.NoError(t, j.Ack(ctx))
	t.Logf("hand-out stalled %v behind a frozen dispatcher (session timeout %v)", stall.Round(time.Millisecond), timeout)
	_, err = c.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// Job.Token grows with every delivery of an item, and Job.Guard commits
// only while its delivery holds: a consumer frozen past its session while
// it holds a job has the item delivered again, and its late guarded write
// (made through another session, as the frozen one's own is over) is
// refused, while the new delivery's commits.
func TestGuardRefusesAnEarlierDelivery(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	cs := connect(t, srv.Addrs())
	c := newQueue(t, cs, p)
	_, err := c.TryTake(ctx) // c dispatches
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	_, err = c.Put(ctx, []byte("x"))
	require.NoError(t, err)
	var fz zktest.Freezer
	fs := connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(2*time.Second))
	first, err := newQueue(t, fs, p).Take(ctx)
	require.NoError(t, err)
	fz.Freeze()
	defer fz.Thaw()

	second, err := c.Take(ctx) // once the frozen session expired
	require.NoError(t, err)
	require.Equal(t, first.ID(), second.ID())
	require.Equal(t, 2, second.Attempt())
	require.Greater(t, second.Token(), first.Token(), "tokens grow with deliveries")

	writer := connect(t, srv.Addrs())
	resource := zktest.Path(t, "/fairqueue-resource")
	_, err = writer.Conn().CreateContainer(path.Dir(resource), nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
	if !errors.Is(err, zk.ErrNodeExists) {
		require.NoError(t, err)
	}
	_, err = writer.Conn().Create(resource, []byte("0"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Conn().Delete(resource, -1) })
	_, err = writer.Conn().Multi(first.Guard(), &zk.SetDataRequest{Path: resource, Data: []byte("late"), Version: -1})
	require.ErrorIs(t, err, zk.ErrBadVersion, "the earlier delivery's guarded write")
	_, err = writer.Conn().Multi(second.Guard(), &zk.SetDataRequest{Path: resource, Data: []byte("now"), Version: -1})
	require.NoError(t, err, "the current delivery's guarded write")
	require.NoError(t, second.Ack(ctx))
	_, err = writer.Conn().Multi(second.Guard(), &zk.SetDataRequest{Path: resource, Data: []byte("acked"), Version: -1})
	require.Error(t, err, "a guarded write after the Ack")
	data, _, err := writer.Conn().Get(resource)
	require.NoError(t, err)
	require.Equal(t, "now", string(data))
}

// The dispatcher's server, a follower, is cut off from its peers while
// the dispatcher still reaches it (the case that bites): its hand-out
// multis cannot commit, so it hands out nothing more; its session expires
// at the leader, and a Queue on the majority's side is elected and hands
// out, each item once, with Attempt exact. The dispatcher's own consumer
// is told of the loss of its job before the item is delivered again.
func TestDispatcherCutOffWithItsFollower(t *testing.T) {
	zktest.CheckGoroutines(t) // first: checked after the cluster's proxies are closed
	c := zktest.StartLinkedCluster(t, 3)
	leader := c.WaitForLeader()
	cut, other := (leader+1)%3, leader
	ctx := bg(t, 90*time.Second)
	p := fmt.Sprintf("/fairqueue-partition/%d", time.Now().UnixNano())
	ds := connect(t, []string{c.Addr(cut)}, zkrecipes.WithSessionTimeout(2*time.Second))
	d := newQueue(t, ds, p)
	bs := connect(t, []string{c.Addr(other)})
	b := newQueue(t, bs, p)
	ids, err := b.PutMany(ctx, [][]byte{[]byte("held"), []byte("next")})
	require.NoError(t, err)
	held, err := d.Take(ctx) // d dispatches, and holds the first item
	require.NoError(t, err)
	require.Equal(t, ids[0], held.ID())

	c.Isolate(cut)
	defer c.Heal()
	got := map[string]*fairqueue.Job{}
	for range 2 {
		j, err := b.Take(ctx)
		require.NoError(t, err)
		if j.ID() == ids[0] {
			select {
			case <-held.Done():
			default:
				t.Fatal("the item was delivered again before its holder was told of the loss")
			}
		}
		got[j.ID()] = j
	}
	require.Error(t, ds.Err(), "handed out while the cut-off dispatcher's session lived")
	require.Equal(t, 2, got[ids[0]].Attempt(), "the cut-off consumer's item came back")
	require.Equal(t, 1, got[ids[1]].Attempt(), "never handed out before")
	for _, j := range got {
		require.NoError(t, j.Ack(ctx))
	}
	_, err = b.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// The dispatcher takes in what it sends from goroutines that race to hand
// their outcomes over, so a listing of held/ may be taken in before the
// reply to the hand-out that preceded it. An item handed out and given
// back at once (its node in held/ listed first) stays free, and is handed
// out again: it was forgotten, its new node in held/ left as seen, and no
// Take got it again. The hook holds the hand-out's reply until the give-back
// has been listed.
func TestGiveBackTakenInBeforeItsHandOut(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	other := connect(t, srv.Addrs())
	var armed atomic.Bool
	hold := func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		// The multi has landed: the node in held/ it deleted is gone, and
		// the next one is the give-back's.
		for deadline := time.Now().Add(liveWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if held, _, err := other.Conn().Children(p + "/held"); err == nil && len(held) > 0 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond) // the dispatcher lists held/ and takes it in
	}
	q := newQueue(t, connect(t, srv.Addrs()), p, fairqueue.WithHandOutHook(hold))
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j := takeWithin(t, q, other, p, "the item")
	require.NoError(t, j.Nack(ctx)) // held/ exists from now on

	armed.Store(true)
	j = takeWithin(t, q, other, p, "the item, given back once")
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Nack(ctx))
	j = takeWithin(t, q, other, p, "the item, given back while its hand-out's reply was held")
	require.Equal(t, id, j.ID())
	require.Equal(t, 3, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	require.False(t, armed.Load(), "the hook held no hand-out")
}
