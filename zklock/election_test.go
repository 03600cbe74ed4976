package zklock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Several sessions run the leader-selector loop at once: never two leaders,
// and each term is higher than the one before.
func TestElectionOneLeaderUnderChurn(t *testing.T) {
	srv := setup(t)
	const sessions = 5
	var ss []*zkrecipes.Session
	for range sessions {
		ss = append(ss, connect(t, srv.Addrs()))
	}
	path := lockPath(t, ss[0])
	// Until this many terms have been held (bg bounds the whole run, in
	// case the election stalls).
	const want = 3 * sessions
	ctx, cancel := context.WithCancel(bg(t))
	defer cancel()

	var (
		leaders atomic.Int32
		mu      sync.Mutex
		last    int64
		terms   int
		per     [sessions]int
	)
	var wg sync.WaitGroup
	for i, s := range ss {
		el, err := zklock.NewElection(s, path)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := el.Run(ctx, []byte(fmt.Sprint("worker ", i)), func(lctx context.Context) error {
				if n := leaders.Add(1); n != 1 {
					t.Errorf("%d leaders at once", n)
				}
				defer leaders.Add(-1)
				l, err := el.Leader(lctx)
				if lctx.Err() == nil && assert.NoError(t, err) {
					assert.Equal(t, s.ID(), l.SessionID, "Leader() names the one leading")
				}
				mu.Lock() // uncontended if the election works
				if l.Token != 0 && l.Token <= last {
					t.Errorf("term %d after %d: not increasing", l.Token, last)
				}
				last = max(last, l.Token)
				terms++
				per[i]++
				if terms == want {
					cancel()
				}
				mu.Unlock()
				select {
				case <-time.After(2 * time.Millisecond):
				case <-lctx.Done():
				}
				return nil
			})
			assert.ErrorIs(t, err, context.Canceled, "Run ends only when its ctx does")
		}()
	}
	wg.Wait()
	t.Logf("%d terms; per session %v", terms, per)
	require.GreaterOrEqual(t, terms, want, "the election stalled")
}

// A leader process killed with SIGKILL is replaced once the ensemble
// expires its session, and the new term is higher.
func TestElectionKilledLeaderIsReplaced(t *testing.T) {
	srv := setup(t)
	const timeout = 2 * time.Second // what electholder asks for
	bin := buildChild(t, "electholder")
	s := connect(t, srv.Addrs())
	path := lockPath(t, s)
	ctx := bg(t)

	child := exec.Command(bin, strings.Join(srv.Addrs(), ","), path)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	f := strings.Fields(line)
	require.True(t, len(f) == 2 && f[0] == "leader", "child said %q", line)
	childTerm, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)

	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	zktest.CatchUp(t, s.Conn(), path) // the child's session made the leader's node
	cur, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, childTerm, cur.Token)
	require.NotEqual(t, s.ID(), cur.SessionID)

	type result struct {
		l   *zklock.Leadership
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := el.Campaign(ctx, []byte("successor"))
		got <- result{l, err, time.Now()}
	}()
	require.Eventually(t, func() bool {
		cs, _, err := s.Conn().Children(path)
		return err == nil && len(cs) == 2
	}, 10*time.Second, 5*time.Millisecond, "the successor is in line")
	select {
	case r := <-got:
		t.Fatalf("elected while the child leads: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}

	require.NoError(t, child.Process.Kill()) // SIGKILL: no goodbye to the server
	killed := time.Now()
	r := <-got
	require.NoError(t, r.err)
	waited := r.at.Sub(killed)
	t.Logf("new leader %v after SIGKILL (session timeout asked %v)", waited, timeout)
	require.GreaterOrEqual(t, waited, timeout/2, "elected before the child's session could expire")
	require.Greater(t, r.l.Token(), childTerm, "terms increase")
	require.NoError(t, r.l.Resign(ctx))
}

// A leader whose network is frozen is told its leadership is over (its
// lease's context is cancelled) before another campaigner is elected. Both
// instants are read from this process's monotonic clock.
func TestElectionFrozenLeaderIsToldFirst(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	var net zktest.Freezer
	defer net.Thaw()
	a := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithDialer(net.Dial))
	b := connect(t, srv.Addrs())
	path := lockPath(t, b)
	ea, _ := zklock.NewElection(a, path)
	eb, _ := zklock.NewElection(b, path)
	la, err := ea.Campaign(ctx, []byte("a"))
	require.NoError(t, err)

	var toldAt, electedAt time.Time
	var lb *zklock.Leadership
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-la.Context().Done()
		toldAt = time.Now()
	}()
	go func() {
		defer wg.Done()
		var err error
		lb, err = eb.Campaign(ctx, []byte("b"))
		electedAt = time.Now()
		assert.NoError(t, err)
	}()
	require.Eventually(t, func() bool {
		cs, _, err := b.Conn().Children(path)
		return err == nil && len(cs) == 2
	}, 10*time.Second, 5*time.Millisecond, "b is in line")
	frozenAt := time.Now()
	net.Freeze()
	wg.Wait()

	t.Logf("leader told after %v, next elected after %v (timeout %v)",
		toldAt.Sub(frozenAt), electedAt.Sub(frozenAt), a.Timeout())
	require.True(t, toldAt.Before(electedAt), "leader told at %v, next elected at %v", toldAt, electedAt)
	require.ErrorIs(t, context.Cause(la.Context()), zklock.ErrLockLost)
	require.ErrorIs(t, la.Err(), zkrecipes.ErrSessionLost)
	require.ErrorIs(t, la.Proclaim(ctx, []byte("still me?")), zklock.ErrNotLeader)
	require.Greater(t, lb.Token(), la.Token())
	require.NoError(t, lb.Resign(ctx))
}

// recv reads one value from an Observe channel, failing after a while.
func recv(t *testing.T, ch <-chan zklock.Leader) zklock.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "Observe channel closed")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("nothing observed")
	}
	return zklock.Leader{}
}

func requireQuiet(t *testing.T, ch <-chan zklock.Leader) {
	t.Helper()
	select {
	case l, ok := <-ch:
		t.Fatalf("unexpected observation %+v (open %v)", l, ok)
	case <-time.After(150 * time.Millisecond):
	}
}

func TestElectionObserveSeesEachChangeInOrder(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b, o := connect(t, srv.Addrs()), connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, o)
	ea, _ := zklock.NewElection(a, path)
	eb, _ := zklock.NewElection(b, path)
	eo, _ := zklock.NewElection(o, path)

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	ch := eo.Observe(octx)
	require.Equal(t, zklock.Leader{}, recv(t, ch), "no leader yet: said so")
	requireQuiet(t, ch)

	la, err := ea.Campaign(ctx, []byte("v1"))
	require.NoError(t, err)
	got := recv(t, ch)
	require.Equal(t, zklock.Leader{Path: la.Path(), Value: []byte("v1"), Token: la.Token(), SessionID: a.ID()}, got)

	require.NoError(t, la.Proclaim(ctx, []byte("v2")))
	got = recv(t, ch)
	require.Equal(t, "v2", string(got.Value))
	require.Equal(t, la.Token(), got.Token)

	// b waits in line: that is no change of leader.
	elected := make(chan *zklock.Leadership, 1)
	go func() {
		l, err := eb.Campaign(ctx, []byte("b"))
		if assert.NoError(t, err) {
			elected <- l
		}
	}()
	require.Eventually(t, func() bool {
		cs, _, err := o.Conn().Children(path)
		return err == nil && len(cs) == 2
	}, 10*time.Second, 5*time.Millisecond)
	requireQuiet(t, ch)

	require.NoError(t, la.Resign(ctx))
	lb := <-elected
	got = recv(t, ch)
	require.Equal(t, zklock.Leader{Path: lb.Path(), Value: []byte("b"), Token: lb.Token(), SessionID: b.ID()}, got)

	// A slow reader skips to the latest value.
	slow := eo.Observe(octx)
	require.Equal(t, "b", string(recv(t, slow).Value))
	const n = 10
	for i := range n {
		require.NoError(t, lb.Proclaim(ctx, []byte(fmt.Sprint("p", i))))
	}
	want := fmt.Sprint("p", n-1)
	var seen []string
	deadline := time.After(10 * time.Second)
	for !slices.Contains(seen, want) {
		select {
		case l := <-slow:
			seen = append(seen, string(l.Value))
		case <-deadline:
			t.Fatalf("latest value never observed; saw %q", seen)
		}
	}
	t.Logf("slow reader saw %q of %d proclamations", seen, n)
	for i := 1; i < len(seen); i++ {
		require.Less(t, seen[i-1], seen[i], "observed out of order: %q", seen)
	}
	require.Less(t, len(seen), n, "a slow reader is not handed every value")
	requireQuiet(t, slow)

	// Closed when ctx ends, and when the session is over.
	ocancel()
	for range ch {
	}
	for range slow {
	}
	third := eo.Observe(ctx)
	require.Equal(t, "p9", string(recv(t, third).Value))
	require.NoError(t, o.Close())
	select {
	case _, ok := <-third:
		require.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("Observe channel not closed when the session ended")
	}
	_, ok := <-eo.Observe(ctx)
	require.False(t, ok, "Observe on a closed session is closed at once")
	require.NoError(t, lb.Resign(ctx))
}

// An observer follows each leader's node until it goes, and leaves no
// watch on it: a candidate's node never comes back (its sequential name is
// not reused), so a watch for its creation would stay registered, on the
// server and in the client, for the rest of the session, one per leader.
func TestElectionObserveLeavesNoWatchOnPastLeaders(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	o, c := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, c)
	eo, err := zklock.NewElection(o, path)
	require.NoError(t, err)
	ec, err := zklock.NewElection(c, path)
	require.NoError(t, err)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := eo.Observe(octx)
	require.Empty(t, recv(t, ch).Path, "no leader yet")
	// The observer's watches are on the member it is connected to: ask
	// them all (wchp lists data watches only).
	allWatches := func() map[string][]int64 {
		watches := map[string][]int64{}
		for _, addr := range srv.Addrs() {
			out, err := zktest.FourLetter(addr, "wchp")
			require.NoError(t, err)
			for p, ids := range parseWchp(out) {
				watches[p] = append(watches[p], ids...)
			}
		}
		return watches
	}
	var past []string
	for i := range 5 {
		l, err := ec.Campaign(ctx, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		require.Equal(t, l.Path(), recv(t, ch).Path)
		if i == 0 { // the check below can see the observer's watches
			require.Contains(t, allWatches()[l.Path()], o.ID(), "the observer does not watch the leader's node")
		}
		require.NoError(t, l.Resign(ctx))
		// Reported only once the observer has read the node gone.
		require.Empty(t, recv(t, ch).Path, "no leader after the resignation of %s", l.Path())
		past = append(past, l.Path())
	}
	watches := allWatches()
	for _, p := range past {
		require.NotContains(t, watches[p], o.ID(), "the observer still watches %s, a past leader's node", p)
	}
	cancel()
	for range ch {
	}
}

func TestElectionLeaderAndTerms(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	var ss []*zkrecipes.Session
	for range 3 {
		ss = append(ss, connect(t, srv.Addrs()))
	}
	path := lockPath(t, ss[0])
	el0, err := zklock.NewElection(ss[0], path)
	require.NoError(t, err)
	sync := func() { t.Helper(); zktest.CatchUp(t, ss[0].Conn(), path) }

	_, err = el0.Leader(ctx)
	require.ErrorIs(t, err, zklock.ErrNoLeader, "no directory yet")

	var last int64
	for round := range 3 {
		for i, s := range ss {
			el, _ := zklock.NewElection(s, path, zklock.WithData([]byte(fmt.Sprint("default ", i))))
			var value []byte
			if round > 0 {
				value = []byte(fmt.Sprint("round ", round, " session ", i))
			}
			l, err := el.Campaign(ctx, value)
			require.NoError(t, err)
			require.Greater(t, l.Token(), last, "term not increasing")
			last = l.Token()

			sync()
			got, err := el0.Leader(ctx)
			require.NoError(t, err)
			want := string(value)
			if value == nil {
				want = fmt.Sprint("default ", i)
			}
			require.Equal(t, zklock.Leader{Path: l.Path(), Value: []byte(want), Token: l.Token(), SessionID: s.ID()}, got)
			require.True(t, strings.HasPrefix(l.Path(), path+"/"))
			require.Contains(t, l.Path(), "-elect-")

			// A Proclaim is the leader's own write: the leadership holds, and
			// a fenced write still commits.
			require.NoError(t, l.Proclaim(ctx, []byte("proclaimed")))
			sync()
			got, err = el0.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, "proclaimed", string(got.Value))
			_, err = s.Conn().Multi(l.Guard(), &zk.SetDataRequest{Path: l.Path(), Data: []byte("fenced"), Version: 1})
			require.NoError(t, err)
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a write by another than Proclaim is a loss, and not seen as one")
			}
			require.ErrorIs(t, l.Err(), zklock.ErrLockLost)
			require.ErrorIs(t, l.Proclaim(ctx, []byte("x")), zklock.ErrNotLeader)
			require.ErrorIs(t, l.Resign(ctx), zklock.ErrLockLost)
			ok, _, err := s.Conn().Exists(l.Path())
			require.NoError(t, err)
			require.False(t, ok, "Resign after a loss still deletes the node")
		}
	}
	sync()
	_, err = el0.Leader(ctx)
	require.ErrorIs(t, err, zklock.ErrNoLeader, "empty directory")
}

// Proclaims back to back are all the leader's own writes: none of them is
// taken for a loss, and the last one wins.
func TestElectionBackToBackProclaims(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	el, _ := zklock.NewElection(s, lockPath(t, s))
	l, err := el.Campaign(ctx, []byte("v"))
	require.NoError(t, err)
	for i := range 50 {
		require.NoError(t, l.Proclaim(ctx, []byte(fmt.Sprint("v", i))), "Proclaim %d", i)
	}
	got, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "v49", string(got.Value))
	// A fenced write still commits: Guard follows the Proclaims.
	_, err = s.Conn().Multi(l.Guard(), &zk.SetDataRequest{Path: "/", Data: nil, Version: -1})
	require.NoError(t, err)
	requireStillHeld(t, l.Lease)
	require.NoError(t, l.Resign(ctx))
}

// requireStillHeld fails if the lease ends within a moment.
func requireStillHeld(t *testing.T, l *zklock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("lease ended: %v", l.Err())
	case <-time.After(200 * time.Millisecond):
	}
}

func TestElectionProclaimByDeposedLeader(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, admin := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, admin)
	el, _ := zklock.NewElection(a, path)

	// Resigned.
	l, err := el.Campaign(ctx, []byte("v1"))
	require.NoError(t, err)
	require.NoError(t, l.Proclaim(ctx, []byte("v2")))
	require.NoError(t, l.Resign(ctx))
	require.NoError(t, l.Resign(ctx), "Resign is idempotent")
	require.ErrorIs(t, l.Proclaim(ctx, []byte("v3")), zklock.ErrNotLeader)

	// Deposed: its node deleted by someone else.
	l, err = el.Campaign(ctx, []byte("v1"))
	require.NoError(t, err)
	require.NoError(t, admin.Conn().Delete(l.Path(), -1))
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leader not told its node was deleted")
	}
	require.ErrorIs(t, l.Proclaim(ctx, []byte("v3")), zklock.ErrNotLeader)
	require.ErrorIs(t, l.Resign(ctx), zklock.ErrLockLost)

	// Its session closed.
	l, err = el.Campaign(ctx, []byte("v1"))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	err = l.Proclaim(ctx, []byte("v3"))
	require.ErrorIs(t, err, zklock.ErrNotLeader)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
	_, err = el.Campaign(ctx, nil)
	require.ErrorIs(t, err, zklock.ErrLockLost)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
	err = el.Run(ctx, nil, func(context.Context) error { return nil })
	require.ErrorIs(t, err, zklock.ErrLockLost)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
}

func TestElectionBadInput(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	path := lockPath(t, s)

	_, err := zklock.NewElection(nil, "/x")
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	for _, p := range []string{"", "relative", "/trailing/", "/a//b", "/", "/a/../b", "/zookeeper/x"} {
		_, err := zklock.NewElection(s, p)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "path %q", p)
	}
	_, err = zklock.NewElection(s, path, zklock.WithData(make([]byte, zkrecipes.MaxDataSize+1)))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)

	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	_, err = el.Campaign(ctx, make([]byte, zkrecipes.MaxDataSize+1))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)
	_, err = el.Leader(ctx)
	require.ErrorIs(t, err, zklock.ErrNoLeader, "a refused Campaign writes nothing")
	require.ErrorIs(t, el.Run(ctx, nil, nil), zkrecipes.ErrInvalidArgument)

	l, err := el.Campaign(ctx, []byte("small"))
	require.NoError(t, err)
	require.ErrorIs(t, l.Proclaim(ctx, make([]byte, zkrecipes.MaxDataSize+1)), zkrecipes.ErrDataTooLarge)
	got, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "small", string(got.Value), "a refused Proclaim writes nothing")
	require.NoError(t, l.Proclaim(ctx, make([]byte, zkrecipes.MaxDataSize)), "the limit itself fits")
	require.Nil(t, l.Err())
	require.NoError(t, l.Resign(ctx))
}

// A campaign given up (deadline, cancel) leaves no node behind and does not
// block the next campaigner.
func TestElectionCampaignGivesUp(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b, c := connect(t, srv.Addrs()), connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, a)
	ea, _ := zklock.NewElection(a, path)
	eb, _ := zklock.NewElection(b, path)
	ec, _ := zklock.NewElection(c, path)
	la, err := ea.Campaign(ctx, nil)
	require.NoError(t, err)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = eb.Campaign(dctx, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// c waits behind b; b gives up; c must still be elected after a.
	got := make(chan *zklock.Leadership, 1)
	go func() {
		l, err := ec.Campaign(ctx, []byte("c"))
		if assert.NoError(t, err) {
			got <- l
		}
	}()
	cctx, cancel2 := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() {
		_, err := eb.Campaign(cctx, nil)
		bdone <- err
	}()
	require.Eventually(t, func() bool {
		cs, _, err := a.Conn().Children(path)
		return err == nil && len(cs) == 3
	}, 10*time.Second, 5*time.Millisecond)
	cancel2()
	require.ErrorIs(t, <-bdone, context.Canceled)
	require.Eventually(t, func() bool {
		cs, _, err := a.Conn().Children(path)
		return err == nil && len(cs) == 2
	}, 10*time.Second, 5*time.Millisecond, "an abandoned campaign leaves no node")

	require.NoError(t, la.Resign(ctx))
	lc := <-got
	require.Greater(t, lc.Token(), la.Token())
	require.NoError(t, lc.Resign(ctx))
}

// Run: lead's context ends when leadership is lost, Run campaigns again, an
// error from lead ends Run (after resigning), and so does ctx.
func TestElectionRun(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s, admin := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, admin)
	el, _ := zklock.NewElection(s, path)
	watcher, _ := zklock.NewElection(admin, path)

	boom := errors.New("boom")
	var calls atomic.Int32
	causes := make(chan error, 4)
	err := el.Run(ctx, []byte("runner"), func(lctx context.Context) error {
		switch calls.Add(1) {
		case 1: // deposed: our node deleted by another client
			zktest.CatchUp(t, admin.Conn(), path) // admin's member may lag behind s's campaign
			l, err := watcher.Leader(ctx)
			if !assert.NoError(t, err) {
				return err
			}
			assert.NoError(t, admin.Conn().Delete(l.Path, -1))
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return nil
		case 2: // gives up leadership
			return nil
		default:
			return boom
		}
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, int32(3), calls.Load())
	require.ErrorIs(t, <-causes, zklock.ErrLockLost)
	zktest.CatchUp(t, admin.Conn(), path) // admin's member may lag behind s's resignation
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, zklock.ErrNoLeader, "Run resigned before returning")

	// ctx ends while leading: Run resigns and returns ctx's cause.
	rctx, cancel := context.WithCancelCause(ctx)
	stop := errors.New("stop")
	err = el.Run(rctx, nil, func(lctx context.Context) error {
		cancel(stop)
		<-lctx.Done()
		return nil
	})
	require.ErrorIs(t, err, stop)
	zktest.CatchUp(t, admin.Conn(), path)
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, zklock.ErrNoLeader)
}

// Campaigners watch only their predecessor: a change of leader wakes one.
func TestElectionCampaignersWatchOnlyTheirPredecessor(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	first := connect(t, srv.Addrs())
	path := lockPath(t, first)
	e0, _ := zklock.NewElection(first, path)
	l0, err := e0.Campaign(ctx, nil)
	require.NoError(t, err)

	const waiters = 8
	got := make(chan *zklock.Leadership, waiters)
	for i := range waiters {
		el, _ := zklock.NewElection(connect(t, srv.Addrs()), path)
		go func() {
			l, err := el.Campaign(ctx, nil)
			if assert.NoError(t, err) {
				got <- l
			}
		}()
		require.Eventually(t, func() bool {
			cs, _, err := first.Conn().Children(path)
			return err == nil && len(cs) == i+2
		}, 10*time.Second, 5*time.Millisecond)
	}
	children, _, err := first.Conn().Children(path)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, err := zktest.FourLetter(srv.Addr(), "wchp")
		require.NoError(t, err)
		w := parseWchp(out)
		watched := 0
		for _, c := range children {
			p := path + "/" + c
			st, err := statOwner(first, p)
			require.NoError(t, err)
			others := othersWatching(w[p], st)
			require.LessOrEqual(t, len(others), 1, "%s watched by %d others", p, len(others))
			watched += len(others)
		}
		require.Empty(t, w[path], "nobody watches the directory")
		return watched == waiters
	}, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, l0.Resign(ctx))
	last := l0.Token()
	for range waiters {
		l := <-got
		require.Greater(t, l.Token(), last)
		last = l.Token()
		require.NoError(t, l.Resign(ctx))
	}
}

func statOwner(s *zkrecipes.Session, p string) (int64, error) {
	_, st, err := s.Conn().Exists(p)
	if err != nil {
		return 0, err
	}
	return st.EphemeralOwner, nil
}

// BenchmarkElectionHandoff measures the time from a leader's Resign to the
// next campaigner's Campaign returning, with two sessions taking turns and
// the next one always already in line. Run with -benchtime=200x or so.
func BenchmarkElectionHandoff(b *testing.B) {
	srv := zktest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const sessions = 2
	var els []*zklock.Election
	watcher := connect(b, srv.Addrs())
	path := fmt.Sprintf("/zklock-bench/handoff-%d", time.Now().UnixNano())
	for range sessions {
		el, err := zklock.NewElection(connect(b, srv.Addrs()), path)
		require.NoError(b, err)
		els = append(els, el)
	}
	type win struct {
		l  *zklock.Leadership
		at time.Time
	}
	wins := make(chan win)
	var wg sync.WaitGroup
	for _, el := range els {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := el.Campaign(ctx, nil)
				if err != nil {
					return
				}
				select {
				case wins <- win{l, time.Now()}:
				case <-ctx.Done():
					l.Resign(context.Background())
					return
				}
				<-l.Done() // one contender per session at a time
			}
		}()
	}
	inLine := func() {
		for {
			cs, _, err := watcher.Conn().Children(path)
			if err == nil && len(cs) >= 2 {
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	cur := <-wins
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		inLine()
		b.StartTimer()
		t0 := time.Now()
		require.NoError(b, cur.l.Resign(ctx))
		next := <-wins
		samples = append(samples, next.at.Sub(t0))
		cur = next
	}
	b.StopTimer()
	cancel()
	require.NoError(b, cur.l.Resign(context.Background()))
	wg.Wait()
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
}

// A leadership released one way cannot be released the other way: Resign
// after Unlock, and Unlock after Resign, say so with ErrSettled; the same
// call again is nil.
func TestElectionResignAfterUnlockIsSettled(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	el, err := zklock.NewElection(s, lockPath(t, s))
	require.NoError(t, err)

	l, err := el.Campaign(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx), "Unlock after Unlock")
	require.ErrorIs(t, l.Resign(ctx), zklock.ErrSettled, "Resign after Unlock")

	l, err = el.Campaign(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, l.Resign(ctx))
	require.NoError(t, l.Resign(ctx), "Resign after Resign")
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, zklock.ErrSettled, "Unlock after Resign")
	require.ErrorContains(t, err, "unlock after resign")
	require.ErrorIs(t, l.Err(), zklock.ErrReleased)
}
