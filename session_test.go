package zkrecipes_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// The Session uses the timeout the server granted, not the one asked for:
// a loss timer based on the request could fire after the server's expiry.
func TestSessionUsesNegotiatedTimeout(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(500*time.Millisecond))
	// zktest servers allow 1s to 60s.
	require.Equal(t, time.Second, s.Timeout())
	require.NotZero(t, s.ID())
	require.Equal(t, s.ID(), s.Conn().SessionID())
}

func TestConnectHonoursContext(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Nothing listens on port 1.
	_, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A brief outage, shorter than the session timeout, is not an end: the
// Session reconnects to the same session and keeps going.
func TestSessionSurvivesServerRestart(t *testing.T) {
	setup(t)
	srv := zktest.StartPrivate(t)
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(20*time.Second))
	id := s.ID()
	_, err := s.Conn().Create("/survivor", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	srv.Stop()
	srv.Restart()
	require.Eventually(t, s.Connected, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, s.Err())
	require.Equal(t, id, s.Conn().SessionID())
	ok, _, err := s.Conn().Exists("/survivor")
	require.NoError(t, err)
	require.True(t, ok, "the session's ephemeral node survived")
	select {
	case <-s.Done():
		t.Fatal("session ended on a short outage")
	default:
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Err(), zkrecipes.ErrClosed)
	require.NoError(t, s.Close(), "Close is idempotent")
	other := connect(t, srv.Addrs())
	ok, _, err = other.Conn().Exists("/survivor")
	require.NoError(t, err)
	require.False(t, ok, "Close deletes the session's ephemeral nodes")
}
