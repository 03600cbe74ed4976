package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
)

// sessionTimeout is asked for by every session, Go's, Curator's and kazoo's.
const sessionTimeout = 10 * time.Second

// Bench is one benchmark run: an admin connection, a root node that holds
// every round's queue, and the peers' programs.
type Bench struct {
	servers []string
	admin   *zk.Conn
	root    string
	paths   int
	peers   *peers // prepared on first use

	// KazooPoll is how long a kazoo.Queue consumer sleeps when get finds
	// the queue empty (kazoo's Queue has no blocking get).
	KazooPoll time.Duration
}

// New connects to the servers and creates the run's root node.
func New(ctx context.Context, servers []string) (*Bench, error) {
	admin, err := connect(ctx, servers)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	b := &Bench{servers: servers, admin: admin, root: "/zkrecipes-queuebench-" + hex.EncodeToString(id[:]),
		KazooPoll: 2 * time.Millisecond}
	if _, err := admin.Create(b.root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		admin.Close()
		return nil, fmt.Errorf("create %s: %w", b.root, err)
	}
	return b, nil
}

// Close deletes everything the run created, closes the admin connection and
// removes the peers' programs.
func (b *Bench) Close() error {
	defer b.admin.Close()
	var err error
	if b.peers != nil {
		err = os.RemoveAll(b.peers.dir)
	}
	return errors.Join(deleteTree(b.admin, b.root), err)
}

// newPath names a fresh queue path for one round.
func (b *Bench) newPath(what string) string {
	b.paths++
	return fmt.Sprintf("%s/%d-%s", b.root, b.paths, what)
}

// connect opens a go-zookeeper connection and waits for its session.
func connect(ctx context.Context, servers []string) (*zk.Conn, error) {
	c, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(discard{}), zk.WithLogInfo(false))
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
