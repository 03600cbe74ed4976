package zklock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// newCached makes a CachedMutex on s and path, released when the test ends.
func newCached(t *testing.T, s *zkrecipes.Session, path string, opts ...zklock.Option) *zklock.CachedMutex {
	t.Helper()
	m, err := zklock.NewCachedMutex(s, path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, m.Release(ctx))
	})
	return m
}

// cycle locks and unlocks m once and returns the lease's fence.
func cycle(t *testing.T, ctx context.Context, m *zklock.CachedMutex) zklock.Fence {
	t.Helper()
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Err())
	f := l.Fence()
	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, l.Err(), zklock.ErrReleased)
	return f
}

// A re-lock of a kept holding, with nobody else in line, sends nothing but
// the background syncs (at most one per half freshness window while the
// lock is in use), counted on the wire; each section's fence is the
// holding's token and one more section.
func TestCachedRelockSendsNothing(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	var wire zktest.Counter
	s := connect(t, srv.Addrs(), zkrecipes.WithDialer(wire.Dial))
	path := lockPath(t, s)
	m := newCached(t, s, path)

	first := cycle(t, ctx, m)
	require.Equal(t, uint32(1), first.Section)
	before, syncsBefore := wire.Requests(), wire.Requests(zktest.OpSync)
	start := time.Now()
	const n = 2000
	last := first
	for range n {
		f := cycle(t, ctx, m)
		require.Equal(t, first.Holding, f.Holding, "a re-lock took another holding")
		require.Equal(t, 1, f.Compare(last), "fence %v after %v", f, last)
		last = f
	}
	elapsed := time.Since(start)
	syncs := wire.Requests(zktest.OpSync) - syncsBefore
	others := wire.Requests() - before - syncs
	t.Logf("%d cycles in %v: %d syncs, %d other requests", n, elapsed.Round(time.Millisecond), syncs, others)
	require.Zero(t, others, "requests other than syncs during re-locks: %v", wire.ByOp())
	require.LessOrEqual(t, syncs, int64(elapsed/(zklock.DefaultFreshness/2))+2, "more syncs than one per half window")

	require.NoError(t, m.Release(ctx))
	require.Empty(t, children(t, s, path), "Release left the node")
}

// countedCached is a CachedMutex on a session whose requests on path, and
// notifications, are counted. Once the test ends, path must hold no node.
func countedCached(t *testing.T, addrs []string, path string, opts ...zklock.Option) (*zklock.CachedMutex, *zkrecipes.Session, *zktest.Counter) {
	t.Helper()
	wire := &zktest.Counter{Path: path}
	s := connect(t, addrs, zkrecipes.WithDialer(wire.Dial))
	t.Cleanup(func() { requireNoNodes(t, s, path) }) // after the Release below
	return newCached(t, s, path, opts...), s, wire
}

// keepIdle makes m hold the lock, kept idle, with a section granted in
// process behind it, and returns that section's fence. (A holding cannot
// be kept when its create was answered after the listing sent with it, or
// when the client reconnected meanwhile: then the next is.)
func keepIdle(t *testing.T, ctx context.Context, m *zklock.CachedMutex) zklock.Fence {
	t.Helper()
	for range 10 {
		if f := cycle(t, ctx, m); f.Section >= 2 {
			return f
		}
	}
	t.Fatal("no section granted from a kept holding in 10 Locks")
	return zklock.Fence{}
}

// settled waits until nothing more is counted on wire for a moment: the
// background sync of the last section answered.
func settled(wire *zktest.Counter) {
	for {
		before := wire.ByOp()
		time.Sleep(20 * time.Millisecond)
		if maps.Equal(before, wire.ByOp()) {
			return
		}
	}
}

// A foreign joiner is a contender of another client, made by hand as that
// client makes it: join creates its node and returns its path; the joiner
// then lists the line and watches the node ahead of it its way, until it
// is first.
type foreignJoiner struct {
	name  string
	node  string // the name its node is created with, before the sequence number
	watch func(conn *zk.Conn, p string) (<-chan zk.Event, bool, error)
}

var foreignJoiners = []foreignJoiner{
	// Curator's InterProcessMutex: getData on the node ahead.
	{"Curator", "_c_0b5e0d5c-3c5e-4a0c-9e0a-4a0b1c2d3e4f-lock-", func(conn *zk.Conn, p string) (<-chan zk.Event, bool, error) {
		_, _, ev, err := conn.GetW(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, false, nil
		}
		return ev, err == nil, err
	}},
	// kazoo's Lock: exists on the node ahead.
	{"kazoo", "6c1f5b0e2d3a4b5c9d8e7f6a5b4c3d2e__lock__", func(conn *zk.Conn, p string) (<-chan zk.Event, bool, error) {
		ok, _, ev, err := conn.ExistsW(p)
		return ev, ok, err
	}},
}

// waitFirst waits, as a foreign joiner does, until mine is first in dir's
// line (sorted by sequence number).
func (j foreignJoiner) waitFirst(t *testing.T, conn *zk.Conn, dir, mine string) {
	t.Helper()
	for {
		names, _, err := conn.Children(dir)
		require.NoError(t, err)
		slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		i := slices.Index(names, mine)
		require.GreaterOrEqual(t, i, 0, "%s's node is gone", j.name)
		if i == 0 {
			return
		}
		ev, there, err := j.watch(conn, dir+"/"+names[i-1])
		require.NoError(t, err)
		if !there {
			continue
		}
		select {
		case <-ev:
		case <-time.After(liveWait):
			t.Fatalf("%s: the node ahead never changed", j.name)
		}
	}
}

// A contender of any client that joins while the holding is kept idle is
// the request to let go: the holder sends one write (its release) and
// nothing else, and the contender holds after one notification: ours
// without listing again, zk.Lock, Curator's and kazoo's (made by hand) by
// their own protocols.
func TestCachedIdleReleasesOnJoin(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	// What the joiner sent and was sent: notes counts the notifications
	// about the holder's node, the only ones it waits for.
	type joined struct{ requests, listings, notes int64 }
	join := map[string]func(t *testing.T, path, held string) joined{
		"Mutex": func(t *testing.T, path, held string) joined {
			wire := &zktest.Counter{Path: path}
			m, err := zklock.NewMutex(connect(t, srv.Addrs(), zkrecipes.WithDialer(wire.Dial)), path)
			require.NoError(t, err)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			return joined{wire.Requests(zktest.OpCreate, zktest.OpGetData), wire.Requests(zktest.OpGetChildren2), wire.NotificationsOn(held)}
		},
		"zk.Lock": func(t *testing.T, path, held string) joined {
			wire := &zktest.Counter{Path: path}
			conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithDialer(wire.Dial), zk.WithLogInfo(false))
			require.NoError(t, err)
			defer conn.Close()
			zl := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
			require.NoError(t, zl.Lock())
			require.NoError(t, zl.Unlock())
			return joined{wire.Requests(zktest.OpCreate, zktest.OpGetData), wire.Requests(zktest.OpGetChildren2), wire.NotificationsOn(held)}
		},
	}
	for _, j := range foreignJoiners {
		join[j.name] = func(t *testing.T, path, held string) joined {
			wire := &zktest.Counter{Path: path}
			conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithDialer(wire.Dial), zk.WithLogInfo(false))
			require.NoError(t, err)
			defer conn.Close()
			p, err := conn.Create(path+"/"+j.node, nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			j.waitFirst(t, conn, path, p[len(path)+1:])
			require.NoError(t, conn.Delete(p, -1))
			return joined{wire.Requests(zktest.OpCreate, zktest.OpGetData, zktest.OpExists), wire.Requests(zktest.OpGetChildren2), wire.NotificationsOn(held)}
		}
	}
	for _, name := range []string{"Mutex", "zk.Lock", "Curator", "kazoo"} {
		t.Run(name, func(t *testing.T) {
			path := zktest.Path(t, "/zklock-test")
			m, hs, hw := countedCached(t, srv.Addrs(), path, zklock.WithIdleRelease(time.Minute))
			held := keepIdle(t, ctx, m)
			settled(hw)
			cs, err := m.Contenders(ctx)
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.True(t, cs[0].Holds && cs[0].Cached, "the idle holding, listed: %+v", cs[0])
			require.Equal(t, held.Holding, cs[0].Token)
			before := hw.ByOp()
			start := time.Now()
			got := join[name](t, path, cs[0].Path)
			waited := time.Since(start)
			after := hw.ByOp()
			sent := map[int32]int64{}
			for op, n := range after {
				if d := n - before[op]; d > 0 {
					sent[op] = d
				}
			}
			t.Logf("%s: joined, held and left in %v; the holder sent %v; the joiner sent %d create/read, %d listings, got %d notifications",
				name, waited.Round(time.Microsecond), sent, got.requests, got.listings, got.notes)
			require.Len(t, sent, 1, "the holder sent more than its release: %v", sent)
			require.Equal(t, int64(1), sent[zktest.OpMulti]+sent[zktest.OpDelete], "the holder's release: %v", sent)
			require.LessOrEqual(t, got.notes, int64(1), "notifications about the holder's node")
			if name == "Mutex" {
				require.Equal(t, int64(1), got.listings, "ours holds from the release mark, without listing again")
			}
			require.Empty(t, children(t, hs, path), "nodes left")
			// The holder gave up its holding to a contender, and backs off:
			// its next holding is not kept (a Mutex's lease), the one after
			// is.
			require.Equal(t, uint32(0), cycle(t, ctx, m).Section, "the holding after one given up to a contender")
			require.Empty(t, children(t, hs, path), "a holding not kept is released at its Unlock")
			require.Equal(t, uint32(1), cycle(t, ctx, m).Section, "the holding after that")
		})
	}
}

// hotLoop locks and unlocks m as fast as it can until ctx ends. begun
// counts its sections so far; begins returns the moments they began (Lock
// returned), once it has stopped.
func hotLoop(ctx context.Context, m *zklock.CachedMutex) (begun func() int64, begins func() []time.Time) {
	var ts []time.Time
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := m.Lock(ctx)
			if err != nil {
				continue
			}
			ts = append(ts, time.Now())
			n.Add(1)
			_ = l.Unlock(context.Background())
		}
	}()
	return n.Load, func() []time.Time {
		<-done
		return ts
	}
}

// after counts the moments in ts later than t.
func after(ts []time.Time, t time.Time) int {
	n := 0
	for _, x := range ts {
		if x.After(t) {
			n++
		}
	}
	return n
}

// A contender that joins while the holder re-locks in a hot loop waits
// only for the sections begun within the freshness window of its join.
// The holder's connection is stalled (nothing in or out, as for a slow
// network or a paused process) a while before the contender joins, and
// for a while after: its watch cannot fire, yet it must stop granting once
// its latest sync is older than the window. Then, with no stall, the
// contender is served while the holder goes on: a section whose own sync
// was in flight as it joined may begin later than the window, no other.
// With WithFreshness(0) (a sync for every Lock) only that one may begin
// after the join, stall or not; with a window and the stall, none begins
// later than the window.
func TestCachedWaiterBypassBound(t *testing.T) {
	srv := setup(t)
	for _, c := range []struct {
		name  string
		fresh time.Duration
		stall bool
	}{
		{"stalled", zklock.DefaultFreshness, true},
		{"stalled/strict", 0, true},
		{"running", zklock.DefaultFreshness, false},
		{"running/strict", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := bg(t)
			path := zktest.Path(t, "/zklock-test")
			var fr zktest.Freezer
			hs := connect(t, srv.Addrs(), zkrecipes.WithDialer(fr.Dial))
			t.Cleanup(func() { requireNoNodes(t, hs, path) })
			t.Cleanup(fr.Thaw)
			m := newCached(t, hs, path, zklock.WithFreshness(c.fresh), zklock.WithIdleRelease(time.Minute))
			loop, stop := context.WithCancel(ctx)
			defer stop()
			begun, begins := hotLoop(loop, m)
			// Hot: many sections before the join, however slow the syncs
			// of strict mode are on this machine.
			require.Eventually(t, func() bool { return begun() >= 100 }, liveWait, 10*time.Millisecond,
				"the holder was not re-locking")

			conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithLogInfo(false))
			require.NoError(t, err)
			defer conn.Close()
			stalled := time.Now()
			if c.stall {
				fr.Stall()
				time.Sleep(2*c.fresh + 10*time.Millisecond)
			}
			p, err := conn.Create(path+"/_c_waiter-lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			joined := time.Now()
			if c.stall {
				time.Sleep(300 * time.Millisecond)
				fr.Thaw()
			}
			foreignJoiners[0].waitFirst(t, conn, path, p[len(path)+1:])
			granted := time.Now()
			require.NoError(t, conn.Delete(p, -1))
			stop()
			bs := begins()
			bypass := after(bs, joined) - after(bs, granted)
			late := after(bs, joined.Add(c.fresh)) - after(bs, granted)
			t.Logf("%d sections in all; the contender joined %v after the stall began, was granted %v after its join; %d sections began after its join, %d later than the window (%v) after it",
				len(bs)-after(bs, granted), joined.Sub(stalled).Round(time.Millisecond), granted.Sub(joined).Round(time.Millisecond), bypass, late, c.fresh)
			switch {
			case c.stall && c.fresh > 0:
				// A sync's age counts from its sending: the one in flight
				// as it joined is too old by the thaw.
				require.Zero(t, late, "sections begun later than the freshness window after the contender joined")
			default:
				// At most the one whose own sync was in flight as it
				// joined: answered before the server saw the join, its
				// answer read after it (in a stall, at the thaw), ahead of
				// the join's notification. Every later sync is answered
				// after that notification.
				require.LessOrEqual(t, late, 1, "sections begun later than the freshness window after the contender joined")
				if c.fresh == 0 {
					require.LessOrEqual(t, bypass, 1, "sections begun after the join, with a sync for every Lock")
				}
			}
		})
	}
}

// After a holding is given up to a contender, the next holdings are not
// kept: one, then two, then four as it happens again (each a Mutex's lease,
// released at its Unlock); a holding let go for idling starts the count
// again. (A holding whose create was answered after the listing sent with
// it cannot be kept either, which happens now and then: the counts may be
// one or two above the back-off's.)
func TestCachedBackoff(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	a := connect(t, srv.Addrs())
	t.Cleanup(func() { requireNoNodes(t, a, path) })
	other, err := zklock.NewMutex(connect(t, srv.Addrs()), path)
	require.NoError(t, err)
	contend := func() {
		t.Helper()
		l, err := other.Lock(ctx) // the idle holding lets go
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	// notKept cycles m until a holding is kept, its Section 1, and returns
	// the holdings before it that were not (Section 0); the kept one is
	// left idle.
	notKept := func(m *zklock.CachedMutex) int {
		t.Helper()
		for n := 0; n < 50; n++ {
			f := cycle(t, ctx, m)
			if f.Section != 0 {
				require.Equal(t, uint32(1), f.Section)
				return n
			}
			require.Empty(t, children(t, a, path), "a holding not kept was kept")
		}
		t.Fatal("no holding kept in 50")
		return 0
	}
	requireAbout := func(want, got int, what string) {
		t.Helper()
		require.True(t, got >= want && got <= want+2, "%s: %d holdings not kept, want %d", what, got, want)
	}

	m := newCached(t, a, path, zklock.WithIdleRelease(time.Minute))
	notKept(m)
	require.Equal(t, uint32(2), cycle(t, ctx, m).Section, "the kept holding's next section")
	for i, want := range []int{1, 2, 4, 8} {
		contend()
		requireAbout(want, notKept(m), fmt.Sprintf("after contention %d", i+1))
	}
	require.NoError(t, m.Release(ctx))

	// Let go for idling: the count starts again, from one.
	short := newCached(t, a, path, zklock.WithIdleRelease(250*time.Millisecond))
	notKept(short)
	for i, want := range []int{1, 2, 4, 8} {
		contend()
		requireAbout(want, notKept(short), fmt.Sprintf("after contention %d", i+1))
	}
	require.Eventually(t, func() bool { return len(children(t, a, path)) == 0 }, liveWait, 5*time.Millisecond, "an idle holding was kept past its idle time")
	notKept(short)
	contend()
	requireAbout(1, notKept(short), "after an idle release")
}

// Leases of CachedMutexes and Mutexes on one path, from several sessions,
// and go-zookeeper's zk.Lock among them, exclude each other, and their
// fences strictly increase in the order they were granted. The sections
// of the CachedMutexes come from two goroutines each, with pauses, all
// together, then each CachedMutex's alone in turn, so that kept holdings,
// local hand-offs and holdings given up to contenders all happen.
func TestCachedFenceOrder(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	check := connect(t, srv.Addrs())
	t.Cleanup(func() { requireNoNodes(t, check, path) })
	var (
		mu     sync.Mutex
		inside int
		fences []zklock.Fence
		local  int // sections granted from a kept holding
	)
	enter := func(f *zklock.Fence) error {
		mu.Lock()
		defer mu.Unlock()
		inside++
		if inside != 1 {
			return fmt.Errorf("%d holders at once", inside)
		}
		if f != nil {
			fences = append(fences, *f)
			if f.Section > 1 {
				local++
			}
		}
		return nil
	}
	exit := func() {
		mu.Lock()
		inside--
		mu.Unlock()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	run := func(lock func() (*zklock.Lease, error)) {
		defer wg.Done()
		for i := range 40 {
			l, err := lock()
			if err != nil {
				errs <- err
				return
			}
			f := l.Fence()
			if err := enter(&f); err != nil {
				errs <- err
			}
			time.Sleep(time.Duration(i%3) * time.Millisecond)
			exit()
			if err := l.Unlock(ctx); err != nil {
				errs <- err
				return
			}
			if i%10 == 9 {
				time.Sleep(30 * time.Millisecond)
			}
		}
	}
	var cached []*zklock.CachedMutex
	for i := range 3 {
		s := connect(t, srv.Addrs())
		m := newCached(t, s, path)
		cached = append(cached, m)
		for range 2 {
			wg.Add(1)
			go run(func() (*zklock.Lease, error) { return m.Lock(ctx) })
		}
		if i < 2 {
			mx, err := zklock.NewMutex(s, path)
			require.NoError(t, err)
			wg.Add(1)
			go run(func() (*zklock.Lease, error) { return mx.Lock(ctx) })
		}
	}
	conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer conn.Close()
	zl := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			if err := zl.Lock(); err != nil {
				errs <- err
				return
			}
			if err := enter(nil); err != nil {
				errs <- err
			}
			time.Sleep(time.Millisecond)
			exit()
			if err := zl.Unlock(); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	// Then each CachedMutex's two goroutines alone, in turn: the holding
	// kept, handed from one to the other, given up to the next in turn.
	for range 2 {
		for _, m := range cached {
			for range 2 {
				wg.Add(1)
				go run(func() (*zklock.Lease, error) { return m.Lock(ctx) })
			}
			wg.Wait()
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := 1; i < len(fences); i++ {
		require.Equal(t, 1, fences[i].Compare(fences[i-1]), "fence %d, %v, is not above the one before, %v", i, fences[i], fences[i-1])
		b, a := fences[i].Bytes(), fences[i-1].Bytes()
		require.Equal(t, 1, bytes.Compare(b[:], a[:]), "Bytes of fence %d", i)
	}
	t.Logf("%d leases in grant order, fences strictly increasing; %d sections granted from kept holdings", len(fences), local)
	require.Equal(t, 6*40+2*40+2*3*2*40, len(fences))
	require.NotZero(t, local, "no section was granted from a kept holding: the test proves nothing of them")
}

// Goroutines of one process share a kept holding: a Lock while another's
// section runs waits for it and is handed the holding at its Unlock, with
// no request; TryLock meanwhile says ErrLocked, as does another process's.
// That one's join, although it left at once, makes the holding go at the
// running section's Unlock.
func TestCachedLocalHandoff(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	m, hs, hw := countedCached(t, srv.Addrs(), path, zklock.WithIdleRelease(time.Minute))
	keepIdle(t, ctx, m)

	before := hw.Requests() - hw.Requests(zktest.OpSync)
	l1, err := m.TryLock(ctx)
	require.NoError(t, err, "TryLock on an idle kept holding")
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked, "TryLock while a section of this process runs")
	got := start(ctx, m.Lock)
	notYet(t, got, "a Lock while another goroutine's section runs")
	require.NoError(t, l1.Unlock(ctx))
	l2 := await(t, got, "the Lock waiting in process")
	require.Equal(t, l1.Fence().Section+1, l2.Fence().Section, "handed the holding")
	require.Equal(t, before, hw.Requests()-hw.Requests(zktest.OpSync), "requests of the hand-off: %v", hw.ByOp())

	other, err := zklock.NewMutex(connect(t, srv.Addrs()), path)
	require.NoError(t, err)
	_, err = other.TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked, "another process's TryLock while the section runs")
	requireHeldAWhile(t, l2, "the section, after another's TryLock")
	require.Len(t, children(t, hs, path), 1, "the refused TryLock left its node")
	require.NoError(t, l2.Unlock(ctx))
	require.Empty(t, children(t, hs, path), "the holding was kept after a contender joined")
	require.Equal(t, uint32(0), cycle(t, ctx, m).Section, "a holding after one given up to a contender")
}

// Lease.Multi commits only while its lease holds: inside the section, and
// never once it has ended (not sent at all); Guard after the end is a check
// that always fails, although the node lives on, kept for the next
// section. A Mutex's lease does the same, its Fence {Token, 0}.
func TestCachedMultiAndGuard(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	m, hs, hw := countedCached(t, srv.Addrs(), path, zklock.WithIdleRelease(time.Minute))
	kept := keepIdle(t, ctx, m) // makes the lock's parent too
	data := path + "-data"
	_, err := hs.Conn().Create(data, []byte("0"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	t.Cleanup(func() { _ = hs.Conn().Delete(data, -1) })
	set := func(v string) *zk.SetDataRequest { return &zk.SetDataRequest{Path: data, Data: []byte(v), Version: -1} }
	read := func() string {
		b, _, err := hs.Conn().Get(data)
		require.NoError(t, err)
		return string(b)
	}

	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, kept.Section+1, l.Fence().Section)
	res, err := l.Multi(ctx, set("in section 3"))
	require.NoError(t, err)
	require.Len(t, res, 1, "the Guard's result is left out")
	require.Equal(t, "in section 3", read())
	guard := l.Guard()
	require.NoError(t, l.Unlock(ctx))
	require.Len(t, children(t, hs, path), 1, "kept")

	multis := hw.Requests(zktest.OpMulti)
	_, err = l.Multi(ctx, set("after section 3"))
	require.ErrorIs(t, err, zklock.ErrReleased, "Multi after Unlock")
	require.Equal(t, multis, hw.Requests(zktest.OpMulti), "a Multi after the end was sent")
	_, err = hs.Conn().Multi(l.Guard(), set("guarded by an ended lease"))
	require.ErrorIs(t, err, zk.ErrBadVersion, "Guard of an ended lease")
	// The gap Multi closes: a Guard built during the section still passes
	// while the holding is kept.
	_, err = hs.Conn().Multi(guard, set("late"))
	require.NoError(t, err)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	l4, err := m.Lock(ctx)
	require.NoError(t, err)
	multis = hw.Requests(zktest.OpMulti)
	_, err = l4.Multi(ended, set("never"))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, multis, hw.Requests(zktest.OpMulti), "a Multi with an ended ctx was sent")
	require.NoError(t, l4.Unlock(ctx))
	require.Equal(t, "late", read())

	mx, err := zklock.NewMutex(hs, path)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx))
	lm, err := mx.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, zklock.Fence{Holding: lm.Token()}, lm.Fence())
	_, err = lm.Multi(ctx, set("mutex"))
	require.NoError(t, err)
	require.NoError(t, lm.Unlock(ctx))
	_, err = lm.Multi(ctx, set("after the mutex"))
	require.ErrorIs(t, err, zklock.ErrReleased)
	require.Equal(t, int32(-2), lm.Guard().Version)
	require.Equal(t, "mutex", read())
}

// An Unlock whose ctx has ended still ends the section: kept when no one
// waits, released (and the waiter granted) when one does. A Lock whose ctx
// ends while it waits (for a sync, or for another section) gives up and
// leaves nothing that blocks the next.
func TestCachedUnlockEndedCtx(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	m, hs, _ := countedCached(t, srv.Addrs(), path, zklock.WithIdleRelease(time.Minute), zklock.WithFreshness(0))
	ended, cancel := context.WithCancel(ctx)
	cancel()

	keepIdle(t, ctx, m)
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	_ = l.Unlock(ended) // nil or ctx's cause: the section ends either way
	select {
	case <-l.Done():
	case <-time.After(liveWait):
		t.Fatal("an Unlock with an ended ctx did not end the section")
	}
	require.ErrorIs(t, l.Err(), zklock.ErrReleased)
	require.Len(t, children(t, hs, path), 1, "kept")

	// Locks that give up, at every moment: the lock stays usable.
	for i := range 200 {
		lctx, lcancel := context.WithTimeout(ctx, time.Duration(i%20)*50*time.Microsecond)
		l, err := m.Lock(lctx)
		lcancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			continue
		}
		_ = l.Unlock(ended)
		require.Eventually(t, func() bool { return l.Err() != nil }, liveWait, time.Millisecond, "lock %d: the section did not end", i)
	}
	l, err = m.Lock(ctx)
	require.NoError(t, err, "Lock after Locks that gave up")
	waiting := start(ctx, m.Lock)
	notYet(t, waiting, "a second Lock")
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = m.Lock(wctx)
	wcancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a Lock that gave up waiting in process")

	// A contender waits; the Unlock with an ended ctx releases the node.
	other, err := zklock.NewMutex(connect(t, srv.Addrs()), path)
	require.NoError(t, err)
	got := start(ctx, other.Lock)
	// The contender's join: the Lock waiting in process joins the line
	// behind it at once.
	require.Eventually(t, func() bool { return len(children(t, hs, path)) == 3 }, liveWait, time.Millisecond, "the contender's and the in-process waiter's nodes")
	_ = l.Unlock(ended)
	lo := await(t, got, "the contender, after an Unlock with an ended ctx")
	require.NoError(t, lo.Unlock(ctx))
	lw := await(t, waiting, "the Lock that waited in process")
	_ = lw.Unlock(ended)
	// An Unlock with an ended ctx returns before its release is done: the
	// lease ends when the release does.
	select {
	case <-lw.Done():
	case <-time.After(liveWait):
		t.Fatal("the last lease, unlocked with an ended ctx, did not end")
	}
	require.Eventually(t, func() bool { return len(children(t, hs, path)) == 0 }, liveWait, time.Millisecond,
		"the last lease, unlocked with an ended ctx, was not released")
	require.ErrorIs(t, l.Err(), zklock.ErrReleased)
	require.ErrorIs(t, lw.Err(), zklock.ErrReleased)
}

// Bad options are refused by name; the CachedMutex's own are refused by
// the other recipes.
func TestCachedOptions(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	for _, o := range []zklock.Option{zklock.WithFreshness(-time.Millisecond), zklock.WithIdleRelease(0)} {
		_, err := zklock.NewCachedMutex(s, "/x", o)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	}
	_, err := zklock.NewMutex(s, "/x", zklock.WithFreshness(time.Millisecond))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	require.ErrorContains(t, err, "WithFreshness applies to a CachedMutex only")
	_, err = zklock.NewCachedMutex(s, "/x", zklock.WithFreshness(0), zklock.WithIdleRelease(time.Second))
	require.NoError(t, err)
}

// A reconnect voids what the holder's watch proves: a contender that
// joined while the holder was away is served although the re-set watch is
// blind to its join (go-zookeeper v1.0.4 may re-set it so; here forced),
// and the holder grants no section from the holding it kept.
func TestCachedReconnectLostWatch(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	d := &zktest.Dropper{}
	hs := d.Connect(t, srv.Addrs())
	t.Cleanup(func() { requireNoNodes(t, hs, path) })
	m := newCached(t, hs, path, zklock.WithIdleRelease(time.Minute))
	held := keepIdle(t, ctx, m)

	// Cut the holder's connection right after a read of its own, and keep
	// it away while a contender joins.
	blindOutage(t, d, zktest.Match{Op: zktest.OpExists, Path: path + "-cut"})
	_, _, _, err := hs.Conn().ExistsW(path + "-cut")
	require.NoError(t, err)
	cutDone(t, d)
	os := connect(t, srv.Addrs())
	other, err := zklock.NewMutex(os, path)
	require.NoError(t, err)
	got := start(ctx, other.Lock)
	waitNodes(t, os, path, 2)
	// Asked while away, once the latest sync is older than the window: a
	// sync is needed, which only the new connection answers.
	time.Sleep(2 * zklock.DefaultFreshness)
	mine := start(ctx, m.Lock)
	d.Resume()
	requireBlind(t, d)
	lo := await(t, got, "the contender that joined while the holder was away")
	notYet(t, mine, "the holder's Lock while the contender holds")
	require.NoError(t, lo.Unlock(ctx))
	l := await(t, mine, "the holder's Lock")
	require.Greater(t, l.Token(), lo.Token(), "the holder's Lock was granted from the holding it kept")
	require.Greater(t, lo.Token(), held.Holding)
	require.NoError(t, l.Unlock(ctx))
}

// A holding kept idle by a holder that stops answering (its network frozen)
// blocks a contender until the ensemble expires the holder's session; the
// holder grants itself no section once its latest sync is older than the
// window, and learns of the loss before the contender is granted.
func TestCachedExpiryWhileIdle(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	var net zktest.Freezer
	defer net.Thaw()
	hs := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithDialer(net.Dial))
	other := connect(t, srv.Addrs())
	t.Cleanup(func() { requireNoNodes(t, other, path) })
	m, err := zklock.NewCachedMutex(hs, path, zklock.WithIdleRelease(time.Minute))
	require.NoError(t, err)
	keepIdle(t, ctx, m)

	om, err := zklock.NewMutex(other, path)
	require.NoError(t, err)
	frozen := time.Now()
	net.Freeze()
	time.Sleep(2 * zklock.DefaultFreshness)
	got := start(ctx, om.Lock)
	mine := start(ctx, m.Lock)
	select {
	case r := <-mine:
		if r.err == nil {
			t.Fatalf("a section granted %v after the network froze, its latest sync older than the window", time.Since(frozen))
		}
		require.ErrorIs(t, r.err, zklock.ErrLockLost, "the frozen holder's Lock")
		lostAt := time.Now()
		lo := await(t, got, "the contender")
		grantedAt := time.Now()
		t.Logf("the holder's Lock failed %v after the freeze, the contender granted %v after it (timeout %v)",
			lostAt.Sub(frozen).Round(time.Millisecond), grantedAt.Sub(frozen).Round(time.Millisecond), hs.Timeout())
		require.True(t, lostAt.Before(grantedAt))
		require.NoError(t, lo.Unlock(ctx))
	case <-time.After(liveWait):
		t.Fatal("the frozen holder's Lock never returned")
	}
	require.ErrorIs(t, hs.Err(), zkrecipes.ErrSessionLost)
}

// Once a holding lets go, it grants nothing more, whatever its sync says:
// with a window so long that every sync stays fresh, a Lock while the
// release is in flight (cut off, the client kept away) joins the line
// behind the contender that made it let go, and is granted only after it.
func TestCachedNoGrantAfterLettingGo(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := zktest.Path(t, "/zklock-test")
	d := &zktest.Dropper{}
	hs := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(20*time.Second))
	os := connect(t, srv.Addrs())
	t.Cleanup(func() { requireNoNodes(t, os, path) })
	m := newCached(t, hs, path, zklock.WithFreshness(time.Hour), zklock.WithIdleRelease(time.Hour))
	held := keepIdle(t, ctx, m)

	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpMulti, Path: path}, zktest.AfterWrite)
	other, err := zklock.NewMutex(os, path)
	require.NoError(t, err)
	got := start(ctx, other.Lock)
	require.True(t, fired(d, 1, liveWait), "the holder's release was sent, and cut off")
	mine := start(ctx, m.Lock)
	notYet(t, mine, "a Lock while the release is in flight")
	d.Resume()
	lo := await(t, got, "the contender")
	notYet(t, mine, "the holder's Lock while the contender holds")
	require.NoError(t, lo.Unlock(ctx))
	l := await(t, mine, "the holder's Lock")
	require.Greater(t, l.Token(), lo.Token())
	require.Greater(t, lo.Token(), held.Holding)
	require.NoError(t, l.Unlock(ctx))
}
