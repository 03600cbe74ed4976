package zklock_test

import (
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// KindOf tells each recipe's directory by the nodes its contenders made on
// a real server, and a lock's by another client's lock nodes too.
func TestKindOf(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	ctx := bg(t)
	kindAt := func(dir string) zklock.Kind {
		t.Helper()
		names, _, err := s.Conn().Children(dir)
		require.NoError(t, err)
		return zklock.KindOf(names)
	}

	mutexPath, rwPath, semPath, electionPath, curatorPath := lockPath(t, s), lockPath(t, s), lockPath(t, s), lockPath(t, s), lockPath(t, s)
	m, err := zklock.NewMutex(s, mutexPath)
	require.NoError(t, err)
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	defer l.Unlock(ctx)
	require.Equal(t, zklock.KindLock, kindAt(mutexPath))

	rw, err := zklock.NewRWMutex(s, rwPath)
	require.NoError(t, err)
	r, err := rw.RLock(ctx)
	require.NoError(t, err)
	defer r.Unlock(ctx)
	require.Equal(t, zklock.KindLock, kindAt(rwPath))

	sm, err := zklock.NewSemaphore(s, semPath, 2)
	require.NoError(t, err)
	p, err := sm.Acquire(ctx)
	require.NoError(t, err)
	defer p.Unlock(ctx)
	require.Equal(t, zklock.KindSemaphore, kindAt(semPath))

	el, err := zklock.NewElection(s, electionPath)
	require.NoError(t, err)
	lead, err := el.Campaign(ctx, []byte("x"))
	require.NoError(t, err)
	defer lead.Resign(ctx)
	require.Equal(t, zklock.KindElection, kindAt(electionPath))

	// A Curator InterProcessMutex's node, made by hand.
	_, err = s.Conn().Create(curatorPath, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	node, err := s.Conn().CreateProtectedEphemeralSequential(curatorPath+"/lock-", nil, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	defer s.Conn().Delete(node, -1)
	require.Equal(t, zklock.KindLock, kindAt(curatorPath))

	require.Equal(t, zklock.KindNone, zklock.KindOf(nil))
	require.Equal(t, zklock.KindNone, zklock.KindOf([]string{"items", "keys", "config"}))
}
