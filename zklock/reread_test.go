package zklock_test

// After a reconnect, whatever waits on a watch reads again what it waits
// on: go-zookeeper v1.0.4 may re-set its watches with a zxid newer than the
// last one it saw (a reply to a request queued during the outage can
// advance it first), and the server then fires none of them for what
// changed meanwhile. Each test forces that: the waiter's connection is cut
// right after its watch is set (Dropper AfterReply), it cannot reconnect
// while another session makes the change it waits for (Pause), and its
// re-set watches claim every zxid (LoseMissedEvents). The waiter must still
// see the change.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// rereadWait bounds the wait for the change in these tests: a waiter that
// missed it waits until then, and fails, instead of hanging.
const rereadWait = 20 * time.Second

// blindOutage arms d for the outage: the connection is cut right after the
// reply to the read that sets the watch m, the client cannot reconnect until
// d.Resume, and the watches it re-sets then are blind to what changed
// meanwhile. The caller waits for the cut with cutDone.
func blindOutage(t *testing.T, d *zktest.Dropper, m zktest.Match) {
	t.Helper()
	m.Watch = true
	d.LoseMissedEvents()
	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(m, zktest.AfterReply)
}

// cutDone waits until the outage's cut has happened: the waiter holds its
// watch, and its connection is gone.
func cutDone(t *testing.T, d *zktest.Dropper) {
	t.Helper()
	require.Eventually(t, func() bool { return d.Fired() == 1 }, 30*time.Second, 2*time.Millisecond,
		"the waiter set its watch, and its connection was cut right after")
}

// requireBlind checks that the reconnect re-set the watches blind (the
// fault this file is about really happened).
func requireBlind(t *testing.T, d *zktest.Dropper) {
	t.Helper()
	require.Eventually(t, func() bool { return d.Fired() == 2 }, 30*time.Second, 2*time.Millisecond,
		"the client re-set its watches, with every zxid claimed")
}

// A Mutex waiter whose predecessor is released while it is away is granted
// the lock once it is back. (This one holds on the code before the re-read
// too: the server fires a re-set data watch whose node is gone whatever the
// zxid, and a Mutex waiter waits only for nodes to go. It is here for the
// engine's way back to listing after a reconnect, which every recipe on
// the engine takes.)
func TestMutexWaiterRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	holder := connect(t, srv.Addrs())
	path := lockPath(t, holder)
	hm, err := zklock.NewMutex(holder, path)
	require.NoError(t, err)
	first, err := hm.Lock(ctx)
	require.NoError(t, err)

	d := &zktest.Dropper{}
	waiter := d.Connect(t, srv.Addrs())
	wm, err := zklock.NewMutex(waiter, path)
	require.NoError(t, err)
	blindOutage(t, d, zktest.Match{Op: zktest.OpGetData, Path: first.Path()})
	wctx, cancel := context.WithTimeout(ctx, rereadWait)
	defer cancel()
	got := make(chan error, 1)
	var lease *zklock.Lease
	go func() {
		var err error
		lease, err = wm.Lock(wctx)
		got <- err
	}()
	cutDone(t, d)
	require.NoError(t, first.Unlock(ctx))
	d.Resume()
	require.NoError(t, <-got, "the waiter is granted the lock its predecessor released while it was away")
	requireBlind(t, d)
	require.NoError(t, lease.Unlock(ctx))
}

// A Semaphore waiter behind another waiter: its predecessor becomes a
// holder while it is away (and says so by writing its node, which the
// waiter's blind watch misses). Once back, the waiter is the first in line
// and must watch every holder: a permit freed by another holder is its.
func TestSemaphoreWaiterRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	path := lockPath(t, s)
	sem := func() *zklock.Semaphore {
		sm, err := zklock.NewSemaphore(connect(t, srv.Addrs()), path, 2)
		require.NoError(t, err)
		return sm
	}
	h1, err := sem().Acquire(ctx)
	require.NoError(t, err)
	h2, err := sem().Acquire(ctx)
	require.NoError(t, err)

	// b waits first (watching both holders), c behind it (watching b).
	sb := sem()
	bGot := make(chan *zklock.Lease, 1)
	go func() {
		l, err := sb.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		bGot <- l
	}()
	var bPath string
	require.Eventually(t, func() bool {
		cs, err := sb.Contenders(ctx)
		require.NoError(t, err)
		if len(cs) == 3 {
			bPath = cs[2].Path
		}
		return bPath != ""
	}, 10*time.Second, 5*time.Millisecond)

	d := &zktest.Dropper{}
	sc, err := zklock.NewSemaphore(d.Connect(t, srv.Addrs()), path, 2)
	require.NoError(t, err)
	blindOutage(t, d, zktest.Match{Op: zktest.OpGetData, Path: bPath})
	cctx, cancel := context.WithTimeout(ctx, rereadWait)
	defer cancel()
	cGot := make(chan error, 1)
	var cLease *zklock.Lease
	go func() {
		var err error
		cLease, err = sc.Acquire(cctx)
		cGot <- err
	}()
	cutDone(t, d)
	// While c is away, a permit frees and b takes it.
	require.NoError(t, h1.Unlock(ctx))
	b := <-bGot
	require.NotNil(t, b)
	d.Resume()
	requireBlind(t, d)
	// The other holder leaves: its permit is c's.
	require.NoError(t, h2.Unlock(ctx))
	require.NoError(t, <-cGot, "the first waiter takes a permit freed by a holder other than its predecessor")
	require.NoError(t, cLease.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
}

// An observer of an election without a leader sees the leader that came
// while it was away.
func TestObserveRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	cand := connect(t, srv.Addrs())
	path := lockPath(t, cand)
	el, err := zklock.NewElection(cand, path)
	require.NoError(t, err)
	// Make the directory, with no contender left in it.
	lead, err := el.Campaign(ctx, []byte("first"))
	require.NoError(t, err)
	require.NoError(t, lead.Resign(ctx))

	d := &zktest.Dropper{}
	obs := d.Connect(t, srv.Addrs())
	oel, err := zklock.NewElection(obs, path)
	require.NoError(t, err)
	zktest.CatchUp(t, obs.Conn(), path) // obs's member may lag behind cand's Resign
	blindOutage(t, d, zktest.Match{Op: zktest.OpGetChildren2, Path: path})
	octx, cancel := context.WithTimeout(ctx, rereadWait)
	defer cancel()
	leaders := oel.Observe(octx)
	l, ok := <-leaders
	require.True(t, ok)
	require.Empty(t, l.Path, "no leader yet")
	cutDone(t, d)
	lead, err = el.Campaign(ctx, []byte("second"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lead.Resign(context.Background())) }) // before lockPath's check
	d.Resume()
	l, ok = <-leaders
	require.True(t, ok, "the observer sees the leader that came while it was away")
	require.Equal(t, "second", string(l.Value))
	requireBlind(t, d)
	cancel()
	for range leaders {
	}
}

// A holder whose node is deleted by another client while it is away is
// told it lost the lock once it is back. Just after an uncontended Lock,
// the directory's child watch stands in for a watch on the node, and a
// blind re-set child watch never fires for the delete: the lease's owner
// must read its node again after the reconnect.
func TestHolderRereadsAfterReconnect(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	other := connect(t, srv.Addrs())
	path := lockPath(t, other)
	om, err := zklock.NewMutex(other, path)
	require.NoError(t, err)
	ol, err := om.Lock(ctx) // the directory exists from now on
	require.NoError(t, err)
	require.NoError(t, ol.Unlock(ctx))
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	m, err := zklock.NewMutex(s, path)
	require.NoError(t, err)
	// The listing sent with the create sets the directory's watch; the
	// connection is cut right after its reply.
	blindOutage(t, d, zktest.Match{Op: zktest.OpGetChildren2, Path: path})
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	cutDone(t, d)
	require.NoError(t, other.Conn().Delete(l.Path(), -1), "a stranger deletes the holder's node while it is away")
	d.Resume()
	requireBlind(t, d)
	select {
	case <-l.Done():
	case <-time.After(rereadWait):
		t.Fatalf("the holder was never told its node was deleted while it was away")
	}
	require.ErrorIs(t, l.Err(), zklock.ErrLockLost)
	require.ErrorIs(t, l.Unlock(ctx), zklock.ErrLockLost)
}
