package zkrecipes

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
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
		if err := znode.ValidateNodePath(path); err != nil {
			yield(NodeState{}, fmt.Errorf("zkrecipes: watch: %w", err))
			return
		}
		w := &nodeWatch{s: s.s, path: path, children: o.children}
		w.run(ctx, yield)
	}
}

// nodeWatch is the state of one Watch.
type nodeWatch struct {
	s        *session.Session
	path     string
	children bool

	dataEv  <-chan zk.Event // the data or exists watch set; nil when none is trusted
	childEv <-chan zk.Event // the child watch set; nil when none is trusted

	yielded  bool
	last     NodeState
	lastBorn int64 // the Czxid of the latest node yielded
}

func (w *nodeWatch) run(ctx context.Context, yield func(NodeState, error) bool) {
	for {
		gen := w.s.NextReconnect() // before the reads: see session.NextReconnect
		st, settled, err := w.read(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			yield(NodeState{}, fmt.Errorf("zkrecipes: watch %s: %w", w.path, err))
			return
		case !settled:
			continue // it changed between the reads: read again
		}
		if w.newer(st) {
			w.yielded, w.last = true, st
			if st.Exists {
				w.lastBorn = st.Stat.Czxid
			}
			if !yield(st, nil) {
				return
			}
		}
		var ev zk.Event
		select {
		case ev = <-w.dataEv:
			w.dataEv = nil
		case ev = <-w.childEv:
			w.childEv = nil
		case <-gen:
			// The watches re-set on the new connection may have missed a
			// change: read again, setting them afresh.
			w.dataEv, w.childEv = nil, nil
			continue
		case <-w.s.Done():
			w.ended(ctx, yield)
			return
		case <-ctx.Done():
			return
		}
		if znode.Dropped(ev) {
			// The client drops its watches only when the session is over.
			w.ended(ctx, yield)
			return
		}
	}
}

// ended yields the end of the session.
func (w *nodeWatch) ended(ctx context.Context, yield func(NodeState, error) bool) {
	select {
	case <-w.s.Done():
		yield(NodeState{}, fmt.Errorf("zkrecipes: watch %s: %w", w.path, w.s.Err()))
	case <-ctx.Done():
	}
}

// read reads the node, setting the watches that are not set. settled is
// false when the node changed between the read of its data and that of
// its children.
func (w *nodeWatch) read(ctx context.Context) (st NodeState, settled bool, err error) {
	conn := w.s.Conn()
	type got struct {
		data  []byte
		stat  *zk.Stat
		found bool
		ev    <-chan zk.Event
	}
	for {
		watch := w.dataEv == nil
		g, err := znode.Retry(ctx, w.s, func() (got, error) {
			if watch {
				d, s, ev, err := conn.GetW(w.path)
				return got{d, s, true, ev}, err
			}
			d, s, err := conn.Get(w.path)
			return got{data: d, stat: s, found: true}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			if !watch {
				// The pending watch tells of what comes next: a data watch
				// has the deletion, an exists watch the creation.
				return NodeState{}, true, nil
			}
			g, err = znode.Retry(ctx, w.s, func() (got, error) {
				found, s, ev, err := conn.ExistsW(w.path)
				return got{stat: s, found: found, ev: ev}, err
			})
			if err != nil {
				return NodeState{}, false, err
			}
			w.dataEv = g.ev // an exists watch, or a data watch if it came meanwhile
			if !g.found {
				return NodeState{}, true, nil
			}
			continue // made meanwhile: read its data
		}
		if err != nil {
			return NodeState{}, false, err
		}
		if watch {
			w.dataEv = g.ev
		}
		st = NodeState{Exists: true, Data: g.data, Stat: *g.stat}
		break
	}
	if !w.children {
		return st, true, nil
	}
	type list struct {
		names []string
		stat  *zk.Stat
		ev    <-chan zk.Event
	}
	watch := w.childEv == nil
	l, err := znode.Retry(ctx, w.s, func() (list, error) {
		if watch {
			names, s, ev, err := conn.ChildrenW(w.path)
			return list{names, s, ev}, err
		}
		names, s, err := conn.Children(w.path)
		return list{names: names, stat: s}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return NodeState{}, false, nil // deleted since its data was read
	}
	if err != nil {
		return NodeState{}, false, err
	}
	if watch {
		w.childEv = l.ev
	}
	// Both reads return the node's Stat: the same one says nothing changed
	// between them.
	if s := l.stat; s.Czxid != st.Stat.Czxid || s.Mzxid != st.Stat.Mzxid || s.Pzxid != st.Stat.Pzxid {
		return NodeState{}, false, nil
	}
	st.Children = slices.Sorted(slices.Values(l.names))
	return st, true, nil
}

// newer reports whether st is a newer state of the node than the last one
// yielded: reads across reconnects never go back in time (a server behind
// the client's last zxid refuses it), and this makes sure of it.
func (w *nodeWatch) newer(st NodeState) bool {
	last := w.last
	switch {
	case !w.yielded:
		return true
	case !st.Exists:
		return last.Exists
	case st.Stat.Czxid != w.lastBorn || !last.Exists:
		return st.Stat.Czxid > w.lastBorn
	}
	m, p := st.Stat.Mzxid, st.Stat.Pzxid
	lm, lp := last.Stat.Mzxid, last.Stat.Pzxid
	if !w.children {
		return m > lm
	}
	return m >= lm && p >= lp && (m > lm || p > lp)
}
