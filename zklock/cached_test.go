package zklock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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

// keepIdle makes m hold the lock, kept idle: two sections, the second
// granted in process.
func keepIdle(t *testing.T, ctx context.Context, m *zklock.CachedMutex) zklock.Fence {
	t.Helper()
	cycle(t, ctx, m)
	f := cycle(t, ctx, m)
	require.Equal(t, uint32(2), f.Section, "the second section was not granted from the kept holding")
	return f
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

// hotLoop locks and unlocks m as fast as it can until ctx ends, and
// returns the moments its sections began (Lock returned), once it has
// stopped.
func hotLoop(ctx context.Context, m *zklock.CachedMutex) func() []time.Time {
	var begins []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := m.Lock(ctx)
			if err != nil {
				continue
			}
			begins = append(begins, time.Now())
			_ = l.Unlock(context.Background())
		}
	}()
	return func() []time.Time {
		<-done
		return begins
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
// With WithFreshness(0) (a sync for every Lock) and the stall, no section
// begins after the join.
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
			begins := hotLoop(loop, m)
			time.Sleep(200 * time.Millisecond)

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
			require.Greater(t, len(bs)-after(bs, granted), 100, "the holder was not re-locking")
			if c.stall {
				// A sync in flight as it joined is answered after its join
				// is told: nothing begins later than the window.
				require.Zero(t, late, "sections begun later than the freshness window after the contender joined")
				if c.fresh == 0 {
					require.Zero(t, bypass, "sections begun after the join, with a sync for every Lock")
				}
			} else {
				// At most the one whose own sync was in flight as it joined.
				require.LessOrEqual(t, late, 1, "sections begun later than the freshness window after the contender joined")
			}
		})
	}
}
