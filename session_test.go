package zkrecipes_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := time.Now()
	_, err = zkrecipes.Connect(ctx, []string{ln.Addr().String()})
	runtime.ReadMemStats(&after)
	t.Log(err)
	// No redial makes it ZooKeeper: Connect gives up at once, and says why.
	require.Less(t, time.Since(begin), 10*time.Second)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "server "+ln.Addr().String()+": not a ZooKeeper server")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20),
		"Connect allocated %d MB for a port that answered HTTP", (after.TotalAlloc-before.TotalAlloc)>>20)
}

// A Connect that could not reach any server says, when its context ends,
// what it tried and why each address failed: here nothing listens on one,
// and the other accepts connections and never answers.
func TestConnectNamesEachFailure(t *testing.T) {
	setup(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer silent.Close()
	wg.Go(func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { // read until the client closes it; never answer
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = zkrecipes.Connect(ctx, []string{"127.0.0.1:1", silent.Addr().String()}, // nothing listens on port 1
		zkrecipes.WithSessionTimeout(3*time.Second))
	t.Log(err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorContains(t, err, "dial tcp 127.0.0.1:1: connect: connection refused")
	require.ErrorContains(t, err, "server "+silent.Addr().String()+": no answer to the connect request")
}

// Remaining counts down while no contact is proven: Done is closed once
// lost has passed, and expiry, the earliest moment the ensemble could
// expire the session, is about a fifth of the timeout later.
func TestSessionRemaining(t *testing.T) {
	srv := setup(t)
	var net zktest.Freezer
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(2*time.Second), zkrecipes.WithDialer(net.Dial))
	lost, expiry := s.Remaining()
	require.Positive(t, lost)
	require.LessOrEqual(t, lost, s.Timeout())
	require.InDelta(t, s.Timeout()/5, expiry-lost, float64(s.Timeout()/10), "lost %v, expiry %v", lost, expiry)

	net.Freeze()
	defer net.Thaw()
	lost, expiry = s.Remaining()
	frozen := time.Now()
	select {
	case <-s.Done():
	case <-time.After(2 * s.Timeout()):
		t.Fatal("the session was not given up")
	}
	took := time.Since(frozen)
	require.ErrorIs(t, s.Err(), zkrecipes.ErrSessionLost)
	// Given up no sooner than lost said (but for the monitor's wake-up and
	// a proof that was on its way), and before expiry.
	require.Less(t, took, expiry, "given up %v after the freeze; expiry was %v away", took, expiry)
	require.GreaterOrEqual(t, took, lost-100*time.Millisecond, "given up %v after the freeze; lost was %v away", took, lost)
	after, afterExpiry := s.Remaining()
	require.LessOrEqual(t, after, time.Duration(0), "lost %v once the session is given up", after)
	require.Positive(t, afterExpiry, "expiry counts down from the loss: not reached yet")
}

// A session given up is left to the ensemble to expire, not closed: closing
// it would delete its ephemeral nodes at once, and another client could be
// granted what it held while its leases' holders were still being told.
// The session's connection is stalled until it gives itself up, then let
// through, so that a closeSession sent meanwhile would land: its node must
// stay until the session could expire, and go then.
func TestSessionGivenUpIsLeftToExpire(t *testing.T) {
	srv := setup(t)
	var net zktest.Freezer
	s := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(3*time.Second), zkrecipes.WithDialer(net.Dial))
	other := connect(t, srv.Addrs())
	path := "/given-up-" + t.Name()
	_, err := s.Conn().Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	net.Stall()
	select {
	case <-s.Done():
	case <-time.After(2 * s.Timeout()):
		net.Thaw()
		t.Fatal("the session was not given up")
	}
	require.ErrorIs(t, s.Err(), zkrecipes.ErrSessionLost)
	_, expiry := s.Remaining()
	require.Greater(t, expiry, 200*time.Millisecond, "the session could expire too soon for the test to look")
	net.Thaw()
	time.Sleep(expiry / 2)
	zktest.CatchUp(t, other.Conn(), path)
	there, _, err := other.Conn().Exists(path)
	require.NoError(t, err)
	require.True(t, there, "the node went %v before the session could expire: the session was closed", expiry/2)
	require.Eventually(t, func() bool {
		there, _, err := other.Conn().Exists(path)
		return err == nil && !there
	}, 3*s.Timeout(), 20*time.Millisecond, "the ensemble never expired the session: its node stays")
}
