package zklock_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os/exec"
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

func newSem(t testing.TB, s *zkrecipes.Session, path string, permits int, opts ...zklock.Option) *zklock.Semaphore {
	t.Helper()
	sm, err := zklock.NewSemaphore(s, path, permits, opts...)
	require.NoError(t, err)
	return sm
}

// holdAll takes every permit of the semaphore at path, each from a session
// of its own.
func holdAll(t *testing.T, ctx context.Context, addrs []string, path string, permits int) []*zklock.Lease {
	t.Helper()
	var held []*zklock.Lease
	for range permits {
		l, err := newSem(t, connect(t, addrs), path, permits).Acquire(ctx)
		require.NoError(t, err)
		held = append(held, l)
	}
	return held
}

// semJoin starts an Acquire on sm in its own goroutine and returns once its
// node is in line behind `ahead` others (so callers control the order of
// arrival). The lease, once granted, goes to the returned channel.
func semJoin(t *testing.T, ctx context.Context, sm, observer *zklock.Semaphore, ahead int) <-chan *zklock.Lease {
	t.Helper()
	got := make(chan *zklock.Lease, 1)
	go func() {
		l, err := sm.Acquire(ctx)
		if assert.NoError(t, err) {
			got <- l
		}
	}()
	require.Eventually(t, func() bool {
		cs, err := observer.Contenders(ctx)
		return err == nil && len(cs) == ahead+1
	}, 10*time.Second, 5*time.Millisecond)
	return got
}

// received waits (generously) until ch delivers a lease.
func received(t *testing.T, ch <-chan *zklock.Lease, msg string, args ...any) *zklock.Lease {
	t.Helper()
	var l *zklock.Lease
	require.Eventually(t, func() bool {
		select {
		case l = <-ch:
			return true
		default:
			return false
		}
	}, 30*time.Second, 2*time.Millisecond, append([]any{msg}, args...)...)
	return l
}

// Under contention from 12 goroutines over 4 sessions, never more than 3
// leases are held at once, and every lease has its own token.
func TestSemaphoreNeverMoreThanPermitsHolders(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	const permits, sessions, perSession, rounds = 3, 4, 3, 25
	var ss []*zkrecipes.Session
	for range sessions {
		ss = append(ss, connect(t, srv.Addrs()))
	}
	path := lockPath(t, ss[0])

	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		tokens       = map[int64]bool{}
	)
	var wg sync.WaitGroup
	for i, s := range ss {
		sm := newSem(t, s, path, permits, zklock.WithData([]byte(fmt.Sprint("session ", i))))
		for range perSession {
			wg.Go(func() {
				for range rounds {
					l, err := sm.Acquire(ctx)
					if !assert.NoError(t, err) {
						return
					}
					n := inside.Add(1)
					if n > permits {
						t.Errorf("%d holders at once, %d permits", n, permits)
					}
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					mu.Lock()
					if tokens[l.Token()] {
						t.Errorf("token %d handed out twice", l.Token())
					}
					tokens[l.Token()] = true
					mu.Unlock()
					time.Sleep(time.Duration(2000+mrand.IntN(6000)) * time.Microsecond)
					inside.Add(-1)
					assert.NoError(t, l.Unlock(ctx))
					assert.ErrorIs(t, l.Err(), zklock.ErrReleased)
				}
			})
		}
	}
	wg.Wait()
	require.Len(t, tokens, sessions*perSession*rounds)
	t.Logf("%d acquisitions, at most %d holders at once", len(tokens), most.Load())
}

// Whatever order the holders leave in, each permit freed goes to the first
// waiter: no waiter stays blocked while a permit is free. (The rule "the
// waiter at place i watches the node at place i-N" fails this: with N=3,
// the waiter at place 4 watches place 1, and a release at place 0 after one
// at place 2 wakes no one.)
func TestSemaphoreLiveWhateverOrderHoldersLeave(t *testing.T) {
	// Release orders: indices into the current holders, in order of
	// arrival; past the end of the list, holders leave at random.
	orders := []struct {
		name  string
		order []int
	}{
		{"middle-then-first", []int{2, 0}},
		{"last-first", []int{2, 2, 2}},
		{"random-1", nil},
		{"random-2", nil},
		{"random-3", nil},
	}
	for _, tc := range orders {
		order := tc.order
		t.Run(tc.name, func(t *testing.T) {
			srv := setup(t)
			ctx := bg(t)
			const permits, waiters = 3, 5
			seed := mrand.Uint64()
			rng := mrand.New(mrand.NewPCG(seed, 0))
			t.Logf("seed %d", seed)

			first := connect(t, srv.Addrs())
			path := lockPath(t, first)
			observer := newSem(t, first, path, permits)
			held := holdAll(t, ctx, srv.Addrs(), path, permits)
			var gots []<-chan *zklock.Lease
			for i := range waiters {
				sm := newSem(t, connect(t, srv.Addrs()), path, permits, zklock.WithData([]byte(fmt.Sprint("waiter ", i))))
				gots = append(gots, semJoin(t, ctx, sm, observer, permits+i))
			}

			for next := 0; len(held) > 0; {
				k := rng.IntN(len(held))
				if len(order) > 0 {
					k, order = order[0], order[1:]
				}
				require.NoError(t, held[k].Unlock(ctx))
				held = append(held[:k:k], held[k+1:]...)
				if next == waiters {
					continue
				}
				l := received(t, gots[next], "waiter %d not served after a release", next)
				require.NoError(t, l.Err())
				for _, later := range gots[next+1:] {
					require.Empty(t, later, "a later waiter served first")
				}
				held = append(held, l)
				next++
			}
		})
	}
}

// With 6 waiters in line for 2 permits, each contender's node is watched by
// at most one other session: the holders by the first waiter, each waiter
// by the one behind it.
func TestSemaphoreWaitersWatchOneNodeEach(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	const permits, waiters = 2, 6
	first := connect(t, srv.Addrs())
	path := lockPath(t, first)
	observer := newSem(t, first, path, permits)
	held := holdAll(t, ctx, srv.Addrs(), path, permits)
	var gots []<-chan *zklock.Lease
	for i := range waiters {
		gots = append(gots, semJoin(t, ctx, newSem(t, connect(t, srv.Addrs()), path, permits), observer, permits+i))
	}
	cs, err := observer.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, permits+waiters)

	var watchers map[string][]int64
	require.Eventually(t, func() bool {
		out, err := zktest.FourLetter(srv.Addr(), "wchp")
		require.NoError(t, err)
		watchers = parseWchp(out)
		// Every waiter has set its watches: all but the last node are
		// watched by someone.
		for _, c := range cs[:len(cs)-1] {
			if len(othersWatching(watchers[c.Path], c.SessionID)) != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "each waiter watches its nodes")
	for _, c := range cs {
		others := othersWatching(watchers[c.Path], c.SessionID)
		require.LessOrEqual(t, len(others), 1, "%s watched by %d other sessions", c.Path, len(others))
	}
	firstWaiter := cs[permits].SessionID
	for _, c := range cs[:permits] {
		require.Equal(t, []int64{firstWaiter}, othersWatching(watchers[c.Path], c.SessionID), "holders are watched by the first waiter")
	}
	require.Empty(t, othersWatching(watchers[path], 0), "nobody watches the semaphore's directory")

	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	for i, got := range gots {
		l := received(t, got, "waiter %d not served", i)
		require.NoError(t, l.Unlock(ctx))
	}
}

// A holder process killed with SIGKILL frees its permit once the ensemble
// expires its session: a waiting acquirer then gets it.
func TestSemaphoreKilledHolderFreesPermit(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	bin := buildChild(t, "semholder")
	s, w := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, s)
	const permits = 2

	child := exec.Command(bin, strings.Join(srv.Addrs(), ","), path, strconv.Itoa(permits))
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var childToken int64
	_, err = fmt.Sscanf(line, "token %d", &childToken)
	require.NoError(t, err, "child said %q", line)

	sm := newSem(t, s, path, permits)
	mine, err := sm.Acquire(ctx)
	require.NoError(t, err)
	_, err = sm.TryAcquire(ctx)
	require.ErrorIs(t, err, zklock.ErrNoPermit, "the child and we hold both permits")
	got := semJoin(t, ctx, newSem(t, w, path, permits), sm, permits)

	require.NoError(t, child.Process.Kill()) // SIGKILL: no goodbye to the server
	killed := time.Now()
	l := received(t, got, "the waiter did not get the dead child's permit")
	t.Logf("permit free %v after SIGKILL (child's session timeout 2s)", time.Since(killed))
	require.Greater(t, l.Token(), childToken)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, mine.Unlock(ctx))
}

// A contender that asks for another number of permits than the semaphore
// has is refused and leaves no node.
func TestSemaphorePermitsMismatch(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b := connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, a)
	s3 := newSem(t, a, path, 3)
	l, err := s3.Acquire(ctx)
	require.NoError(t, err)
	data, _, err := a.Conn().Get(path)
	require.NoError(t, err)
	require.Equal(t, "3", string(data), "the directory holds the number of permits")

	s4 := newSem(t, b, path, 4)
	_, err = s4.Acquire(ctx)
	require.ErrorIs(t, err, zklock.ErrPermitsMismatch)
	require.ErrorContains(t, err, "3")
	require.ErrorContains(t, err, "4")
	_, err = s4.TryAcquire(ctx)
	require.ErrorIs(t, err, zklock.ErrPermitsMismatch)
	zktest.CatchUp(t, a.Conn(), path) // b deleted its node: a's member may lag
	cs, err := s3.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, 1, "a refused contender leaves no node")
	require.Equal(t, l.Path(), cs[0].Path)
	require.NoError(t, l.Unlock(ctx))
}

// A directory without a number of permits (made by hand, or re-made after
// the server reaped it) is claimed by the first contender; one holding
// something else than a number refuses everyone.
func TestSemaphoreDirectoryWithoutPermits(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())
	conn := s.Conn()
	if _, err := conn.Create("/zklock-test", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		require.ErrorIs(t, err, zk.ErrNodeExists)
	}

	empty := lockPath(t, s)
	_, err := conn.CreateContainer(empty, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	l, err := newSem(t, s, empty, 2).Acquire(ctx)
	require.NoError(t, err)
	data, _, err := conn.Get(empty)
	require.NoError(t, err)
	require.Equal(t, "2", string(data))
	_, err = newSem(t, s, empty, 5).TryAcquire(ctx)
	require.ErrorIs(t, err, zklock.ErrPermitsMismatch)
	require.NoError(t, l.Unlock(ctx))

	garbage := lockPath(t, s)
	_, err = conn.Create(garbage, []byte("three"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Delete(garbage, -1) })
	_, err = newSem(t, s, garbage, 3).Acquire(ctx)
	require.ErrorIs(t, err, zklock.ErrPermitsMismatch)
	require.ErrorContains(t, err, `"three"`)
}

func TestSemaphoreTryAcquire(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	a, b, c := connect(t, srv.Addrs()), connect(t, srv.Addrs()), connect(t, srv.Addrs())
	path := lockPath(t, a)
	sa, sb, sc := newSem(t, a, path, 2), newSem(t, b, path, 2), newSem(t, c, path, 2)

	la, err := sa.TryAcquire(ctx)
	require.NoError(t, err)
	lb, err := sb.TryAcquire(ctx)
	require.NoError(t, err)
	require.NotEqual(t, la.Token(), lb.Token())
	lc, err := sc.TryAcquire(ctx)
	require.ErrorIs(t, err, zklock.ErrNoPermit)
	require.Nil(t, lc)
	zktest.CatchUp(t, a.Conn(), path) // c deleted its node: a's member may lag
	cs, err := sa.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, 2, "a failed TryAcquire leaves no node")

	require.NoError(t, la.Unlock(ctx))
	lc, err = sc.TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, lc.Token(), lb.Token())
	require.NoError(t, lb.Unlock(ctx))
	require.NoError(t, lc.Unlock(ctx))
}

// A first waiter that gives up leaves no node, and the waiter behind it
// takes its place: it gets the next permit freed.
func TestSemaphoreWaiterGivesUp(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	const permits = 2
	first := connect(t, srv.Addrs())
	path := lockPath(t, first)
	observer := newSem(t, first, path, permits)
	held := holdAll(t, ctx, srv.Addrs(), path, permits)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := newSem(t, connect(t, srv.Addrs()), path, permits).Acquire(dctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	zktest.CatchUp(t, first.Conn(), path) // the waiter's session deleted its node
	cs, err := observer.Contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, permits, "an abandoned Acquire leaves no node")

	gaveUp, cancelFirst := context.WithCancel(ctx)
	quitter := newSem(t, connect(t, srv.Addrs()), path, permits)
	errs := make(chan error, 1)
	go func() {
		_, err := quitter.Acquire(gaveUp)
		errs <- err
	}()
	require.Eventually(t, func() bool {
		cs, err := observer.Contenders(ctx)
		return err == nil && len(cs) == permits+1
	}, 10*time.Second, 5*time.Millisecond)
	got := semJoin(t, ctx, newSem(t, connect(t, srv.Addrs()), path, permits), observer, permits+1)
	cancelFirst()
	require.ErrorIs(t, <-errs, context.Canceled)

	require.NoError(t, held[1].Unlock(ctx))
	l := received(t, got, "the waiter behind one that gave up was not served")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, held[0].Unlock(ctx))
}

func TestSemaphoreBadInput(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	s := connect(t, srv.Addrs())

	_, err := zklock.NewSemaphore(nil, "/x", 1)
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	for _, n := range []int{0, -1} {
		_, err := zklock.NewSemaphore(s, "/x", n)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument, "permits %d", n)
	}
	for _, p := range []string{"", "relative", "/trailing/", "/a//b", "/", "/zookeeper/x"} {
		_, err := zklock.NewSemaphore(s, p, 1)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "path %q", p)
	}
	_, err = zklock.NewSemaphore(s, "/x", 1, zklock.WithData(make([]byte, 2<<20)))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)

	closed := connect(t, srv.Addrs())
	sm := newSem(t, closed, "/zklock-test/closed-sem", 1)
	require.NoError(t, closed.Close())
	_, err = sm.Acquire(ctx)
	require.ErrorIs(t, err, zkrecipes.ErrClosed)
}

// BenchmarkSemaphoreN3Sessions12: 12 sessions loop acquire/release on one
// semaphore with 3 permits; cycles/s counts releases over all of them.
func BenchmarkSemaphoreN3Sessions12(b *testing.B) {
	srv := zktest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var rnd [4]byte
	rand.Read(rnd[:])
	path := "/zklock-bench/sem-" + hex.EncodeToString(rnd[:])
	var sems []*zklock.Semaphore
	for range 12 {
		sems = append(sems, newSem(b, connect(b, srv.Addrs()), path, 3))
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, sm := range sems {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				l, err := sm.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, zklock.ErrReleased) {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
