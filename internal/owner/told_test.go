package owner

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/zktest"
)

func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

// An owner is one of its session's holdings: a session given up closes
// itself (its nodes then go at once) only once the owner has told its
// user, by closing Lost (or once its wait for that lapses, when the
// ensemble could have expired the session anyway). Here the owner's
// goroutine starts only after the session was given up and its connection
// let through again: until then the node stays; then the owner tells, and
// the node goes at once, before that wait would have lapsed.
func TestOwnerToldBeforeItsSessionCloses(t *testing.T) {
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	var net zktest.Freezer
	s := zktest.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(5*time.Second), zkrecipes.WithDialer(net.Dial))
	other := zktest.Connect(t, srv.Addrs())
	path := "/owner-told-" + t.Name()
	_, err := s.Conn().Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	o := newOwner(Config{Session: session.Of(s), Path: path,
		Lost: errors.New("lost"), Released: errors.New("released"), Settled: errors.New("settled")})

	net.Stall()
	select {
	case <-s.Done():
	case <-time.After(4 * s.Timeout()):
		net.Thaw()
		t.Fatal("the session was not given up")
	}
	lossAt := time.Now()
	_, expiry := session.Of(s).Remaining()
	net.Thaw() // a close sent meanwhile lands now
	time.Sleep(min(100*time.Millisecond, expiry/2))
	there, _, err := other.Conn().Exists(path)
	require.NoError(t, err)
	require.True(t, there, "the session closed, its node gone, before its owner told the loss")

	go o.run()
	select {
	case <-o.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss never told")
	}
	require.Eventually(t, func() bool {
		there, _, err := other.Conn().Exists(path)
		return err == nil && !there
	}, time.Until(lossAt.Add(expiry)), 5*time.Millisecond, "the node did not go once the owner told (the session's wait lapses %v after the loss)", expiry)
	<-o.Done()
}
