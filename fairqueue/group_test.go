package fairqueue_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// heldSession is a session whose first multi under p can be held back (by
// its Dropper) while others queue up behind it, with its multis recorded.
func heldSession(t *testing.T, addrs []string) (*zktest.Dropper, *wire, *zkrecipes.Session) {
	d := &zktest.Dropper{}
	w := &wire{next: d.Dial}
	return d, w, zktest.Connect(t, d.Addrs(addrs), zkrecipes.WithDialer(w.Dial))
}

// holdFirst holds the next multi under p back for a moment, and waits until
// it is held.
func holdFirst(t *testing.T, d *zktest.Dropper, p string) {
	d.HoldFor(zktest.Match{Op: zktest.OpMulti, Path: p}, zktest.Match{Op: zktest.OpMulti, Path: "/no such path"}, 300*time.Millisecond)
	t.Cleanup(func() { d.Disarm() })
}

// Concurrent Puts of one Queue share multis: while one is out, the others
// wait, and go together in the next. One that fails alone (its key taken
// by an item put before; too large) fails alone: its neighbours are put,
// and a Put whose key is taken returns the item that holds it.
func TestPutsShareMultisAndFailAlone(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	d, w, s := heldSession(t, srv.Addrs())
	q := fq(t, s, p)
	kept, err := q.Put(ctx, []byte("keyed"), fairqueue.WithKey("k"))
	require.NoError(t, err)

	holdFirst(t, d, p)
	first := make(chan error, 1)
	go func() {
		_, err := q.Put(ctx, []byte("first"))
		first <- err
	}()
	require.Eventually(t, func() bool { return d.Armed() == 0 }, liveWait, time.Millisecond, "the first put is held")
	before := w.countSent(func(m *sentMulti) bool { return m.has(1, "/items/") }) // with the one held
	type put struct {
		id  string
		err error
	}
	const n = 10
	puts := make([]put, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var opts []fairqueue.PutOption
			data := fmt.Appendf(nil, "%d", i)
			switch i {
			case 3:
				opts = append(opts, fairqueue.WithKey("k"))
			case 6:
				data = bytes.Repeat([]byte("x"), zkrecipes.MaxDataSize+1)
			}
			puts[i].id, puts[i].err = q.Put(ctx, data, opts...)
		})
	}
	wg.Wait()
	require.NoError(t, <-first)
	for i, r := range puts {
		switch i {
		case 3:
			require.NoError(t, r.err)
			require.Equal(t, kept, r.id, "the key's item")
		case 6:
			require.ErrorIs(t, r.err, zkrecipes.ErrDataTooLarge)
		default:
			require.NoError(t, r.err, "put %d", i)
		}
	}
	multis := w.count(func(m *sentMulti) bool { return m.has(1, "/items/") }) - before
	t.Logf("%d puts, %d multis creating items", n-1, multis)
	// The batch; the batch again without the item whose key is taken; that
	// item alone, finding its key's item.
	require.LessOrEqual(t, multis, 3, "puts that queue behind one go together")
	got := drain(t, q, n) // the keyed one, the first, the eight others
	require.Len(t, got, n)
}

// Concurrent Acks of one Queue share multis; one whose delivery was lost
// fails alone (ErrClaimLost), and its item is delivered again.
func TestAcksShareMultisAndFailAlone(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	d, w, s := heldSession(t, srv.Addrs())
	q := fq(t, s, p)
	other := connect(t, srv.Addrs())
	const n = 6
	var batch [][]byte
	for i := range n {
		batch = append(batch, fmt.Appendf(nil, "%d", i))
	}
	_, err := fq(t, other, p).PutMany(ctx, batch)
	require.NoError(t, err)
	var jobs []*fairqueue.Job
	for range n {
		j, err := q.TryTake(ctx)
		require.NoError(t, err)
		jobs = append(jobs, j)
	}
	lost := jobs[2]
	require.NoError(t, deleteTicket(t, other, p, lost))

	holdFirst(t, d, p+"/items/")
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = jobs[0].Ack(ctx) })
	require.Eventually(t, func() bool { return d.Armed() == 0 }, liveWait, time.Millisecond, "the first ack is held")
	before := w.countSent(func(m *sentMulti) bool { return m.has(2, "/items/") }) // with the one held
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = jobs[i].Ack(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if i == 2 {
			require.ErrorIs(t, err, fairqueue.ErrClaimLost)
			continue
		}
		require.NoError(t, err, "ack %d", i)
	}
	multis := w.count(func(m *sentMulti) bool { return m.has(2, "/items/") }) - before
	t.Logf("%d acks, %d multis", n-1, multis)
	// The batch, and the batch again without the ack that failed.
	require.LessOrEqual(t, multis, 2, "acks that queue behind one go together")
	// The consumer that learnt of the loss gave the item back.
	again, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, lost.ID(), again.ID())
	require.Equal(t, 2, again.Attempt())
	require.NoError(t, again.Ack(ctx))
	_, err = q.TryTake(ctx)
	require.True(t, errors.Is(err, fairqueue.ErrEmpty))
}
