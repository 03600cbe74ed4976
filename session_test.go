package zkrecipes_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
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

// A Connect that could not reach any server says why when its context
// ends: here nothing listens, and the dial's error is kept.
func TestConnectNamesLatestFailure(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:1"}) // nothing listens on port 1
	t.Log(err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Contains(t, err.Error(), "latest attempt: dial tcp 127.0.0.1:1: connect: connection refused")
}
