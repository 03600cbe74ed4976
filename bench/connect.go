package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
)

// Connect opens a go-zookeeper connection and waits for its session, as
// zkrecipes.Connect does, so that no round starts before its sessions
// exist. go-zookeeper's own logging is silenced: it would drown the tables.
func Connect(ctx context.Context, servers []string, sessionTimeout time.Duration) (*zk.Conn, error) {
	return ConnectDial(ctx, servers, sessionTimeout, net.DialTimeout)
}

// ConnectDial is Connect through dial.
func ConnectDial(ctx context.Context, servers []string, sessionTimeout time.Duration, dial zk.Dialer) (*zk.Conn, error) {
	c, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(discard{}), zk.WithLogInfo(false), zk.WithDialer(dial))
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-tick.C:
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("connect to %v: %w", servers, context.Cause(ctx))
		}
	}
	return c, nil
}

type discard struct{}

func (discard) Printf(string, ...any) {}
