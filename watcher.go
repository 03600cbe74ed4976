package zkrecipes

import (
	"context"
	"fmt"
	"iter"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/nodewatch"
)

// NodeState is one state of a watched node.
type NodeState struct {
	// Exists is false while there is no node at the path; the other
	// fields are then zero.
	Exists bool
	Data   []byte
	Stat   zk.Stat
	// Children are the node's children's names, sorted; only with
	// WithChildren.
	Children []string
}

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	children bool
}

// WithChildren makes Watch follow the node's children too: each state has
// the list of them, and a child made or deleted is a new state.
func WithChildren() WatchOption {
	return func(o *watchOptions) { o.children = true }
}

// Watch follows the node at path, as Curator's NodeCache and kazoo's
// DataWatch do: it yields the node's state now (Exists false if there is
// no node), then every state the node settles in, in order, until ctx ends.
//
// What it guarantees:
//
//   - The last state is never missed: once the node stops changing, the
//     latest state Watch yielded is the node's. Changes in quick
//     succession may be yielded as one, their last.
//   - Never an older state after a newer one: states are compared by the
//     node's Czxid (its creation), Mzxid (its latest data write) and, with
//     WithChildren, Pzxid (its latest child change), and a state that is
//     not newer than the last one yielded is not yielded. A node deleted
//     and made again is yielded gone (if Watch saw it so), then back, with
//     its new Czxid.
//   - Disconnects that the session survives (a server restart, a leader
//     election) are ridden out, and after each reconnect the node is read
//     again rather than trusting the watches the client re-set, which can
//     miss what changed while it was away.
//   - One watch per node: a data watch while it exists, an exists watch
//     while it does not, and, WithChildren, a child watch. A watch is set
//     again only once it has fired or the client has reconnected.
//   - With WithChildren, each state is one moment of the node: its data
//     and its children as they were together.
//
// The loop's body runs on the caller's goroutine, and Watch reads nothing
// meanwhile: a slow reader sees fewer, later states, never stale ones. A
// change of the node's ACL alone is not a new state.
//
// The iteration ends when ctx ends, with no error, or with an error, the
// last value it yields: the session is over (the error wraps the Session's
// Err), the node cannot be read (zk.ErrNoAuth), or bad input
// (ErrInvalidPath, ErrInvalidArgument). Leaving the loop early leaves the
// node's watches on the server until they next fire (go-zookeeper has no
// way to remove one).
func Watch(ctx context.Context, s *Session, path string, opts ...WatchOption) iter.Seq2[NodeState, error] {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(NodeState, error) bool) {
		if s == nil {
			yield(NodeState{}, fmt.Errorf("zkrecipes: watch %s: %w: nil Session", path, ErrInvalidArgument))
			return
		}
		if err := validateNodePath(path); err != nil {
			yield(NodeState{}, fmt.Errorf("zkrecipes: watch: %w", err))
			return
		}
		f := nodewatch.Follow{Data: true, Children: o.children}
		for st, err := range nodewatch.Node(ctx, s.inner(), path, f) {
			if err != nil {
				yield(NodeState{}, fmt.Errorf("zkrecipes: watch %s: %w", path, err))
				return
			}
			if !yield(NodeState(st), nil) {
				return
			}
		}
	}
}
