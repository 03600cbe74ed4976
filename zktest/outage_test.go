package zktest_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// nextState returns the next change from ch, failing the test if none
// comes within 20 s.
func nextState(t *testing.T, ch <-chan zkrecipes.StateChange) zkrecipes.StateChange {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no state change")
	}
	return zkrecipes.StateChange{}
}

// AfterReply lets the reply through, then cuts: the call succeeds, and the
// session survives the cut that follows.
func TestDropperFaultAfterReply(t *testing.T) {
	d, s, conn, p := dropperNode(t, "r", []byte("data"))
	changes := s.StateChanges()
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: p}, zktest.AfterReply)
	data, _, err := conn.Get(p)
	require.NoError(t, err, "the reply reached the client")
	require.Equal(t, "data", string(data))
	require.Equal(t, 1, d.Fired())
	require.Equal(t, zkrecipes.Suspended, nextState(t, changes).To, "the connection was cut after the reply")
	requireSurvived(t, s)
}

// Match.Watch: only a read that sets a watch matches.
func TestDropperMatchWatch(t *testing.T) {
	d, s, conn, p := dropperNode(t, "w", nil)
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: p, Watch: true}, zktest.AfterWrite)
	_, _, err := conn.Get(p)
	require.NoError(t, err, "a read without a watch does not match")
	require.Equal(t, 0, d.Fired())
	_, _, _, err = conn.GetW(p)
	require.ErrorIs(t, err, zk.ErrConnectionClosed, "a read that sets a watch matches")
	require.Equal(t, 1, d.Fired())
	requireSurvived(t, s)
}

// Paused, the client stays away after a cut; Resume lets it back at once.
func TestDropperPause(t *testing.T) {
	d, s, _, _ := dropperSetup(t)
	changes := s.StateChanges()
	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpExists, Path: "/"}, zktest.AfterWrite)
	_, _, err := s.Conn().Exists("/")
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	require.Equal(t, zkrecipes.Suspended, nextState(t, changes).To)
	// go-zookeeper dials again within a second or two of a cut: it
	// would have reconnected by now, but for the pause.
	time.Sleep(2500 * time.Millisecond)
	require.Equal(t, zkrecipes.Suspended, s.State(), "no reconnect while paused")
	d.Resume()
	require.True(t, nextState(t, changes).Reconnected())
	requireSurvived(t, s)
}

// A change made while the client is away fires its watch when the client
// re-sets it; with LoseMissedEvents it does not, and the watch stays set
// for the next change.
func TestDropperLoseMissedEvents(t *testing.T) {
	for _, lose := range []bool{false, true} {
		name := "Kept"
		if lose {
			name = "Lost"
		}
		t.Run(name, func(t *testing.T) {
			d, s, other, root := dropperSetup(t)
			conn := s.Conn()
			p := root + "/w"
			_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			if lose {
				d.LoseMissedEvents()
			}
			d.Pause()
			t.Cleanup(d.Resume)
			d.Arm(zktest.Match{Op: zktest.OpGetData, Path: p, Watch: true}, zktest.AfterReply)
			_, _, ev, err := conn.GetW(p)
			require.NoError(t, err)
			require.Equal(t, 1, d.Fired(), "cut right after the watch was set")
			_, err = other.Conn().Set(p, []byte("while away"), -1)
			require.NoError(t, err)
			d.Resume()
			if !lose {
				select {
				case e := <-ev:
					require.Equal(t, zk.EventNodeDataChanged, e.Type)
				case <-time.After(20 * time.Second):
					t.Fatal("the re-set watch never fired for the change made while away")
				}
				return
			}
			require.Eventually(t, func() bool { return d.Fired() == 2 }, 20*time.Second, time.Millisecond,
				"the client re-set its watch, claiming every zxid")
			// A round trip sent after the setWatches: an event the server
			// fired for it would have reached the client before its reply.
			_, _, err = conn.Exists("/")
			require.NoError(t, err)
			select {
			case e := <-ev:
				t.Fatalf("the watch fired for the change made while away: %+v", e)
			default:
			}
			_, err = other.Conn().Set(p, []byte("after"), -1)
			require.NoError(t, err)
			select {
			case e := <-ev:
				require.Equal(t, zk.EventNodeDataChanged, e.Type, "the watch is set, for the next change")
			case <-time.After(20 * time.Second):
				t.Fatal("the re-set watch never fired")
			}
		})
	}
}

// A paused server answers nothing, its connections open; resumed, it
// answers again, and the session lived through the pause.
func TestServerPause(t *testing.T) {
	srv := zktest.StartPrivate(t)
	s := zktest.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(10*time.Second))
	srv.Pause()
	_, err := zktest.FourLetter(srv.Addr(), "ruok")
	require.Error(t, err, "a paused server answered ruok")
	srv.Resume()
	answer, err := zktest.FourLetter(srv.Addr(), "ruok")
	require.NoError(t, err)
	require.Equal(t, "imok", answer)
	_, _, err = s.Conn().Exists("/")
	require.NoError(t, err)
	require.NoError(t, s.Err())
}
