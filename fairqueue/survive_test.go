//go:build !race

// Servers killed under the clients make them reconnect with watches set,
// which go-zookeeper v1.0.4 does with a data race of its own (see
// reconnect_test.go in the root package): make test runs this file in its
// second pass, without -race.

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// The queue under faults, on a 3-node ensemble: servers killed with -9 and
// restarted while producers put and consumers take; a consumer frozen
// while it holds a job, another frozen while it takes (waiting in line, or
// holding a job it claimed just then); consumer processes killed with
// SIGKILL holding jobs. Nothing put is lost, nothing is acked twice, and the
// live consumers drain every pending item but those the frozen and killed
// consumers hold before the dead ones' sessions can expire: they never wait
// on a dead consumer.
func TestQueueSurvivesFaults(t *testing.T) {
	setup(t)
	cluster := zktest.StartCluster(t, 3)
	addrs := cluster.Addrs()
	p := zktest.Path(t, "/fairqueue-faults")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const (
		items       = 240
		fresh       = 10               // of them, put once the faults are over, for a fresh consumer
		forKilled   = 2                // and before them, put for the consumer processes to take
		deadTimeout = 30 * time.Second // the frozen and killed consumers'
	)
	liveOpts := []zkrecipes.Option{zkrecipes.WithSessionTimeout(10 * time.Second)}

	check := connect(t, addrs)
	checkQ := fq(t, check, p)
	var takers []*fairqueue.Queue
	// checkQ takes first: the dispatcher is a live consumer, never frozen
	// nor killed here (those stall hand-out until their sessions expire;
	// see TestKilledDispatcherHandsOverAtExpiry).
	_, err := checkQ.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	var (
		mu      sync.Mutex
		acked   = map[string]int{}  // payload -> successful acks
		unknown = map[string]bool{} // payload -> an ack whose outcome is unknown
	)
	ack := func(j *fairqueue.Job) {
		err := j.Ack(ctx)
		switch {
		case errors.Is(err, fairqueue.ErrOutcomeUnknown):
			// The frozen waiter's ack, sent as the freeze began: applied,
			// or the item comes back once its session ends. Which, the
			// queue tells at the end: it must be empty.
			t.Logf("ack %s: %v", j.ID(), err)
			mu.Lock()
			unknown[string(j.Data())] = true
			mu.Unlock()
		case err != nil:
			t.Errorf("ack %s: %v", j.ID(), err)
		default:
			mu.Lock()
			acked[string(j.Data())]++
			mu.Unlock()
		}
	}
	// count is how many items were acked, or had an ack whose outcome is
	// unknown.
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := len(acked)
		for d := range unknown {
			if acked[d] == 0 {
				n++
			}
		}
		return n
	}
	// ackedAll: every item acked, or, for one whose ack's outcome is
	// unknown, nothing left pending or claimed that could be it.
	ackedAll := func() bool {
		if count() < items {
			return false
		}
		mu.Lock()
		unsure := len(unknown) > 0
		mu.Unlock()
		if !unsure {
			return true
		}
		tickets, _, err := check.Conn().Children(p + "/ready")
		if err != nil && !errors.Is(err, zk.ErrNoNode) || served(check.Conn(), p, tickets) > 0 {
			return false
		}
		n, err := checkQ.Len(ctx)
		return err == nil && n == 0
	}

	// The consumer processes' program, built first: once a consumer is
	// frozen, its session's time runs.
	bin := buildChild(t, "consumer")

	// Producers: every item keyed, so a put whose outcome is unknown is put
	// again, safely.
	var producers sync.WaitGroup
	for w := range 2 {
		q := fq(t, connect(t, addrs, liveOpts...), p)
		producers.Go(func() {
			for i := w; i < items-fresh-forKilled; i += 2 {
				key := fmt.Sprint("item-", i)
				for {
					_, err := q.Put(ctx, []byte(key), fairqueue.WithKey(key))
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						t.Errorf("put %s: %v", key, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}

	// Live consumers; paused, they leave the line within half a second.
	// owners names the consumers' sessions, to tell whose a claim is (the
	// killed consumers' are not in it).
	var live sync.WaitGroup
	var paused atomic.Bool
	owners := map[int64]string{}
	for range 3 {
		s := connect(t, addrs, liveOpts...)
		owners[s.ID()] = alive
		q := fq(t, s, p)
		takers = append(takers, q)
		live.Go(func() {
			for !ackedAll() && ctx.Err() == nil {
				if paused.Load() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				tctx, tcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				j, err := q.Take(tctx)
				tcancel()
				if err != nil {
					continue // timed out, or a fault: take again
				}
				ack(j)
			}
		})
	}

	// A consumer frozen while it holds a job, one frozen while it takes:
	// with items coming, it may hold one too (its claim landed and the
	// freeze dropped the reply, or its ack), as any consumer may die
	// between a claim and its ack.
	var holdFz, waitFz zktest.Freezer
	holdS := connect(t, addrs, zkrecipes.WithDialer(holdFz.Dial), zkrecipes.WithSessionTimeout(deadTimeout))
	owners[holdS.ID()] = "the holder"
	holder := fq(t, holdS, p)
	takers = append(takers, holder)
	j, err := holder.Take(ctx)
	require.NoError(t, err)
	holdFz.Freeze()
	frozenJob := string(j.Data())
	waitS := connect(t, addrs, zkrecipes.WithDialer(waitFz.Dial), zkrecipes.WithSessionTimeout(deadTimeout))
	owners[waitS.ID()] = "the waiter"
	waiter := fq(t, waitS, p)
	takers = append(takers, waiter)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		for wctx.Err() == nil {
			if j, err := waiter.Take(wctx); err == nil {
				ack(j) // before the freeze, or once thawed
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	waitFz.Freeze()

	// Consumer processes, killed holding a job. The live consumers pause
	// meanwhile, and an item is put for each process: by now the producers
	// may be done and the queue drained, and a process would wait for the
	// next item, the holder's, back as its session ends.
	paused.Store(true)
	time.Sleep(time.Second)
	var forThem [][]byte
	for i := items - fresh - forKilled; i < items-fresh; i++ {
		forThem = append(forThem, fmt.Appendf(nil, "item-%d", i))
	}
	_, err = checkQ.PutMany(ctx, forThem)
	require.NoError(t, err)
	for range forKilled {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "FQ_ADDRS="+strings.Join(addrs, ","), "FQ_PATH="+p, "FQ_TIMEOUT="+deadTimeout.String())
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "took "), line)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
	}
	paused.Store(false)
	dead := time.Now() // from here the dead consumers' sessions may not expire before deadTimeout

	// Servers killed and restarted, the leader among them.
	for _, i := range []int{cluster.Leader(), 0} {
		cluster.Stop(i)
		time.Sleep(300 * time.Millisecond)
		cluster.Restart(i)
	}
	restarted := time.Now()
	producers.Wait()

	// A consumer that comes once the faults are over takes at once while
	// items wait: it waits on no dead or frozen consumer standing in line
	// ahead of it. The live consumers pause meanwhile, so that the items
	// wait for it.
	paused.Store(true)
	time.Sleep(time.Second)
	var batch [][]byte
	for i := items - fresh; i < items; i++ {
		batch = append(batch, fmt.Appendf(nil, "item-%d", i))
	}
	_, err = checkQ.PutMany(ctx, batch)
	require.NoError(t, err)
	freshS := connect(t, addrs, liveOpts...)
	owners[freshS.ID()] = alive
	freshQ := fq(t, freshS, p)
	takers = append(takers, freshQ, checkQ)
	var slowest time.Duration
	for range 3 {
		t0 := time.Now()
		tctx, tcancel := context.WithTimeout(ctx, deadTimeout/2)
		j, err := freshQ.Take(tctx)
		tcancel()
		require.NoError(t, err, "a fresh consumer's Take while items wait, after the faults")
		slowest = max(slowest, time.Since(t0))
		ack(j)
	}
	t.Logf("a fresh consumer's Takes after the faults, items waiting: the slowest took %v", slowest.Round(time.Millisecond))
	paused.Store(false)

	// Every item not held by a frozen or killed consumer is acked before
	// any of their sessions can end: no live consumer waited on a dead one.
	// What they hold, their served tickets say: one each for the holder and
	// the killed consumers, and for the waiter one for the Take the freeze
	// caught it in, and one for the next Take's ticket an Ack of its may
	// have put in line (a spare).
	t.Logf("restarts done %v after the kills", restarted.Sub(dead).Round(time.Millisecond))
	var left []string
	held := map[string]string{}
	for {
		left, err = pendingBesides(check.Conn(), p, owners, held)
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(dead.Add(deadTimeout)) {
			t.Fatalf("the pending items were not drained while the dead consumers held their places: left %v (%v); %d of %d acked; held by the frozen and killed consumers: %v",
				left, err, count(), items, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	drained := time.Since(dead)
	require.LessOrEqual(t, len(held), 5, "one job each for the holder and the killed consumers, two for the waiter: %v", held)
	t.Logf("pending items drained; the frozen and killed consumers held %d: %v", len(held), held)

	// Then, as their sessions end, the held items come back.
	require.Eventually(t, ackedAll, 60*time.Second, 20*time.Millisecond, "the dead consumers' items came back")
	holdFz.Thaw()
	waitFz.Thaw()
	wcancel()
	<-waiterDone
	live.Wait()

	for key, n := range acked {
		assert.Equal(t, 1, n, "%s acked %d times", key, n)
	}
	require.Equal(t, items, count(), "nothing put was lost")
	require.True(t, acked[frozenJob] == 1 || unknown[frozenJob], "the frozen holder's item %s was acked", frozenJob)
	// The Queues that took stand as dispatcher, with an inbox, until closed.
	for _, q := range takers {
		require.NoError(t, q.Close(ctx))
	}
	require.Eventually(t, func() bool { return len(leaves(t, check.Conn(), p, 0)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"nodes left behind: %v", leaves(t, check.Conn(), p, 0))
	t.Logf("%d items; pending ones drained %v after the kills; all acked", items, drained.Round(time.Millisecond))
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}

// alive names a live consumer's session in owners.
const alive = "alive"

// served counts the served tickets among names, in p's ready/.
func served(c *zk.Conn, p string, names []string) int {
	n := 0
	for _, name := range names {
		if _, st, err := c.Exists(p + "/ready/" + name); err == nil && st != nil && st.Version > 0 {
			n++
		}
	}
	return n
}

// pendingBesides lists the ids of the items of the queue at p that are
// pending or handed out, but for those handed out to a consumer that is
// not alive in owners; it fills held with those, naming whose each is. An
// item is handed out while its ticket stands served in ready/ (its owner
// is the ticket's session) and its consumer's inbox offers it. It reads
// the tickets and inboxes first: an item handed out since, or still
// pending, is among those it returns.
func pendingBesides(c *zk.Conn, p string, owners map[int64]string, held map[string]string) ([]string, error) {
	tickets, _, err := c.Children(p + "/ready")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	clear(held)
	whose := map[string]string{} // ticket -> whose
	for _, name := range tickets {
		found, st, err := c.Exists(p + "/ready/" + name)
		switch {
		case err != nil:
			return nil, err
		case !found || st.Version == 0:
			continue // settled meanwhile, or waiting
		}
		switch who, ok := owners[st.EphemeralOwner]; {
		case who == alive:
		case ok:
			whose[name] = who
		default:
			whose[name] = fmt.Sprintf("a killed consumer (session %#x)", st.EphemeralOwner)
		}
	}
	inboxes, _, err := c.Children(p + "/consumers")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	for _, in := range inboxes {
		data, _, err := c.Get(p + "/consumers/" + in)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		tickets, ids := fairqueue.InboxOffers(data)
		for i, ticket := range tickets {
			if whose[ticket] != "" {
				held[ids[i]] = whose[ticket]
			}
		}
	}
	buckets, _, err := c.Children(p + "/items")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	var left []string
	for _, b := range buckets {
		if !strings.HasPrefix(b, "b") {
			continue // a bucket's blobs
		}
		names, _, err := c.Children(p + "/items/" + b)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		for _, name := range names {
			id := strings.TrimPrefix(b, "b") + "-" + name[max(0, len(name)-10):]
			if _, ok := held[id]; !ok {
				left = append(left, id)
			}
		}
	}
	return left, nil
}
