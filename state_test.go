package zkrecipes_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// nextChange returns the next change from ch; the test fails if none comes
// within 30 s, or if ch is closed.
func nextChange(t *testing.T, ch <-chan zkrecipes.StateChange) zkrecipes.StateChange {
	t.Helper()
	select {
	case c, ok := <-ch:
		require.True(t, ok, "the channel was closed")
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no state change")
	}
	return zkrecipes.StateChange{}
}

// requireClosed checks that ch holds nothing more and is closed.
func requireClosed(t *testing.T, ch <-chan zkrecipes.StateChange) {
	t.Helper()
	select {
	case c, ok := <-ch:
		require.False(t, ok, "a change after the last: %+v", c)
	case <-time.After(30 * time.Second):
		t.Fatal("the channel was not closed after Lost")
	}
}

// cut drops s's connection (through d) at a request of its own.
func cut(t *testing.T, d *zktest.Dropper, s *zkrecipes.Session) {
	t.Helper()
	const p = "/zkrecipes-state-test-cut"
	d.Arm(zktest.Match{Op: zktest.OpExists, Path: p}, zktest.AfterWrite)
	_, _, err := s.Conn().Exists(p)
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
}

// A dropped connection suspends the Session; reconnecting to the same
// session makes it Connected again (Reconnected); Close makes it Lost, the
// last change.
func TestStateSuspendedThenReconnected(t *testing.T) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	changes := s.StateChanges()
	require.Equal(t, zkrecipes.Connected, s.State())

	d.Pause() // no reconnect until Resume: Suspended is there to see
	defer d.Resume()
	cut(t, d, s)
	c := nextChange(t, changes)
	require.Equal(t, zkrecipes.StateChange{From: zkrecipes.Connected, To: zkrecipes.Suspended}, c)
	require.False(t, c.Reconnected())
	require.Equal(t, zkrecipes.Suspended, s.State())
	require.NoError(t, s.Err(), "suspended is not over")

	d.Resume()
	c = nextChange(t, changes)
	require.True(t, c.Reconnected(), "%+v", c)
	require.Equal(t, zkrecipes.Connected, s.State())
	require.NoError(t, s.Err())
	_, _, err := s.Conn().Exists("/")
	require.NoError(t, err)

	require.NoError(t, s.Close())
	c = nextChange(t, changes)
	require.Equal(t, zkrecipes.Connected, c.From)
	require.Equal(t, zkrecipes.Lost, c.To)
	require.ErrorIs(t, c.Err, zkrecipes.ErrClosed)
	require.Equal(t, zkrecipes.Lost, s.State())
	requireClosed(t, changes)

	// Asked once the session is over: its last change, and closed.
	late := s.StateChanges()
	require.Equal(t, c, nextChange(t, late))
	requireClosed(t, late)
}

// The ensemble expires the session while the client is cut off (its own
// loss timer is pushed past the timeout so that the server wins): the
// Session is Suspended, then, once it hears of the expiry, Lost with
// ErrSessionExpired, the last change.
func TestStateLostOnExpiry(t *testing.T) {
	srv := setup(t)
	var net zktest.Freezer
	defer net.Thaw()
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second),
		zkrecipes.WithDialer(net.Dial), zkrecipes.WithLossFraction(10))
	other := connect(t, srv.Addrs())
	p := fmt.Sprintf("/zkrecipes-state-test-%d", time.Now().UnixNano())
	_, err := s.Conn().Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	changes := s.StateChanges()

	net.Freeze()
	c := nextChange(t, changes)
	require.Equal(t, zkrecipes.StateChange{From: zkrecipes.Connected, To: zkrecipes.Suspended}, c)
	// The server expires the session: its ephemeral node goes.
	require.Eventually(t, func() bool {
		found, _, err := other.Conn().Exists(p)
		require.NoError(t, err)
		return !found
	}, 30*time.Second, 50*time.Millisecond, "the server expires the frozen session")
	require.Equal(t, zkrecipes.Suspended, s.State(), "the client has not heard yet")
	net.Thaw()
	c = nextChange(t, changes)
	require.Equal(t, zkrecipes.Suspended, c.From)
	require.Equal(t, zkrecipes.Lost, c.To)
	require.ErrorIs(t, c.Err, zkrecipes.ErrSessionExpired)
	require.ErrorIs(t, s.Err(), zkrecipes.ErrSessionExpired)
	require.Equal(t, zkrecipes.Lost, s.State())
	requireClosed(t, changes)
}

// A reader that never reads misses no final Lost: its channel keeps the
// latest changes (the oldest are dropped when it is full), and Lost last.
func TestStateChangesUnreadStillGetsLost(t *testing.T) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	lazy := s.StateChanges() // never read until the end
	seen := s.StateChanges() // read, to know each reconnect is done
	drops := cap(lazy)       // twice as many changes as lazy has room for
	for range drops {
		cut(t, d, s)
		require.Equal(t, zkrecipes.Suspended, nextChange(t, seen).To)
		require.True(t, nextChange(t, seen).Reconnected())
	}
	require.NoError(t, s.Close())
	require.Equal(t, zkrecipes.Lost, nextChange(t, seen).To)

	var got []zkrecipes.StateChange
	for c := range lazy {
		got = append(got, c)
	}
	require.Len(t, got, cap(lazy), "a full buffer: the newest changes")
	last := got[len(got)-1]
	require.Equal(t, zkrecipes.Lost, last.To)
	require.ErrorIs(t, last.Err, zkrecipes.ErrClosed)
	require.True(t, got[len(got)-2].Reconnected(), "the change before Lost is the latest one, not an old one: %+v", got)
}
