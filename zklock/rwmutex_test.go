package zklock_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	var ss []*zkrecipes.Session
	for range 4 {
		ss = append(ss, connect(t, srv.Addrs()))
	}
	path := lockPath(t, ss[0])
	var rws []*zklock.RWMutex
	for _, s := range ss {
		rw, err := zklock.NewRWMutex(s, path)
		require.NoError(t, err)
		rws = append(rws, rw)
	}

	// Four readers hold at once.
	var reads []*zklock.Lease
	for _, rw := range rws {
		l, err := rw.TryRLock(ctx)
		require.NoError(t, err, "readers share the lock")
		reads = append(reads, l)
	}
	// A writer cannot get in, and waits.
	_, err := rws[0].TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked)
	got := make(chan *zklock.Lease, 1)
	go func() {
		l, err := rws[1].Lock(ctx)
		if assert.NoError(t, err) {
			got <- l
		}
	}()
	require.Eventually(t, func() bool {
		cs, _ := rws[0].Contenders(ctx)
		return len(cs) == 5
	}, 10*time.Second, 5*time.Millisecond)

	// A reader arriving after the waiting writer does not overtake it.
	_, err = rws[2].TryRLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked, "a later reader must not overtake a waiting writer")

	for _, l := range reads[:3] {
		require.NoError(t, l.Unlock(ctx))
	}
	select {
	case <-got:
		t.Fatal("writer got in while a reader held the lock")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, reads[3].Unlock(ctx))
	w := <-got

	// While the writer holds, no reader gets in; once it releases, every
	// reader queued behind it gets in together.
	readers := make(chan *zklock.Lease, 3)
	for i, rw := range []*zklock.RWMutex{rws[0], rws[2], rws[3]} {
		go func() {
			l, err := rw.RLock(ctx)
			if assert.NoError(t, err) {
				readers <- l
			}
		}()
		require.Eventually(t, func() bool {
			cs, _ := rws[0].Contenders(ctx)
			return len(cs) == 2+i
		}, 10*time.Second, 5*time.Millisecond)
	}
	select {
	case <-readers:
		t.Fatal("reader got in while the writer held the lock")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, w.Unlock(ctx))
	for range 3 {
		l := <-readers
		require.Greater(t, l.Token(), w.Token(), "tokens follow the line")
		defer l.Unlock(ctx)
	}
}

// Random mixed traffic over several sessions: no deadlock, a writer is always
// alone, readers never overlap a writer.
func TestRWMutexMixedTraffic(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	path := ""
	var readers, writers atomic.Int32
	var wg sync.WaitGroup
	var done atomic.Int64
	for i := range 5 {
		s := connect(t, srv.Addrs())
		if path == "" {
			path = lockPath(t, s)
		}
		rw, err := zklock.NewRWMutex(s, path)
		require.NoError(t, err)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				for range 25 {
					lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					if r.IntN(3) == 0 {
						l, err := rw.Lock(lctx)
						cancel()
						if !assert.NoError(t, err, "deadlock or failure") {
							return
						}
						if n := writers.Add(1); n != 1 || readers.Load() != 0 {
							t.Errorf("writer not alone: %d writers, %d readers", n, readers.Load())
						}
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
						writers.Add(-1)
						assert.NoError(t, l.Unlock(ctx))
					} else {
						l, err := rw.RLock(lctx)
						cancel()
						if !assert.NoError(t, err, "deadlock or failure") {
							return
						}
						readers.Add(1)
						if writers.Load() != 0 {
							t.Error("reader inside with a writer")
						}
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
						readers.Add(-1)
						assert.NoError(t, l.Unlock(ctx))
					}
					done.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	require.Equal(t, int64(5*2*25), done.Load())
}

// Each contender's node is watched by at most one other session, except a
// writer's, which every reader queued directly behind it watches.
func TestRWMutexWatches(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	holder := connect(t, srv.Addrs())
	path := lockPath(t, holder)
	hrw, _ := zklock.NewRWMutex(holder, path)
	w1, err := hrw.Lock(ctx)
	require.NoError(t, err)

	// Line: W1(held) R R R W2 R R
	kinds := []bool{true, true, true, false, true, true} // true = reader
	got := make(chan *zklock.Lease, len(kinds))
	for i, reader := range kinds {
		rw, _ := zklock.NewRWMutex(connect(t, srv.Addrs()), path)
		go func() {
			var l *zklock.Lease
			var err error
			if reader {
				l, err = rw.RLock(ctx)
			} else {
				l, err = rw.Lock(ctx)
			}
			if assert.NoError(t, err) {
				got <- l
			}
		}()
		require.Eventually(t, func() bool {
			cs, _ := hrw.Contenders(ctx)
			return len(cs) == i+2
		}, 10*time.Second, 5*time.Millisecond)
	}
	cs, err := hrw.Contenders(ctx)
	require.NoError(t, err)
	want := map[int]int{0: 3, 1: 0, 2: 0, 3: 1, 4: 2} // index -> other sessions watching it
	var watchers map[string][]int64
	require.Eventually(t, func() bool {
		out, err := zktest.FourLetter(srv.Addr(), "wchp")
		require.NoError(t, err)
		watchers = parseWchp(out)
		for i, n := range want {
			if len(othersWatching(watchers[cs[i].Path], cs[i].SessionID)) != n {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "watches: %v", watchers)

	require.NoError(t, w1.Unlock(ctx))
	for range 3 { // the three readers behind W1 get in together
		l := <-got
		require.NoError(t, l.Unlock(ctx))
	}
	for range 3 { // then W2, then the last two readers
		l := <-got
		require.NoError(t, l.Unlock(ctx))
	}
}

func TestRWMutexBadInput(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	_, err := zklock.NewRWMutex(nil, "/x")
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	for _, p := range []string{"", "x", "/x/", "/x//y"} {
		_, err := zklock.NewRWMutex(s, p)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "path %q", p)
	}
	_, err = zklock.NewRWMutex(s, "/x", zklock.WithData(make([]byte, zkrecipes.MaxDataSize+1)))
	require.ErrorIs(t, err, zkrecipes.ErrDataTooLarge)
}
