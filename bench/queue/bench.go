package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/bench"
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
	admin, err := bench.Connect(ctx, servers, sessionTimeout)
	if err != nil {
		return nil, err
	}
	root, err := bench.CreateRoot(admin, "/zkrecipes-queuebench-")
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &Bench{servers: servers, admin: admin, root: root, KazooPoll: 2 * time.Millisecond}, nil
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
