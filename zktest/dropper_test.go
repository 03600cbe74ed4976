package zktest_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// dropperSetup connects one Session through a fresh Dropper and one plain
// Session, for looking from outside, and returns a path of the test's own.
func dropperSetup(t *testing.T) (*zktest.Dropper, *zkrecipes.Session, *zkrecipes.Session, string) {
	t.Helper()
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := zktest.Connect(t, srv.Addrs())
	root := zktest.Path(t, "/zktest-dropper")
	acl := zk.WorldACL(zk.PermAll)
	_, err := other.Conn().CreateContainer("/zktest-dropper", nil, zk.FlagContainer, acl)
	if !errors.Is(err, zk.ErrNodeExists) {
		require.NoError(t, err)
	}
	_, err = other.Conn().Create(root, nil, 0, acl)
	require.NoError(t, err)
	t.Cleanup(func() {
		names, _, _ := other.Conn().Children(root)
		for _, n := range names {
			other.Conn().Delete(root+"/"+n, -1)
		}
		other.Conn().Delete(root, -1)
	})
	return d, s, other, root
}

// dropperNode is dropperSetup with a node made through the dropper's
// session: that session, its connection and the node's path.
func dropperNode(t *testing.T, name string, data []byte) (*zktest.Dropper, *zkrecipes.Session, *zk.Conn, string) {
	t.Helper()
	d, s, _, root := dropperSetup(t)
	p := root + "/" + name
	_, err := s.Conn().Create(p, data, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	return d, s, s.Conn(), p
}

// requireSurvived checks that s is live, still bound to its session, and
// answers requests.
func requireSurvived(t *testing.T, s *zkrecipes.Session) {
	t.Helper()
	require.NoError(t, s.Err(), "the session survives a cut")
	require.Equal(t, s.ID(), s.Conn().SessionID(), "the client resumed the same session")
	_, _, err := s.Conn().Exists("/")
	require.NoError(t, err, "a later request works")
}

// createCut arms d on the create of an ephemeral node under the test's
// root, sends that create, and checks that it failed with the cut, that the
// cut happened once and that the session survived it. It returns the
// surviving session, the other session and the node's path.
func createCut(t *testing.T, mode zktest.Mode) (d *zktest.Dropper, s, other *zkrecipes.Session, p string) {
	t.Helper()
	d, s, other, root := dropperSetup(t)
	p = root + "/n"
	d.Arm(zktest.Match{Op: zktest.OpCreate, Path: p}, mode)
	_, err := s.Conn().Create(p, []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	require.Equal(t, 1, d.Fired())
	requireSurvived(t, s)
	return d, s, other, p
}

func TestDropperFaultLoseReply(t *testing.T) {
	d, s, other, p := createCut(t, zktest.LoseReply)
	_, st, err := other.Conn().Get(p)
	require.NoError(t, err, "the create was applied: only its reply was lost")
	require.Equal(t, s.ID(), st.EphemeralOwner, "made by the surviving session")
	requireSurvived(t, s)
	require.Equal(t, 1, d.Fired(), "one Arm, one cut")
}

func TestDropperFaultAfterWrite(t *testing.T) {
	_, s, other, p := createCut(t, zktest.AfterWrite)
	// Applied or not: if it was, the node belongs to the surviving session.
	ok, st, err := other.Conn().Exists(p)
	require.NoError(t, err)
	if ok {
		require.Equal(t, s.ID(), st.EphemeralOwner)
	}
}

func TestDropperFaultBeforeWrite(t *testing.T) {
	_, s, other, p := createCut(t, zktest.BeforeWrite)
	ok, _, err := other.Conn().Exists(p)
	require.NoError(t, err)
	require.False(t, ok, "the create never reached the server")
	// The session goes on: the same request now lands.
	_, err = s.Conn().Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	require.NoError(t, s.Conn().Delete(p, -1))
}

// The aim: only the request that matches is cut, only once per Arm; other
// requests, even on the same path, go through.
func TestDropperFaultAimsAndIsOneShot(t *testing.T) {
	d, s, _, root := dropperSetup(t)
	conn := s.Conn()
	acl := zk.WorldACL(zk.PermAll)
	a, b := root+"/a", root+"/b"
	d.Arm(zktest.Match{Op: zktest.OpSetData, Path: a}, zktest.LoseReply)
	_, err := conn.Create(a, nil, 0, acl) // same path, other opcode
	require.NoError(t, err)
	_, err = conn.Create(b, nil, 0, acl)
	require.NoError(t, err)
	_, err = conn.Set(b, []byte("b"), -1) // same opcode, other path
	require.NoError(t, err)
	_, _, err = conn.Get(a)
	require.NoError(t, err)
	require.Equal(t, 0, d.Fired())

	_, err = conn.Set(a, []byte("1"), -1)
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	_, err = conn.Set(a, []byte("2"), -1)
	require.NoError(t, err, "one shot: the next matching request goes through")
	require.Equal(t, 1, d.Fired())
	data, st, err := conn.Get(a)
	require.NoError(t, err)
	require.Equal(t, "2", string(data))
	require.EqualValues(t, 2, st.Version, "the first write was applied too")

	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: a}, zktest.AfterWrite)
	require.True(t, d.Disarm())
	require.False(t, d.Disarm())
	_, _, err = conn.Get(a)
	require.NoError(t, err, "a disarmed Dropper cuts nothing")
	require.Equal(t, 1, d.Fired())
	requireSurvived(t, s)
}

// A multi is hit by OpMulti with any of its paths, and by the type of any of
// its operations.
func TestDropperFaultMulti(t *testing.T) {
	d, s, other, root := dropperSetup(t)
	conn := s.Conn()
	acl := zk.WorldACL(zk.PermAll)
	for i, m := range []zktest.Match{
		{Op: zktest.OpMulti, Path: "/m0"},
		{Op: zktest.OpCheck, Path: root + "/m1"},
		{Op: zktest.OpDelete, Path: "/m2"},
		{Op: zktest.OpCreate, Path: "/m3/c"},
		{Op: zktest.OpSetData, Path: "/m4"},
	} {
		p := fmt.Sprintf("%s/m%d", root, i)
		_, err := conn.Create(p, nil, 0, acl)
		require.NoError(t, err)
		d.Arm(zktest.Match{Op: zktest.OpMulti, Path: "/nothing-like-it"}, zktest.LoseReply)
		_, err = conn.Multi(&zk.CheckVersionRequest{Path: p, Version: 0}, &zk.CreateRequest{Path: p + "/c", Data: []byte("c"), Acl: acl})
		require.NoError(t, err, "a multi on other paths goes through")
		d.Arm(m, zktest.LoseReply)
		_, err = conn.Multi(
			&zk.CheckVersionRequest{Path: p, Version: 0},
			&zk.SetDataRequest{Path: p, Data: []byte("x"), Version: -1},
			&zk.CreateRequest{Path: p + "/c/d", Data: []byte("d"), Acl: acl, Flags: zk.FlagEphemeral},
			&zk.DeleteRequest{Path: p + "/c/d", Version: -1},
			&zk.DeleteRequest{Path: p + "/c", Version: -1},
		)
		require.ErrorIs(t, err, zk.ErrConnectionClosed, "match %+v", m)
		require.Equal(t, i+1, d.Fired())
		data, _, err := other.Conn().Get(p)
		require.NoError(t, err)
		require.Equal(t, "x", string(data), "the multi was applied")
		_, _, err = other.Conn().Get(p + "/c")
		require.ErrorIs(t, err, zk.ErrNoNode)
	}
	requireSurvived(t, s)
}

// Watches survive a cut: the client re-sets them on the new connection and
// they fire for changes made while it was away.
func TestDropperFaultKeepsWatches(t *testing.T) {
	d, s, other, root := dropperSetup(t)
	conn := s.Conn()
	p := root + "/w"
	_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, _, ev, err := conn.GetW(p)
	require.NoError(t, err)
	for range 3 {
		d.Arm(zktest.Match{Op: zktest.OpExists, Path: "/"}, zktest.AfterWrite)
		_, _, err = conn.Exists("/")
		require.ErrorIs(t, err, zk.ErrConnectionClosed)
		requireSurvived(t, s)
	}
	require.Equal(t, 3, d.Fired())
	_, err = other.Conn().Set(p, []byte("changed"), -1)
	require.NoError(t, err)
	select {
	case e := <-ev:
		require.Equal(t, zk.EventNodeDataChanged, e.Type)
		require.NoError(t, e.Err)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch set before the cuts never fired")
	}
}

// Armed for a request that never comes, the Dropper cuts nothing.
func TestDropperFaultNothingMatches(t *testing.T) {
	d, s, _, root := dropperSetup(t)
	d.Arm(zktest.Match{Op: zktest.OpCreateContainer, Path: root}, zktest.AfterWrite)
	for i := range 20 {
		_, err := s.Conn().Create(fmt.Sprintf("%s/n%d", root, i), nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	require.Equal(t, 0, d.Fired())
	require.False(t, errors.Is(s.Err(), zkrecipes.ErrSessionLost))
	require.True(t, d.Disarm())
}

// Arms add up: each is used once, by the first request that matches it.
func TestDropperFaultArmsAddUp(t *testing.T) {
	d, s, _, root := dropperSetup(t)
	conn := s.Conn()
	_, err := conn.Create(root+"/a", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: root + "/a"}, zktest.AfterWrite)
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: root + "/a"}, zktest.LoseReply)
	for range 2 {
		_, _, err = conn.Get(root + "/a")
		require.ErrorIs(t, err, zk.ErrConnectionClosed)
	}
	_, _, err = conn.Get(root + "/a")
	require.NoError(t, err)
	require.Equal(t, 2, d.Fired())
	requireSurvived(t, s)
}

// Hold sends a request after a later one: here a read goes after a write
// the client sent after it, and sees the write.
func TestDropperFaultHold(t *testing.T) {
	d, s, conn, p := dropperNode(t, "h", []byte("old"))
	d.Hold(zktest.Match{Op: zktest.OpGetData, Path: p}, zktest.Match{Op: zktest.OpSetData, Path: p})
	read := make(chan string, 1)
	go func() {
		data, _, err := conn.Get(p)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(data)
	}()
	// The read is held back once the Hold is used up.
	require.Eventually(t, func() bool { return d.Armed() == 0 }, 10*time.Second, time.Millisecond)
	_, err := conn.Set(p, []byte("new"), -1)
	require.NoError(t, err)
	require.Equal(t, "new", <-read, "the held read went after the write")
	require.Equal(t, 1, d.Fired())
	requireSurvived(t, s)
}

// A Hold whose until request was written before the one it holds: the
// order is as asked already, and the held request goes at once, fired.
func TestDropperFaultHoldPassed(t *testing.T) {
	d, s, conn, p := dropperNode(t, "h", []byte("old"))
	d.Hold(zktest.Match{Op: zktest.OpGetData, Path: p}, zktest.Match{Op: zktest.OpSetData, Path: p})
	_, err := conn.Set(p, []byte("new"), -1)
	require.NoError(t, err)
	data, _, err := conn.Get(p)
	require.NoError(t, err)
	require.Equal(t, "new", string(data))
	require.Equal(t, 0, d.Armed(), "the Hold was used")
	require.Equal(t, 1, d.Fired(), "sent after its until request, not after the limit")
	requireSurvived(t, s)
}

// HoldFor's limit: when the request it waits for never comes, the held one
// goes after the limit, and the Hold does not count as fired.
func TestDropperFaultHoldFor(t *testing.T) {
	d, s, conn, p := dropperNode(t, "h", []byte("data"))
	const limit = 100 * time.Millisecond
	d.HoldFor(zktest.Match{Op: zktest.OpGetData, Path: p}, zktest.Match{Op: zktest.OpSetData, Path: p}, limit)
	began := time.Now()
	data, _, err := conn.Get(p)
	took := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, "data", string(data))
	require.GreaterOrEqual(t, took, limit, "the read was held back")
	require.Less(t, took, zktest.HoldLimit, "the read went after its own limit")
	require.Equal(t, 0, d.Armed(), "the Hold was used")
	require.Equal(t, 0, d.Fired(), "a Hold whose limit ran out did not fire")
	requireSurvived(t, s)
}
