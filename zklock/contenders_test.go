package zklock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// contenderLine is a recipe's Contenders, and its contenders that join in turn.
type contenderLine struct {
	contenders func(context.Context) ([]zklock.Contender, error)
	join       []func(context.Context) (*zklock.Lease, error) // each holds or waits until ctx ends
}

// whoHolds joins the contenders in order, each once the one before is
// listed, and returns whether each holds as Contenders reports it. Every
// contender leaves before it returns.
func whoHolds(t *testing.T, l contenderLine) []bool {
	t.Helper()
	ctx, cancel := context.WithCancel(bg(t))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, join := range l.join {
		wg.Go(func() {
			lease, err := join(ctx)
			if err == nil {
				<-ctx.Done()
				assert.NoError(t, lease.Unlock(context.Background()))
			}
		})
		require.Eventually(t, func() bool {
			cs, err := l.contenders(ctx)
			return err == nil && len(cs) == i+1
		}, 10*time.Second, 5*time.Millisecond, "contender %d not listed", i)
	}
	cs, err := l.contenders(ctx)
	require.NoError(t, err)
	require.Len(t, cs, len(l.join))
	var holds []bool
	for i, c := range cs {
		holds = append(holds, c.Holds)
		if i > 0 {
			assert.Greater(t, c.Token, cs[i-1].Token, "listed in line order")
		}
	}
	return holds
}

// TestContendersSayWhoHolds: each recipe's Contenders says which
// contenders hold by the recipe's own rule: one writer, every reader with no
// writer ahead, the first n of a semaphore, an election's lowest.
func TestContendersSayWhoHolds(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())

	t.Run("Mutex", func(t *testing.T) {
		path := lockPath(t, s)
		m, err := zklock.NewMutex(s, path)
		require.NoError(t, err)
		got := whoHolds(t, contenderLine{m.Contenders, []func(context.Context) (*zklock.Lease, error){m.Lock, m.Lock, m.Lock}})
		assert.Equal(t, []bool{true, false, false}, got)
	})

	t.Run("RWMutex", func(t *testing.T) {
		path := lockPath(t, s)
		rw, err := zklock.NewRWMutex(s, path)
		require.NoError(t, err)
		m, err := zklock.NewMutex(s, path)
		require.NoError(t, err)
		// Two readers share; the writer waits, and so does the reader
		// behind it.
		l := contenderLine{rw.Contenders, []func(context.Context) (*zklock.Lease, error){rw.RLock, rw.RLock, rw.Lock, rw.RLock}}
		assert.Equal(t, []bool{true, true, false, false}, whoHolds(t, l))
		// A Mutex on the path lists the same line, by the same rules.
		l.contenders = m.Contenders
		assert.Equal(t, []bool{true, true, false, false}, whoHolds(t, l))
	})

	t.Run("Semaphore", func(t *testing.T) {
		path := lockPath(t, s)
		sm := newSem(t, s, path, 2)
		got := whoHolds(t, contenderLine{sm.Contenders, []func(context.Context) (*zklock.Lease, error){sm.Acquire, sm.Acquire, sm.Acquire}})
		assert.Equal(t, []bool{true, true, false}, got)
	})

	t.Run("SemaphoreObservedWithOtherPermits", func(t *testing.T) {
		// The number recorded in the directory rules, whatever the
		// observer's handle was made with.
		path := lockPath(t, s)
		sm := newSem(t, s, path, 2)
		observer := newSem(t, s, path, 1)
		got := whoHolds(t, contenderLine{observer.Contenders, []func(context.Context) (*zklock.Lease, error){sm.Acquire, sm.Acquire, sm.Acquire}})
		assert.Equal(t, []bool{true, true, false}, got)
	})

	t.Run("Election", func(t *testing.T) {
		path := lockPath(t, s)
		el, err := zklock.NewElection(s, path)
		require.NoError(t, err)
		var join []func(context.Context) (*zklock.Lease, error)
		for i := range 3 {
			join = append(join, func(ctx context.Context) (*zklock.Lease, error) {
				l, err := el.Campaign(ctx, fmt.Appendf(nil, "candidate %d", i))
				if err != nil {
					return nil, err
				}
				return l.Lease, nil
			})
		}
		assert.Equal(t, []bool{true, false, false}, whoHolds(t, contenderLine{el.Contenders, join}))
		cs, err := el.Contenders(bg(t))
		require.NoError(t, err)
		assert.Empty(t, cs, "no one left")
	})
}

// TestElectionContendersMatchLeader: the first of an election's Contenders is
// the contender Leader reports, with its value and term.
func TestElectionContendersMatchLeader(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	path := lockPath(t, s)
	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	ctx := bg(t)
	l, err := el.Campaign(ctx, []byte("me"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, l.Resign(ctx)) }()
	require.NoError(t, l.Proclaim(ctx, []byte("proclaimed")))

	cs, err := el.Contenders(ctx)
	require.NoError(t, err)
	leader, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, zklock.Contender{Path: leader.Path, Data: leader.Value, SessionID: leader.SessionID, Token: leader.Token, Holds: true}, cs[0])
	assert.Equal(t, l.Token(), cs[0].Token)
	assert.Equal(t, s.ID(), cs[0].SessionID)
}
