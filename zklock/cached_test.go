package zklock_test

import (
	"context"
	"testing"
	"time"

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
