// Package nodewatch follows one node: every state it settles in, in
// order, read again after every reconnect. The root package's Watch is its
// public face (see there for what it guarantees); Election.Observe uses it
// for a directory's children alone.
package nodewatch

import (
	"context"
	"errors"
	"iter"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// State is one state of a watched node: the root package's NodeState.
type State struct {
	Exists   bool
	Data     []byte
	Stat     zk.Stat
	Children []string
}

// Follow is what to follow of the node.
type Follow struct {
	Data     bool // its data (a data watch)
	Children bool // its children (a child watch)
	// Once: the node is never made again once gone (an ephemeral
	// sequential node, whose name is not reused), so its absence is
	// final. No exists watch is set for a creation that cannot come: it
	// would stay registered, on the server and in the client (which re-sends
	// it on every reconnect), until the session ends.
	Once bool
}

// Node follows the node at path, which the caller has checked, until ctx
// ends. Errors it yields are the last value, unwrapped.
func Node(ctx context.Context, s *session.Session, path string, f Follow) iter.Seq2[State, error] {
	return func(yield func(State, error) bool) {
		w := &nodeWatch{s: s, path: path, data: f.Data, children: f.Children, once: f.Once}
		w.run(ctx, yield)
	}
}

// nodeWatch is the state of one Watch.
type nodeWatch struct {
	s        *session.Session
	path     string
	data     bool
	children bool
	once     bool // Follow.Once

	dataEv  <-chan zk.Event // the data or exists watch set; nil when none is trusted
	childEv <-chan zk.Event // the child watch set; nil when none is trusted

	yielded  bool
	last     State
	lastBorn int64 // the Czxid of the latest node yielded
}

func (w *nodeWatch) run(ctx context.Context, yield func(State, error) bool) {
	for {
		gen := w.s.NextReconnect() // before the reads: see session.NextReconnect
		st, settled, err := w.read(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			yield(State{}, err)
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
func (w *nodeWatch) ended(ctx context.Context, yield func(State, error) bool) {
	select {
	case <-w.s.Done():
		yield(State{}, w.s.Err())
	case <-ctx.Done():
	}
}

// read reads the node, setting the watches that are not set. settled is
// false when the node changed between the read of its data and that of
// its children.
func (w *nodeWatch) read(ctx context.Context) (st State, settled bool, err error) {
	for {
		var found bool
		if w.data {
			st, found, err = w.readData(ctx)
		} else {
			st, found, err = w.readChildren(ctx)
		}
		switch {
		case err != nil:
			return State{}, false, err
		case !found:
			again, err := w.absent(ctx)
			if err != nil || again {
				if err != nil {
					return State{}, false, err
				}
				continue // made meanwhile: read it
			}
			return State{}, true, nil
		}
		break
	}
	if !w.data || !w.children {
		return st, true, nil
	}
	kids, found, err := w.readChildren(ctx)
	if err != nil {
		return State{}, false, err
	}
	// Both reads return the node's Stat: the same one says nothing changed
	// between them (not found: it was deleted since).
	if s := kids.Stat; !found || s.Czxid != st.Stat.Czxid || s.Mzxid != st.Stat.Mzxid || s.Pzxid != st.Stat.Pzxid {
		return State{}, false, nil
	}
	st.Children = kids.Children
	return st, true, nil
}

// readData reads the node's data, with a data watch unless one is set.
func (w *nodeWatch) readData(ctx context.Context) (State, bool, error) {
	type got struct {
		data []byte
		stat *zk.Stat
		ev   <-chan zk.Event
	}
	conn, watch := w.s.Conn(), w.dataEv == nil
	g, err := znode.Retry(ctx, w.s, func() (got, error) {
		if watch {
			d, s, ev, err := conn.GetW(w.path)
			return got{d, s, ev}, err
		}
		d, s, err := conn.Get(w.path)
		return got{data: d, stat: s}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	if watch {
		w.dataEv = g.ev
	}
	return State{Exists: true, Data: g.data, Stat: *g.stat}, true, nil
}

// readChildren lists the node's children, sorted, with a child watch
// unless one is set.
func (w *nodeWatch) readChildren(ctx context.Context) (State, bool, error) {
	type list struct {
		names []string
		stat  *zk.Stat
		ev    <-chan zk.Event
	}
	conn, watch := w.s.Conn(), w.childEv == nil
	l, err := znode.Retry(ctx, w.s, func() (list, error) {
		if watch {
			names, s, ev, err := conn.ChildrenW(w.path)
			return list{names, s, ev}, err
		}
		names, s, err := conn.Children(w.path)
		return list{names: names, stat: s}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	if watch {
		w.childEv = l.ev
	}
	return State{Exists: true, Stat: *l.stat, Children: slices.Sorted(slices.Values(l.names))}, true, nil
}

// absent follows a node found gone: an exists watch tells of its creation,
// unless a watch is set already (a data watch set while it was there tells
// of its deletion, an exists watch of its creation), or the node is never
// made again (Follow.Once). again: the node was made meanwhile, and is to
// be read again.
func (w *nodeWatch) absent(ctx context.Context) (again bool, err error) {
	if w.dataEv != nil || w.once {
		return false, nil
	}
	type got struct {
		found bool
		ev    <-chan zk.Event
	}
	conn := w.s.Conn()
	g, err := znode.Retry(ctx, w.s, func() (got, error) {
		found, _, ev, err := conn.ExistsW(w.path)
		return got{found, ev}, err
	})
	if err != nil {
		return false, err
	}
	w.dataEv = g.ev // an exists watch, or a data watch if it came meanwhile
	return g.found, nil
}

// newer reports whether st is a newer state of the node than the last one
// yielded: reads across reconnects never go back in time (a server behind
// the client's last zxid refuses it), and this makes sure of it.
func (w *nodeWatch) newer(st State) bool {
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
	switch {
	case !w.children:
		return m > lm
	case !w.data:
		return p > lp
	}
	return m >= lm && p >= lp && (m > lm || p > lp)
}
