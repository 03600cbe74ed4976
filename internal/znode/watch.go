package znode

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
)

// Watch is a one-shot getData watch on one node: the herd-free wait, where
// each waiter watches the one node whose change concerns it. getData, not
// exists: an exists watch on a node that is already gone stays behind as a
// creation watch.
//
// go-zookeeper re-registers watches when it reconnects, so a Watch lives
// through the disconnects its session survives; but a watch re-registered
// so may miss a change made while the client was away, and whoever waits
// on one reads again after a reconnect (see session.NextReconnect). It has
// no removeWatches: a
// Watch given up on stays registered on the server until the node next
// changes, then fires into a buffered channel and is gone.
type Watch struct {
	Path string
	Node                 // the node's data and Stat when the watch was set
	Ev   <-chan zk.Event // nil when the node was already gone
}

// Gone reports whether the node was already gone when the watch was set.
func (w *Watch) Gone() bool { return w.Ev == nil }

// WatchNode sets a Watch on path, asking again across disconnects. A node
// that is already gone gives a Watch with a nil Ev.
func WatchNode(ctx context.Context, s *session.Session, path string) (*Watch, error) {
	w, err := Retry(ctx, s, func() (*Watch, error) {
		d, st, ev, err := s.Conn().GetW(path)
		return &Watch{Path: path, Node: Node{d, st}, Ev: ev}, err
	})
	switch {
	case err == nil:
		return w, nil
	case errors.Is(err, zk.ErrNoNode):
		return &Watch{Path: path}, nil
	default:
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
}

// Dropped reports whether ev says the client dropped the watch, which it
// does only when its session is over (or it is closed): the watch says
// nothing of the node then.
func Dropped(ev zk.Event) bool { return ev.Type == zk.EventNotWatching || ev.Err != nil }
