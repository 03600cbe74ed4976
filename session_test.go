package zkrecipes_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// The Session uses the timeout the server granted, not the one asked for:
// a loss timer based on the request could fire after the server's expiry.
// The test needs a server whose bounds it knows, so it starts its own
// (ZK_CONNECT's could grant anything).
func TestSessionUsesNegotiatedTimeout(t *testing.T) {
	zktest.CheckGoroutines(t)
	srv := zktest.StartPrivate(t, zktest.WithSessionTimeouts(3*time.Second, 5*time.Second))
	for _, c := range []struct{ asked, granted time.Duration }{
		{500 * time.Millisecond, 3 * time.Second}, // raised to the least
		{4 * time.Second, 4 * time.Second},
		{time.Minute, 5 * time.Second}, // lowered to the most
	} {
		s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(c.asked))
		require.Equal(t, c.granted, s.Timeout(), "asked for %v", c.asked)
		require.NotZero(t, s.ID())
		require.Equal(t, s.ID(), s.Conn().SessionID())
		require.NoError(t, s.Close())
	}
}

func TestConnectHonoursContext(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Nothing listens on port 1.
	_, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A port that answers something other than ZooKeeper's protocol, such as a
// server's HTTP admin port: go-zookeeper reads the first four bytes of the
// answer as the connect response's length and allocates that much ("HTTP"
// is 1.2 GB) on every attempt. The frame is refused before that, and
// Connect says why.
func TestConnectRefusesAPortThatIsNotZooKeeper(t *testing.T) {
	setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Read(make([]byte, 512))
				_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			}()
		}
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = zkrecipes.Connect(ctx, []string{ln.Addr().String()})
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "not a ZooKeeper server")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20),
		"Connect allocated %d MB for a port that answered HTTP", (after.TotalAlloc-before.TotalAlloc)>>20)
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
