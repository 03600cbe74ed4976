package fairqueue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// joinInOrder starts one Take per queue, each after the one before it
// stands in line, and returns their results, in that order.
func joinInOrder(t *testing.T, ctx context.Context, watch *zkrecipes.Session, p string, qs []*fairqueue.Queue) []chan taken {
	t.Helper()
	out := make([]chan taken, len(qs))
	for i, q := range qs {
		out[i] = make(chan taken, 1)
		go func() {
			j, err := q.Take(ctx)
			out[i] <- taken{j, err}
		}()
		require.Eventually(t, func() bool { return len(names(t, watch, p+"/line")) == i+1 }, liveWait, time.Millisecond)
	}
	return out
}

type taken struct {
	j   *fairqueue.Job
	err error
}

// The oldest item goes to the consumer that has waited longest: consumers
// that wait, then find items put all at once, get them in the order they
// began to wait, the i-th oldest to the i-th consumer; the head hands them
// out in one multi.
func TestHandOutOrder(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	producer := connect(t, srv.Addrs())
	var qs []*fairqueue.Queue
	for range 6 {
		qs = append(qs, fq(t, connect(t, srv.Addrs()), p))
	}
	got := joinInOrder(t, ctx, producer, p, qs)
	var batch [][]byte
	for i := range qs {
		batch = append(batch, fmt.Appendf(nil, "item %d", i))
	}
	ids, err := fq(t, producer, p).PutMany(ctx, batch)
	require.NoError(t, err)
	for i, c := range got {
		r := <-c
		require.NoError(t, r.err)
		assert.Equal(t, ids[i], r.j.ID(), "consumer %d (in line order) gets the %d-th oldest item", i, i)
		assert.Equal(t, 1, r.j.Attempt())
		require.NoError(t, r.j.Ack(ctx))
	}
}

// No claim loses a race, whatever the number of consumers: only the head
// of the line chooses items, and each consumer claims only what it was
// handed. Counted on the wire: the claim multis the server refused. (Before
// the hand-out, each consumer claimed the oldest item it saw, and a crowd
// lost most of its claims.) And each consumer's ids grow, but for items
// that came back.
func TestNoClaimLosesARace(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 120*time.Second)
	const consumers, items = 16, 400
	var w wire
	var qs []*fairqueue.Queue
	for range consumers {
		qs = append(qs, fq(t, connect(t, srv.Addrs(), zkrecipes.WithDialer(w.Dial)), p))
	}
	producer := fq(t, connect(t, srv.Addrs()), p)
	var batch [][]byte
	for i := range items {
		batch = append(batch, fmt.Appendf(nil, "%d", i))
	}
	for i := 0; i < items; i += 100 {
		_, err := producer.PutMany(ctx, batch[i:i+100])
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	took := make([][]got, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() {
			for {
				mu.Lock()
				done := len(seen) == items
				mu.Unlock()
				if done {
					return
				}
				tctx, cancel := context.WithTimeout(ctx, time.Second)
				j, err := q.Take(tctx)
				cancel()
				if err != nil {
					continue
				}
				took[i] = append(took[i], got{j.ID(), j.Attempt()})
				mu.Lock()
				seen[j.ID()]++
				mu.Unlock()
				assert.NoError(t, j.Ack(ctx))
			}
		})
	}
	wg.Wait()
	for id, n := range seen {
		require.Equal(t, 1, n, "item %s taken %d times", id, n)
	}
	back := 0
	for _, jobs := range took {
		back += assertOrder(t, jobs)
	}
	claims := w.count(func(m *sentMulti) bool { return m.claims() })
	failed := w.count(func(m *sentMulti) bool { return m.claims() && m.failed })
	t.Logf("%d items, %d consumers: %d claim multis, %d refused; %d items came back out of order", items, consumers, claims, failed, back)
	require.LessOrEqual(t, float64(failed)/items, 0.05, "claims refused per item taken")
}

// A consumer that froze holding an offer keeps the item from no one for
// longer than a grace: the next head passes its node over and hands the
// item out again, its second hand-out (Attempt 2: the item came back). The
// frozen consumer, thawed, cannot claim it (its offer was passed over): it
// joins the line again and takes a later item. Nothing is delivered twice.
func TestFrozenConsumerOfferPassedOver(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	producer := connect(t, srv.Addrs())
	var fz zktest.Freezer
	defer fz.Thaw()
	head := fq(t, connect(t, srv.Addrs()), p)
	frozen := fq(t, connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(30*time.Second)), p)
	got := joinInOrder(t, ctx, producer, p, []*fairqueue.Queue{head, frozen})
	fz.Stall() // it waits behind the head, and hears nothing from now on (SIGSTOP)
	ids, err := fq(t, producer, p).PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
	require.NoError(t, err)
	r := <-got[0]
	require.NoError(t, r.err)
	require.Equal(t, ids[0], r.j.ID())
	require.NoError(t, r.j.Ack(ctx))
	// ids[1] is offered to the frozen consumer; a later one takes it, once
	// the grace is over.
	later := takeWithin(t, fq(t, connect(t, srv.Addrs()), p), producer, p, "the item offered to a frozen consumer")
	require.Equal(t, ids[1], later.ID())
	require.Equal(t, 2, later.Attempt(), "the offer left unclaimed counted its hand-out")
	require.NoError(t, later.Ack(ctx))

	c, err := fq(t, producer, p).Put(ctx, []byte("c"))
	require.NoError(t, err)
	fz.Thaw()
	r = <-got[1]
	require.NoError(t, r.err, "the thawed consumer takes again")
	require.Equal(t, c, r.j.ID(), "the thawed consumer gets the next item, not the one passed on")
	require.NoError(t, r.j.Ack(ctx))
	_, err = fq(t, producer, p).TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// A head of the line killed (SIGKILL, its session lingering) holds no one
// up: the consumer behind it passes it over after a grace and takes the
// items, long before the dead session expires.
func TestDeadHeadPassedOver(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	other := connect(t, srv.Addrs())
	const deadTimeout = 30 * time.Second // far longer than liveWait

	killed := deadHead(t, srv.Addrs(), other, p, deadTimeout)

	q := fq(t, other, p)
	got := make(chan taken, 1)
	go func() {
		j, err := q.Take(ctx)
		got <- taken{j, err}
	}()
	require.Eventually(t, func() bool { return len(names(t, other, p+"/line")) == 2 }, liveWait, time.Millisecond)
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, id, r.j.ID())
	require.Less(t, time.Since(killed), deadTimeout, "taken before the dead head's session could expire")
	t.Logf("taken %v after the head was killed", time.Since(killed).Round(time.Millisecond))
	require.NoError(t, r.j.Ack(ctx))
	// The dead head's node goes with its session.
	require.Eventually(t, func() bool { return len(names(t, other, p+"/line")) == 0 }, 2*deadTimeout, 50*time.Millisecond)
}

// A consumer taking with short Takes, each given up before the grace, still
// passes over a dead head: the grace is the Queue's to count, not the
// Take's, so a new Take behind the same head goes on counting where the
// last one stopped rather than starting again. (Counted per Take, Takes of
// 80 ms behind a head whose session lingers took nothing until it ended.)
func TestShortTakesPassDeadHead(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	other := connect(t, srv.Addrs())
	const deadTimeout = 10 * time.Second // far longer than the greatest grace, 2 s

	killed := deadHead(t, srv.Addrs(), other, p, deadTimeout)

	q := fq(t, other, p)
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	const short = 80 * time.Millisecond // below the least grace, 100 ms
	var j *fairqueue.Job
	takes := 0
	for j == nil && time.Since(killed) < deadTimeout/2 {
		tctx, cancel := context.WithTimeout(ctx, short)
		j, err = q.Take(tctx)
		cancel()
		takes++
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
	}
	require.NotNil(t, j, "%d Takes of %v behind a dead head took nothing in %v", takes, short, deadTimeout/2)
	require.Equal(t, id, j.ID())
	t.Logf("taken by Take %d, %v after the head was killed", takes, time.Since(killed).Round(time.Millisecond))
	require.NoError(t, j.Ack(ctx))
	require.Eventually(t, func() bool { return len(names(t, other, p+"/line")) == 0 }, 2*deadTimeout, 50*time.Millisecond)
}

// deadHead puts at the head of the line at p a consumer (a process of its
// own, with sessions of timeout) and kills it with SIGKILL: its session
// lingers, its node in line with it. It returns when it was killed.
func deadHead(t *testing.T, addrs []string, other *zkrecipes.Session, p string, timeout time.Duration) time.Time {
	t.Helper()
	cmd := exec.Command(buildChild(t, "consumer"))
	cmd.Env = append(os.Environ(), "FQ_ADDRS="+strings.Join(addrs, ","), "FQ_PATH="+p, "FQ_TIMEOUT="+timeout.String(), "FQ_WAIT=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	l, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "waiting\n", l)
	require.Eventually(t, func() bool { return len(names(t, other, p+"/line")) == 1 }, liveWait, time.Millisecond)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	return time.Now()
}

// A head of the line cut off from the ensemble just as its hand-out
// landed (the reply lost, and no way back for now: frozen, or dead with its
// session lingering) holds the one item it claimed and nothing else: its
// offer reaches the consumer behind it, its node left the line in the same
// multi, and the others take every other item while its claim stands. Back
// before its session ends, it finds its claim and has the job.
func TestHeadCutOffAfterHandOutHoldsOnlyItsJob(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	other := connect(t, srv.Addrs())
	var d zktest.Dropper
	defer d.Resume()
	cutS := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(30*time.Second))
	q := fq(t, other, p)
	// line/ and claims/ exist from now on: the hand-out's claim can land.
	_, err := q.Put(ctx, []byte("warm"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Ack(ctx))

	got := joinInOrder(t, ctx, other, p, []*fairqueue.Queue{fq(t, cutS, p), q})
	d.Pause()
	d.Arm(zktest.Match{Op: zktest.OpCreate, Path: "/claims/"}, zktest.LoseReply)
	ids, err := q.PutMany(ctx, [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")})
	require.NoError(t, err)
	r := <-got[1]
	require.NoError(t, r.err)
	require.Equal(t, 1, d.Fired(), "the head's hand-out landed and it was cut off")
	require.Equal(t, ids[1], r.j.ID(), "the offer of the cut-off head's hand-out")
	require.NoError(t, r.j.Ack(ctx))
	for _, id := range ids[2:] {
		j := takeWithin(t, q, other, p, "an item while the head that claimed the one before is cut off")
		require.Equal(t, id, j.ID())
		require.NoError(t, j.Ack(ctx))
	}
	// Its claim stood all along: no one waited for its session to end.
	require.Equal(t, []string{ids[0]}, names(t, other, p+"/claims"))
	found, st, err := other.Conn().Exists(p + "/claims/" + ids[0])
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, cutS.ID(), st.EphemeralOwner)
	require.Empty(t, names(t, other, p+"/line"), "the cut-off head's node left with its hand-out")

	d.Resume()
	r = <-got[0]
	require.NoError(t, r.err, "back, the head finds its claim")
	require.Equal(t, ids[0], r.j.ID())
	require.Equal(t, 1, r.j.Attempt())
	require.NoError(t, r.j.Ack(ctx))
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// TryTake never takes an item offered to a waiting consumer, but takes one
// whose offer has stood longer than a grace (its consumer frozen, say),
// rather than wait for a head to pass it on.
func TestTryTakeLeavesOffers(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	ctx := bg(t, 60*time.Second)
	producer := connect(t, srv.Addrs())
	var fz zktest.Freezer
	defer fz.Thaw()
	head := fq(t, connect(t, srv.Addrs()), p)
	frozen := fq(t, connect(t, srv.Addrs(), zkrecipes.WithDialer(fz.Dial), zkrecipes.WithSessionTimeout(30*time.Second)), p)
	fctx, fcancel := context.WithCancel(ctx)
	got := joinInOrder(t, fctx, producer, p, []*fairqueue.Queue{head, frozen})
	fz.Stall()
	ids, err := fq(t, producer, p).PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
	require.NoError(t, err)
	r := <-got[0]
	require.NoError(t, r.err)
	require.NoError(t, r.j.Ack(ctx))
	tq := fq(t, producer, p)
	_, err = tq.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "the item offered to the frozen consumer")
	var j *fairqueue.Job
	require.Eventually(t, func() bool {
		j, err = tq.TryTake(ctx)
		return err == nil
	}, liveWait, 10*time.Millisecond, "TryTake takes the offer left too long: %v", err)
	require.Equal(t, ids[1], j.ID())
	require.NoError(t, j.Ack(ctx))
	fcancel()
	fz.Thaw()
	require.True(t, errors.Is((<-got[1]).err, context.Canceled))
}
