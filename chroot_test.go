package zkrecipes_test

// A Session in a chroot: every path the recipes and Conn use is under it,
// on the server, and comes back without it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// chrootTag is a name no other test uses, for a chroot and the paths in it.
func chrootTag(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	return "chroot-" + hex.EncodeToString(b[:])
}

// makeChroot creates the node /tag for a chroot, and removes it with
// everything under it when the test ends (after the sessions in it are
// closed: cleanups run last first).
func makeChroot(t *testing.T, admin *zkrecipes.Session, tag string) string {
	t.Helper()
	root := "/" + tag
	_, err := admin.Conn().Create(root, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	t.Cleanup(func() { deleteTree(t, admin.Conn(), root) })
	return root
}

// deleteTree deletes p and everything under it.
func deleteTree(t *testing.T, conn *zk.Conn, p string) {
	t.Helper()
	children, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	require.NoError(t, err)
	for _, c := range children {
		deleteTree(t, conn, path.Join(p, c))
	}
	if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		require.NoError(t, err)
	}
}

// requireOnlyChroot checks that, of the server's top-level nodes, only the
// chroot's own carries tag: nothing was created outside of it.
func requireOnlyChroot(t *testing.T, admin *zkrecipes.Session, tag string) {
	t.Helper()
	top, _, err := admin.Conn().Children("/")
	require.NoError(t, err)
	var tagged []string
	for _, n := range top {
		if strings.Contains(n, tag) {
			tagged = append(tagged, n)
		}
	}
	require.Equal(t, []string{tag}, tagged, "nothing is created outside the chroot")
}

// The recipes work unchanged in a chroot, given with WithChroot or in
// Java's "host:port/app" form: a Mutex handed from one session to another,
// an Election observed by a third, a fairqueue put to, taken from and
// acked. Their paths are the ones asked for; on the server they are under
// the chroot, and nothing is outside of it.
func TestChrootRecipes(t *testing.T) {
	srv := setup(t)
	for _, form := range []string{"WithChroot", "address"} {
		t.Run(form, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			admin := connect(t, srv.Addrs())
			tag := chrootTag(t)
			root := makeChroot(t, admin, tag)
			open := func() *zkrecipes.Session {
				if form == "WithChroot" {
					return connect(t, srv.Addrs(), zkrecipes.WithChroot(root))
				}
				addrs := srv.Addrs()
				addrs[len(addrs)-1] += root
				return connect(t, []string{strings.Join(addrs, ",")})
			}
			a, b, c := open(), open(), open()

			// A Mutex, handed over.
			lockPath := "/" + tag + "-locks/m"
			ma, err := zklock.NewMutex(a, lockPath)
			require.NoError(t, err)
			mb, err := zklock.NewMutex(b, lockPath)
			require.NoError(t, err)
			la, err := ma.Lock(ctx)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(la.Path(), lockPath+"/"), "the lease's path is the client's: %s", la.Path())
			ok, st, err := admin.Conn().Exists(root + la.Path())
			require.NoError(t, err)
			require.True(t, ok, "the lock's node is under the chroot on the server")
			require.Equal(t, st.Czxid, la.Token(), "the token is the node's Czxid, read from the create's reply")
			got := make(chan *zklock.Lease, 1)
			go func() {
				l, err := mb.Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			require.Eventually(t, func() bool {
				cs, err := ma.Contenders(ctx)
				require.NoError(t, err)
				return len(cs) == 2
			}, 10*time.Second, 5*time.Millisecond)
			require.NoError(t, la.Unlock(ctx))
			lb := <-got
			require.NotNil(t, lb)
			require.Greater(t, lb.Token(), la.Token())
			require.NoError(t, lb.Unlock(ctx))

			// An Election, observed.
			elPath := "/" + tag + "-election"
			ea, err := zklock.NewElection(a, elPath)
			require.NoError(t, err)
			ec, err := zklock.NewElection(c, elPath)
			require.NoError(t, err)
			octx, ocancel := context.WithCancel(ctx)
			leaders := ec.Observe(octx)
			require.Empty(t, (<-leaders).Path, "no leader yet")
			lead, err := ea.Campaign(ctx, []byte("a"))
			require.NoError(t, err)
			l := <-leaders
			require.Equal(t, lead.Path(), l.Path)
			require.Equal(t, "a", string(l.Value))
			require.True(t, strings.HasPrefix(l.Path, elPath+"/"))
			seen, err := ec.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, lead.Path(), seen.Path)
			require.NoError(t, lead.Resign(ctx))
			require.Empty(t, (<-leaders).Path, "no leader after the resignation")
			ocancel()
			for range leaders {
			}

			// A fairqueue: put (one multi), take, ack.
			qPath := "/" + tag + "-queue"
			qa, err := fairqueue.New(a, qPath)
			require.NoError(t, err)
			qb, err := fairqueue.New(b, qPath)
			require.NoError(t, err)
			ids, err := qa.PutMany(ctx, [][]byte{[]byte("one"), []byte("two")})
			require.NoError(t, err)
			require.Len(t, ids, 2)
			for i, want := range []string{"one", "two"} {
				j, err := qb.Take(ctx)
				require.NoError(t, err)
				require.Equal(t, ids[i], j.ID())
				require.Equal(t, want, string(j.Data()))
				require.NoError(t, j.Ack(ctx))
			}

			requireOnlyChroot(t, admin, tag)
			// What the server holds under the chroot: the recipes' paths.
			inRoot, _, err := admin.Conn().Children(root)
			require.NoError(t, err)
			require.Subset(t, inRoot, []string{tag + "-locks", tag + "-election", tag + "-queue"})
		})
	}
}

// What Conn does in a chroot: sequential creates, multis and syncs answer
// with the client's paths, the chroot is the client's "/", and watch
// events name the client's paths.
func TestChrootConn(t *testing.T) {
	srv := setup(t)
	admin := connect(t, srv.Addrs())
	tag := chrootTag(t)
	root := makeChroot(t, admin, tag)
	s := connect(t, srv.Addrs(), zkrecipes.WithChroot(root))
	conn := s.Conn()
	acl := zk.WorldACL(zk.PermAll)

	p, err := conn.Create("/seq-", []byte("x"), zk.FlagSequence, acl)
	require.NoError(t, err)
	require.Regexp(t, `^/seq-\d{10}$`, p)
	data, _, err := admin.Conn().Get(root + p)
	require.NoError(t, err)
	require.Equal(t, "x", string(data))

	res, err := conn.Multi(
		&zk.CreateRequest{Path: "/m", Acl: acl},
		&zk.CreateRequest{Path: "/m/seq-", Acl: acl, Flags: zk.FlagSequence},
		&zk.SetDataRequest{Path: "/m", Data: []byte("y"), Version: -1},
		&zk.CheckVersionRequest{Path: "/m", Version: 1},
		&zk.DeleteRequest{Path: p, Version: -1},
	)
	require.NoError(t, err)
	require.Equal(t, "/m", res[0].String)
	require.Regexp(t, `^/m/seq-\d{10}$`, res[1].String)
	_, err = conn.Multi(&zk.CheckVersionRequest{Path: "/m", Version: 7}, &zk.DeleteRequest{Path: "/m", Version: -1})
	require.ErrorIs(t, err, zk.ErrBadVersion, "a failed multi's results come through")

	synced, err := conn.Sync("/m")
	require.NoError(t, err)
	require.Equal(t, "/m", synced)

	children, _, err := conn.Children("/")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"m"}, children, "the chroot is the client's root")
	ok, _, err := conn.Exists("/")
	require.NoError(t, err)
	require.True(t, ok)

	_, _, dataEv, err := conn.GetW("/m")
	require.NoError(t, err)
	_, _, childEv, err := conn.ChildrenW("/")
	require.NoError(t, err)
	_, _, existEv, err := conn.ExistsW("/later")
	require.NoError(t, err)
	_, err = admin.Conn().Set(root+"/m", []byte("z"), -1)
	require.NoError(t, err)
	_, err = admin.Conn().Create(root+"/later", nil, 0, acl)
	require.NoError(t, err)
	for _, want := range []zk.Event{
		{Type: zk.EventNodeDataChanged, Path: "/m"},
		{Type: zk.EventNodeChildrenChanged, Path: "/"},
		{Type: zk.EventNodeCreated, Path: "/later"},
	} {
		var ev zk.Event
		select {
		case ev = <-map[zk.EventType]<-chan zk.Event{zk.EventNodeDataChanged: dataEv, zk.EventNodeChildrenChanged: childEv, zk.EventNodeCreated: existEv}[want.Type]:
		case <-time.After(20 * time.Second):
			t.Fatalf("no %v event", want.Type)
		}
		require.Equal(t, want.Type, ev.Type)
		require.Equal(t, want.Path, ev.Path)
	}
	requireOnlyChroot(t, admin, tag)
}

// The watches go-zookeeper re-sets after a reconnect are the chroot's: one
// on "/w" stays set on the server's /chroot/w and fires once that changes,
// with the client's path (re-set outside the chroot, it would fire at once
// for a node that does not exist there, or never).
func TestChrootWatchesResetAfterReconnect(t *testing.T) {
	srv := setup(t)
	admin := connect(t, srv.Addrs())
	tag := chrootTag(t)
	root := makeChroot(t, admin, tag)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs(), zkrecipes.WithChroot(root))
	_, err := s.Conn().Create("/w", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	d.Arm(zktest.Match{Op: zktest.OpGetData, Path: root + "/w", Watch: true}, zktest.AfterReply)
	_, _, ev, err := s.Conn().GetW("/w")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return d.Fired() == 1 }, 10*time.Second, 2*time.Millisecond)
	// Reconnected, with the watch re-set: a read after it answers. (One
	// sent as the old connection closed fails with ErrConnectionClosed.)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		_, _, err = s.Conn().Get("/w")
		if !errors.Is(err, zk.ErrConnectionClosed) || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "a read after the reconnect")
	select {
	case e := <-ev:
		t.Fatalf("the re-set watch fired with nothing changed: %+v", e)
	default:
	}
	_, err = admin.Conn().Set(root+"/w", []byte("changed"), -1)
	require.NoError(t, err)
	select {
	case e := <-ev:
		require.Equal(t, zk.EventNodeDataChanged, e.Type)
		require.Equal(t, "/w", e.Path)
	case <-time.After(20 * time.Second):
		t.Fatal("the re-set watch never fired")
	}
	requireOnlyChroot(t, admin, tag)
}

// A chroot that does not exist: Connect succeeds (as the Java client's),
// and every request fails with NoNode; a recipe creates nothing, in the
// chroot or outside of it.
func TestChrootMissing(t *testing.T) {
	srv := setup(t)
	admin := connect(t, srv.Addrs())
	tag := chrootTag(t)
	s := connect(t, srv.Addrs(), zkrecipes.WithChroot("/"+tag+"/app"))
	_, err := s.Conn().Create("/x", nil, 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoNode)
	m, err := zklock.NewMutex(s, "/"+tag+"-locks/m")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, zk.ErrNoNode)
	top, _, err := admin.Conn().Children("/")
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(top, func(n string) bool { return strings.Contains(n, tag) }), "nothing created: %v", top)
}
