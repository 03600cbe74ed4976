package zkrecipes_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// watchWait bounds each wait for a state in these tests: a Watch that
// missed the state waits until then, and the test fails, instead of
// hanging.
const watchWait = 20 * time.Second

// watched runs Watch on its own goroutine and hands its states on, checking
// as it goes that each is newer than the one before. It stops when the
// test ends.
type watched struct {
	t    *testing.T
	ch   chan watchItem
	last *zkrecipes.NodeState
	n    int // states received
}

type watchItem struct {
	st  zkrecipes.NodeState
	err error
}

func watch(t *testing.T, s *zkrecipes.Session, path string, opts ...zkrecipes.WatchOption) *watched {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watched{t: t, ch: make(chan watchItem)}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(w.ch)
		for st, err := range zkrecipes.Watch(ctx, s, path, opts...) {
			select {
			case w.ch <- watchItem{st, err}:
			case <-ctx.Done():
				return
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

// next returns the next state, failing the test on an error, a state not
// newer than the one before, or none within watchWait.
func (w *watched) next() zkrecipes.NodeState {
	w.t.Helper()
	select {
	case it, ok := <-w.ch:
		require.True(w.t, ok, "the watch ended")
		require.NoError(w.t, it.err)
		if w.last != nil {
			requireNewer(w.t, *w.last, it.st)
		}
		w.last, w.n = &it.st, w.n+1
		return it.st
	case <-time.After(watchWait):
		w.t.Fatalf("no state within %v; the last: %+v", watchWait, w.last)
		return zkrecipes.NodeState{}
	}
}

// until returns the first state for which ok holds, checking the order of
// those before it.
func (w *watched) until(what string, ok func(zkrecipes.NodeState) bool) zkrecipes.NodeState {
	w.t.Helper()
	deadline := time.Now().Add(watchWait)
	for time.Now().Before(deadline) {
		if st := w.next(); ok(st) {
			return st
		}
	}
	w.t.Fatalf("never saw %s; the last: %+v", what, w.last)
	return zkrecipes.NodeState{}
}

// requireNewer: b is a later state of the node than a.
func requireNewer(t *testing.T, a, b zkrecipes.NodeState) {
	t.Helper()
	switch {
	case !a.Exists && !b.Exists:
		t.Fatalf("gone twice in a row")
	case !b.Exists:
	case !a.Exists || a.Stat.Czxid != b.Stat.Czxid:
		require.Greater(t, b.Stat.Czxid, a.Stat.Czxid, "a node made again is newer")
	default:
		require.GreaterOrEqual(t, b.Stat.Mzxid, a.Stat.Mzxid, "an older state after a newer one")
		require.GreaterOrEqual(t, b.Stat.Pzxid, a.Stat.Pzxid, "an older state after a newer one")
		require.True(t, b.Stat.Mzxid > a.Stat.Mzxid || b.Stat.Pzxid > a.Stat.Pzxid, "the same state twice: %+v", b.Stat)
	}
}

func dataIs(v string) func(zkrecipes.NodeState) bool {
	return func(st zkrecipes.NodeState) bool { return st.Exists && string(st.Data) == v }
}

// watchPath is a node path no other test uses, deleted (with its children)
// when the test ends.
func watchPath(t *testing.T, admin *zkrecipes.Session) string {
	p := zktest.Path(t, "/watch-test")
	t.Cleanup(func() { deleteTree(t, admin.Conn(), "/watch-test") })
	return p
}

// A node's life, one step at a time: not there, made, written, its
// connection cut and back (read again: whatever it finds, nothing comes
// twice), deleted, made again, deleted, made again. Each state comes once,
// in order; with WithChildren too, whose two watches both fire when the
// node is deleted.
func TestWatchFollowsNode(t *testing.T) {
	srv := setup(t)
	for _, tc := range []struct {
		name string
		opts []zkrecipes.WatchOption
	}{
		{"data", nil},
		{"children", []zkrecipes.WatchOption{zkrecipes.WithChildren()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := connect(t, srv.Addrs())
			d := &zktest.Dropper{}
			s := d.Connect(t, srv.Addrs())
			p := watchPath(t, admin)
			_, err := admin.Conn().Create("/watch-test", nil, 0, zk.WorldACL(zk.PermAll))
			if err != nil {
				require.ErrorIs(t, err, zk.ErrNodeExists)
			}
			conn := admin.Conn()
			w := watch(t, s, p, tc.opts...)
			require.False(t, w.next().Exists, "no node yet")

			_, err = conn.Create(p, []byte("1"), 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			first := w.next()
			require.True(t, dataIs("1")(first))
			d.Arm(zktest.Match{Op: zktest.OpGetData, Path: p, Watch: true}, zktest.AfterReply)
			_, err = conn.Set(p, []byte("2"), -1)
			require.NoError(t, err)
			st := w.next()
			require.Equal(t, "2", string(st.Data))
			require.Equal(t, int32(1), st.Stat.Version)
			// Cut after the watch was set again, and back: a read again
			// that finds nothing new yields nothing.
			require.Eventually(t, func() bool { return d.Fired() == 1 }, watchWait, 2*time.Millisecond)
			require.Eventually(t, func() bool { return s.State() == zkrecipes.Connected }, watchWait, 2*time.Millisecond)
			require.NoError(t, conn.Delete(p, -1))
			require.False(t, w.next().Exists, "gone")
			_, err = conn.Create(p, []byte("3"), 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			back := w.next()
			require.True(t, dataIs("3")(back), "back")
			require.Greater(t, back.Stat.Czxid, first.Stat.Czxid)
			require.Equal(t, 5, w.n)
			// Deleted: with WithChildren both watches fire; one state.
			require.NoError(t, conn.Delete(p, -1))
			require.False(t, w.next().Exists, "gone again")
			_, err = conn.Create(p, []byte("4"), 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			require.True(t, dataIs("4")(w.next()), "back again, and nothing in between")
		})
	}
}

// Under a stream of writes, every state yielded is newer than the one
// before, and the last one is the last write: states may be skipped, never
// the last.
func TestWatchSettlesOnLastWrite(t *testing.T) {
	srv := setup(t)
	admin := connect(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	p := watchPath(t, admin)
	_, err := admin.Conn().Create("/watch-test", nil, 0, zk.WorldACL(zk.PermAll))
	if err != nil {
		require.ErrorIs(t, err, zk.ErrNodeExists)
	}
	_, err = admin.Conn().Create(p, []byte("0"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	w := watch(t, s, p)
	require.True(t, dataIs("0")(w.next()))
	const writes = 300
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= writes; i++ {
			if _, err := admin.Conn().Set(p, []byte(strconv.Itoa(i)), -1); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	prev := 0
	w.until("the last write", func(st zkrecipes.NodeState) bool {
		n, err := strconv.Atoi(string(st.Data))
		require.NoError(t, err)
		require.Greater(t, n, prev, "data in write order")
		prev = n
		return n == writes
	})
	require.NoError(t, <-done)
	t.Logf("%d writes, %d states", writes, w.n-1)
}

// WithChildren: each state is the node's data and children at one moment
// (the data's Stat counts the children listed), through a stream of
// children made and deleted, and the last state is the last change.
func TestWatchChildren(t *testing.T) {
	srv := setup(t)
	admin := connect(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	p := watchPath(t, admin)
	_, err := admin.Conn().Create("/watch-test", nil, 0, zk.WorldACL(zk.PermAll))
	if err != nil {
		require.ErrorIs(t, err, zk.ErrNodeExists)
	}
	w := watch(t, s, p, zkrecipes.WithChildren())
	require.False(t, w.next().Exists)
	_, err = admin.Conn().Create(p, []byte("dir"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	st := w.until("the node", func(st zkrecipes.NodeState) bool { return st.Exists })
	require.Empty(t, st.Children)
	done := make(chan error, 1)
	go func() {
		conn := admin.Conn()
		for i := range 100 {
			c := fmt.Sprintf("%s/c%03d", p, i)
			if _, err := conn.Create(c, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				done <- err
				return
			}
			if i%3 == 0 {
				if _, err := conn.Set(p, []byte(strconv.Itoa(i)), -1); err != nil {
					done <- err
					return
				}
			}
			if i%2 == 0 {
				if err := conn.Delete(c, -1); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	last := w.until("the last change", func(st zkrecipes.NodeState) bool {
		require.True(t, st.Exists)
		require.Len(t, st.Children, int(st.Stat.NumChildren), "data and children of one moment")
		return len(st.Children) == 50 && string(st.Data) == "99"
	})
	require.NoError(t, <-done)
	require.Equal(t, "c001", last.Children[0], "sorted")
	require.Equal(t, "c099", last.Children[49])
}

// The blind re-set: the watcher's connection is cut right after it set its
// watch, it cannot reconnect while another session changes the node, and
// the watches it re-sets claim every zxid, so the server fires none. It
// still sees the change: it reads again after the reconnect.
func TestWatchRereadsAfterBlindReconnect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []zkrecipes.WatchOption
		op     int32 // the read that sets the watch cut after
		change func(conn *zk.Conn, p string) error
		want   func(st zkrecipes.NodeState) bool
	}{
		{"data", nil, zktest.OpGetData,
			func(conn *zk.Conn, p string) error { _, err := conn.Set(p, []byte("away"), -1); return err },
			dataIs("away")},
		{"children", []zkrecipes.WatchOption{zkrecipes.WithChildren()}, zktest.OpGetChildren2,
			func(conn *zk.Conn, p string) error {
				_, err := conn.Create(p+"/child", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				return err
			},
			func(st zkrecipes.NodeState) bool { return len(st.Children) == 1 }},
		{"gone and back", nil, zktest.OpGetData,
			func(conn *zk.Conn, p string) error {
				if err := conn.Delete(p, -1); err != nil {
					return err
				}
				_, err := conn.Create(p, []byte("again"), 0, zk.WorldACL(zk.PermAll))
				return err
			},
			dataIs("again")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := setup(t)
			admin := connect(t, srv.Addrs())
			p := watchPath(t, admin)
			_, err := admin.Conn().Create("/watch-test", nil, 0, zk.WorldACL(zk.PermAll))
			if err != nil {
				require.ErrorIs(t, err, zk.ErrNodeExists)
			}
			_, err = admin.Conn().Create(p, []byte("before"), 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)

			d := &zktest.Dropper{}
			s := d.Connect(t, srv.Addrs())
			d.LoseMissedEvents()
			d.Pause()
			t.Cleanup(d.Resume)
			d.Arm(zktest.Match{Op: tc.op, Path: p, Watch: true}, zktest.AfterReply)
			w := watch(t, s, p, tc.opts...)
			first := w.next()
			require.True(t, dataIs("before")(first))
			require.Eventually(t, func() bool { return d.Fired() == 1 }, watchWait, 2*time.Millisecond,
				"the watcher set its watch, and its connection was cut right after")
			require.NoError(t, tc.change(admin.Conn(), p))
			d.Resume()
			st := w.until("the change made while it was away", tc.want)
			require.Equal(t, 2, d.Fired(), "the client re-set its watches, with every zxid claimed")
			if tc.name == "gone and back" {
				require.Greater(t, st.Stat.Czxid, first.Stat.Czxid)
			}
		})
	}
}

// A server restart: the session lives through it, and what changed while
// the watcher was away (with its re-set watches blind) is seen once it is
// back.
func TestWatchServerRestart(t *testing.T) {
	setup(t)
	srv := zktest.StartPrivate(t)
	d := &zktest.Dropper{} // its gate orders go-zookeeper's re-set watches (see zktest.Dropper)
	s := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(20*time.Second))
	_, err := s.Conn().Create("/w", []byte("before"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	w := watch(t, s, "/w", zkrecipes.WithChildren())
	require.True(t, dataIs("before")(w.next()))

	d.LoseMissedEvents()
	d.Pause()
	t.Cleanup(d.Resume)
	srv.Stop()
	srv.Restart()
	other := connect(t, srv.Addrs())
	_, err = other.Conn().Set("/w", []byte("after"), -1)
	require.NoError(t, err)
	d.Resume()
	w.until("the write made while it was away", dataIs("after"))
	require.Equal(t, 1, d.Fired(), "the client re-set its watches blind")
	require.NoError(t, s.Err(), "the session lived through the restart")
}

// How a Watch ends: its context (no error), its session (an error wrapping
// the Session's Err), bad input (an error first); a loop left early.
func TestWatchEnds(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for st, err := range zkrecipes.Watch(ctx, s, "/") {
		require.NoError(t, err)
		require.True(t, st.Exists, "the root")
		n++
		cancel()
	}
	require.Equal(t, 1, n, "ends with its context, with no error")

	for range zkrecipes.Watch(context.Background(), s, "/") {
		break // left early: returns
	}

	closing := connect(t, srv.Addrs())
	var errs []error
	for _, err := range zkrecipes.Watch(context.Background(), closing, "/no-such-node") {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		require.NoError(t, closing.Close())
	}
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], zkrecipes.ErrClosed)

	for _, tc := range []struct {
		s    *zkrecipes.Session
		path string
		want error
	}{
		{nil, "/a", zkrecipes.ErrInvalidArgument},
		{s, "a", zkrecipes.ErrInvalidPath},
		{s, "/a/", zkrecipes.ErrInvalidPath},
		{s, "", zkrecipes.ErrInvalidPath},
	} {
		var got []error
		for _, err := range zkrecipes.Watch(context.Background(), tc.s, tc.path) {
			got = append(got, err)
		}
		require.Len(t, got, 1, "%q", tc.path)
		require.ErrorIs(t, got[0], tc.want, "%q", tc.path)
	}
}

// Each read Watch sends, cut off by a dropped connection right after it is
// written (AfterWrite) or with its reply lost (LoseReply): the session lives
// on, and Watch reads again and yields the node's state, with no error.
func TestWatchFaults(t *testing.T) {
	srv := setup(t)
	for _, tc := range []struct {
		name   string
		op     int32
		exists bool // the node exists when Watch starts
		opts   []zkrecipes.WatchOption
	}{
		{"getData", zktest.OpGetData, true, nil},
		{"exists", zktest.OpExists, false, nil},
		{"getChildren", zktest.OpGetChildren2, true, []zkrecipes.WatchOption{zkrecipes.WithChildren()}},
	} {
		for _, mode := range []zktest.Mode{zktest.AfterWrite, zktest.LoseReply} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				admin := connect(t, srv.Addrs())
				p := watchPath(t, admin)
				_, err := admin.Conn().Create("/watch-test", nil, 0, zk.WorldACL(zk.PermAll))
				if err != nil {
					require.ErrorIs(t, err, zk.ErrNodeExists)
				}
				if tc.exists {
					_, err = admin.Conn().Create(p, []byte("there"), 0, zk.WorldACL(zk.PermAll))
					require.NoError(t, err)
				}
				d := &zktest.Dropper{}
				s := d.Connect(t, srv.Addrs())
				d.Arm(zktest.Match{Op: tc.op, Path: p}, mode)
				w := watch(t, s, p, tc.opts...)
				st := w.next()
				require.Equal(t, 1, d.Fired(), "the read was cut off")
				require.Equal(t, tc.exists, st.Exists)
				if tc.exists {
					require.Equal(t, "there", string(st.Data))
				}
				// And it still follows the node.
				if tc.exists {
					_, err = admin.Conn().Set(p, []byte("later"), -1)
				} else {
					_, err = admin.Conn().Create(p, []byte("later"), 0, zk.WorldACL(zk.PermAll))
				}
				require.NoError(t, err)
				w.until("the next state", dataIs("later"))
				require.NoError(t, s.Err())
			})
		}
	}
}

// The caller's context ends before Watch starts (nothing is read, nothing
// yielded), or while a read hangs (the iteration ends at once, with no
// error; the read finishes on its own).
func TestWatchContextEnds(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for st, err := range zkrecipes.Watch(ctx, s, "/") {
		t.Fatalf("yielded %+v, %v after its context ended", st, err)
	}

	d := &zktest.Dropper{}
	ds := d.Connect(t, srv.Addrs())
	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: "/zookeeper"}, zktest.BeforeWrite)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan []error, 1)
	go func() {
		var errs []error
		for _, err := range zkrecipes.Watch(ctx, ds, "/zookeeper") {
			errs = append(errs, err)
		}
		ended <- errs
	}()
	require.Eventually(t, func() bool { return d.Fired() == 1 }, watchWait, 2*time.Millisecond, "the read is cut off, and the client cannot reconnect")
	cancel()
	select {
	case errs := <-ended:
		require.Empty(t, errs, "nothing yielded, no error")
	case <-time.After(watchWait):
		t.Fatal("Watch did not end with its context while its read hung")
	}
	d.Resume()
	require.Eventually(t, func() bool { return ds.State() == zkrecipes.Connected }, watchWait, 2*time.Millisecond)
}
