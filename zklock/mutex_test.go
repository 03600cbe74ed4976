package zklock_test

import (
	"context"
	"fmt"
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

func TestMutexExcludesAndTokensIncrease(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	const sessions, perSession = 8, 40
	var ss []*zkrecipes.Session
	for range sessions {
		ss = append(ss, connect(t, srv.Addrs()))
	}
	path := lockPath(t, ss[0])

	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastToken int64
		cycles    int
	)
	var wg sync.WaitGroup
	for i, s := range ss {
		m, err := zklock.NewMutex(s, path, zklock.WithData([]byte(fmt.Sprint("worker ", i))))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perSession {
				l, err := m.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock() // uncontended if the lock works: only the holder is here
				if l.Token() <= lastToken {
					t.Errorf("token %d after %d: not increasing", l.Token(), lastToken)
				}
				lastToken = l.Token()
				cycles++
				mu.Unlock()
				inside.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
				assert.ErrorIs(t, l.Err(), zklock.ErrReleased)
				select {
				case <-l.Done():
				default:
					t.Error("Done not closed after Unlock")
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, sessions*perSession, cycles)
}

// join starts a Lock on m in its own goroutine and returns once its node is
// in line (so callers control the order of arrival).
func join(t *testing.T, ctx context.Context, m, observer *zklock.Mutex, ahead int, got chan<- *zklock.Lease) {
	t.Helper()
	go func() {
		l, err := m.Lock(ctx)
		if assert.NoError(t, err) {
			got <- l
		}
	}()
	require.Eventually(t, func() bool {
		cs, err := observer.Contenders(ctx)
		return err == nil && len(cs) == ahead+1
	}, 10*time.Second, 5*time.Millisecond)
}

func TestMutexServesWaitersInArrivalOrder(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	holder := connect(t, srv.Addrs())
	path := lockPath(t, holder)
	hm, err := zklock.NewMutex(holder, path)
	require.NoError(t, err)
	first, err := hm.Lock(ctx)
	require.NoError(t, err)

	const waiters = 6
	type acq struct {
		who   int
		lease *zklock.Lease
	}
	order := make(chan acq, waiters)
	for i := range waiters {
		s := connect(t, srv.Addrs())
		m, err := zklock.NewMutex(s, path, zklock.WithData([]byte(fmt.Sprint(i))))
		require.NoError(t, err)
		got := make(chan *zklock.Lease, 1)
		join(t, ctx, m, hm, i+1, got)
		go func() { order <- acq{i, <-got} }()
	}
	cs, err := hm.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, waiters+1)
	require.Equal(t, first.Path(), cs[0].Path, "the holder is listed first")
	require.Equal(t, holder.ID(), cs[0].SessionID)
	require.Equal(t, first.Token(), cs[0].Token)
	for i, c := range cs[1:] {
		require.Equal(t, fmt.Sprint(i), string(c.Data), "waiters listed in arrival order")
	}

	require.NoError(t, first.Unlock(ctx))
	var last int64 = first.Token()
	for want := range waiters {
		a := <-order
		require.Equal(t, want, a.who, "served out of arrival order")
		require.Greater(t, a.lease.Token(), last)
		last = a.lease.Token()
		require.NoError(t, a.lease.Unlock(ctx))
	}
}

func TestTryLock(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, a)
	ma, err := zklock.NewMutex(a, path)
	require.NoError(t, err)
	mb, err := zklock.NewMutex(b, path)
	require.NoError(t, err)

	la, err := ma.TryLock(ctx)
	require.NoError(t, err)
	lb, err := mb.TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked)
	require.Nil(t, lb)
	zktest.CatchUp(t, a.Conn(), path) // b deleted its node: a's member may lag
	cs, err := ma.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, 1, "a failed TryLock leaves no node")

	require.NoError(t, la.Unlock(ctx))
	lb, err = mb.TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, lb.Unlock(ctx))
}

func TestLockGivesUpOnCancelAndDeadline(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, a)
	ma, _ := zklock.NewMutex(a, path)
	mb, _ := zklock.NewMutex(b, path)
	held, err := ma.Lock(ctx)
	require.NoError(t, err)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = mb.Lock(dctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	_, err = mb.Lock(cctx)
	require.ErrorIs(t, err, context.Canceled)

	zktest.CatchUp(t, a.Conn(), path) // b deleted its node: a's member may lag
	cs, err := ma.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, 1, "an abandoned Lock leaves no node")

	// A waiter that gave up must not block the next one.
	require.NoError(t, held.Unlock(ctx))
	lb, err := mb.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, lb.Unlock(ctx))
}

func TestUnlockIsIdempotent(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	m, _ := zklock.NewMutex(s, lockPath(t, s))
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Nil(t, l.Err())
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, context.Cause(l.Context()), zklock.ErrReleased)
}

func TestLeaseLostWhenNodeDeletedByAnother(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, admin := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	m, _ := zklock.NewMutex(a, lockPath(t, a))
	l, err := m.Lock(ctx)
	require.NoError(t, err)

	// A fenced write commits while the lease is held.
	_, err = a.Conn().Multi(l.Guard(), &zk.SetDataRequest{Path: "/", Data: nil, Version: -1})
	require.NoError(t, err)

	require.NoError(t, admin.Conn().Delete(l.Path(), -1))
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not told its node was deleted")
	}
	require.ErrorIs(t, l.Err(), zklock.ErrLockLost)
	require.ErrorIs(t, context.Cause(l.Context()), zklock.ErrLockLost)
	require.ErrorIs(t, l.Unlock(ctx), zklock.ErrLockLost)

	// And a fenced write no longer does.
	_, err = a.Conn().Multi(l.Guard(), &zk.SetDataRequest{Path: "/", Data: nil, Version: -1})
	require.Error(t, err)
}

func TestSessionCloseEndsLease(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, b)
	m, _ := zklock.NewMutex(a, path)
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	<-l.Done()
	require.ErrorIs(t, l.Err(), zklock.ErrLockLost)
	require.ErrorIs(t, l.Err(), zkrecipes.ErrClosed)

	// Its node went with the session: another session gets the lock at once.
	mb, _ := zklock.NewMutex(b, path)
	lb, err := mb.TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, lb.Unlock(ctx))

	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
}

func TestManyGoroutinesShareOneSession(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	m, _ := zklock.NewMutex(s, lockPath(t, s))
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				l, err := m.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, int32(1), inside.Add(1))
				inside.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
			}
		}()
	}
	wg.Wait()
}

// With 20 waiters in line, each contender's node is watched by at most one
// other session: its successor. A release wakes one waiter, not a herd.
// The count of child watches is the server's (mntr, wchs): the test runs on
// a server of its own, which no other test binary shares (as ZK_CONNECT's
// would be).
func TestWaitersWatchOnlyTheirPredecessor(t *testing.T) {
	zktest.CheckGoroutines(t)
	srv := zktest.StartPrivate(t)
	ctx := bg(t)
	holder := connect(t, srv.Addrs())
	path := lockPath(t, holder)
	hm, _ := zklock.NewMutex(holder, path)
	first, err := hm.Lock(ctx)
	require.NoError(t, err)

	const waiters = 20
	got := make(chan *zklock.Lease, waiters)
	for i := range waiters {
		m, _ := zklock.NewMutex(connect(t, srv.Addrs()), path)
		join(t, ctx, m, hm, i+1, got)
	}
	cs, err := hm.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, waiters+1)

	// wchp: for each watched path, the sessions watching it.
	var watchers map[string][]int64
	require.Eventually(t, func() bool {
		out, err := zktest.FourLetter(srv.Addr(), "wchp")
		require.NoError(t, err)
		watchers = parseWchp(out)
		// every waiter has set its watch on its predecessor
		for _, c := range cs[:waiters] {
			if len(othersWatching(watchers[c.Path], c.SessionID)) != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "each waiter watches its predecessor")
	for _, c := range cs {
		others := othersWatching(watchers[c.Path], c.SessionID)
		require.LessOrEqual(t, len(others), 1, "%s watched by %d other sessions", c.Path, len(others))
	}
	// wchp shows data watches only. A contender's first listing also sets a
	// one-shot child watch on the directory, which the next change fires;
	// so at most one (the newest contender's) is armed now.
	require.LessOrEqual(t, childWatches(t, srv.Addr()), 1, "child watches on the lock directory")

	require.NoError(t, first.Unlock(ctx))
	for range waiters {
		l := <-got
		require.NoError(t, l.Unlock(ctx))
	}
}

// childWatches is the number of child watches on the server: all watches
// (mntr) less data watches (wchs).
func childWatches(t *testing.T, addr string) int {
	t.Helper()
	mntr, err := zktest.FourLetter(addr, "mntr")
	require.NoError(t, err)
	wchs, err := zktest.FourLetter(addr, "wchs")
	require.NoError(t, err)
	var all, data int
	for _, line := range strings.Split(mntr, "\n") {
		if v, ok := strings.CutPrefix(line, "zk_watch_count\t"); ok {
			all, err = strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
		}
	}
	for _, line := range strings.Split(wchs, "\n") {
		if v, ok := strings.CutPrefix(line, "Total watches:"); ok {
			data, err = strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
		}
	}
	return all - data
}

func othersWatching(sessions []int64, owner int64) []int64 {
	var out []int64
	for _, s := range sessions {
		if s != owner {
			out = append(out, s)
		}
	}
	return out
}

// parseWchp reads the output of ZooKeeper's wchp command:
//
//	/path
//		0x1000a2b3c4d0001
func parseWchp(out string) map[string][]int64 {
	m := map[string][]int64{}
	var cur string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			cur = strings.TrimSpace(line)
		case strings.TrimSpace(line) != "" && cur != "":
			var id int64
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "0x%x", &id); err == nil {
				m[cur] = append(m[cur], id)
			}
		}
	}
	return m
}

// go-zookeeper's zk.Lock and ours, on one path, exclude each other.
func TestInteropWithGoZookeeperLock(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	path := lockPath(t, s)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		if i%2 == 0 {
			m, _ := zklock.NewMutex(connect(t, srv.Addrs()), path)
			go func() {
				defer wg.Done()
				for range 25 {
					l, err := m.Lock(ctx)
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, int32(1), inside.Add(1))
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					assert.NoError(t, l.Unlock(ctx))
				}
			}()
			continue
		}
		conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithLogInfo(false))
		require.NoError(t, err)
		zl := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
		go func() {
			defer wg.Done()
			defer conn.Close()
			for range 25 {
				if !assert.NoError(t, zl.Lock()) {
					return
				}
				assert.Equal(t, int32(1), inside.Add(1))
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				assert.NoError(t, zl.Unlock())
			}
		}()
	}
	wg.Wait()
}

func TestBadInput(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())

	_, err := zklock.NewMutex(nil, "/x")
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	for _, p := range []string{"", "relative", "/trailing/", "/a//b", "/", "/a/./b", "/a/../b", "/bad\x00char", "/zookeeper/quota"} {
		_, err := zklock.NewMutex(s, p)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "path %q", p)
	}
	_, err = zklock.NewMutex(s, "/x", zklock.WithData(make([]byte, 2<<20)))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)
	_, err = zklock.NewMutex(s, "/x", zklock.WithACL(nil))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)

	_, err = zkrecipes.Connect(ctx, srv.Addrs(), zkrecipes.WithSessionTimeout(-time.Second))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	_, err = zkrecipes.Connect(ctx, nil)
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)

	closed := connect(t, srv.Addrs())
	m, err := zklock.NewMutex(closed, "/zklock-test/closed")
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
	_, err = zklock.NewMutex(closed, "/zklock-test/closed")
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
}

// Contenders that share a digest identity make the lock's directory and
// nodes theirs alone: a client without it can neither delete a contender's
// node nor enter the line.
func TestACLKeepsOthersOut(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	auth := zkrecipes.WithAuth("digest", []byte("alice:secret"))
	a1, a2 := connect(t, srv.Addrs(), auth), connect(t, srv.Addrs(), auth)
	outsider := connect(t, srv.Addrs(), zkrecipes.WithAuth("digest", []byte("mallory:guess")))
	anonymous := connect(t, srv.Addrs())

	path := lockPath(t, a1)
	m1, _ := zklock.NewMutex(a1, path)
	m2, _ := zklock.NewMutex(a2, path)
	l1, err := m1.Lock(ctx)
	require.NoError(t, err)
	acl, _, err := a1.Conn().GetACL(path)
	require.NoError(t, err)
	require.Equal(t, "digest", acl[0].Scheme)
	require.True(t, strings.HasPrefix(acl[0].ID, "alice:"), "ACL id %q", acl[0].ID)

	for _, other := range []*zkrecipes.Session{outsider, anonymous} {
		require.ErrorIs(t, other.Conn().Delete(l1.Path(), -1), zk.ErrNoAuth)
		mo, err := zklock.NewMutex(other, path)
		require.NoError(t, err)
		_, err = mo.TryLock(ctx)
		require.ErrorIs(t, err, zk.ErrNoAuth)
	}
	require.Nil(t, l1.Err(), "the holder keeps its lease")

	// The shared identity works as usual.
	got := make(chan *zklock.Lease, 1)
	go func() {
		l, err := m2.Lock(ctx)
		if assert.NoError(t, err) {
			got <- l
		}
	}()
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NoError(t, l2.Unlock(ctx))
}

func TestContendersOfEmptyLock(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	m, _ := zklock.NewMutex(s, lockPath(t, s))
	cs, err := m.Contenders(bg(t))
	require.NoError(t, err)
	require.Empty(t, cs)
}
