package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Leader is the contender that leads an election, as read from ZooKeeper.
// Observe reports an election without one as the zero Leader (Path "").
type Leader struct {
	Path      string // its node
	Value     []byte // its node's data: the value of its Campaign or latest Proclaim
	Token     int64  // its term: the node's Czxid
	SessionID int64  // the node's ephemeralOwner
}

// Leader reads who leads: the contender whose node is lowest. It may be one
// that is about to learn it leads, or, briefly, one whose campaign is being
// abandoned. With no contender it returns ErrNoLeader.
func (el *Election) Leader(ctx context.Context) (Leader, error) {
	for {
		children, err := znode.Children(ctx, el.s, el.dir)
		if err != nil {
			return Leader{}, fmt.Errorf("zklock: leader of %s: %w", el.dir, err)
		}
		l, _ := line.Parse(children, line.Candidate)
		if len(l) == 0 {
			return Leader{}, fmt.Errorf("zklock: %s: %w", el.dir, ErrNoLeader)
		}
		p := el.dir + "/" + l[0].Name
		n, err := znode.Get(ctx, el.s, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue // it went between the listing and the read: list again
		}
		if err != nil {
			return Leader{}, fmt.Errorf("zklock: read %s: %w", p, err)
		}
		return Leader{Path: p, Value: n.Data, Token: n.Stat.Czxid, SessionID: n.Stat.EphemeralOwner}, nil
	}
}

// Contenders lists the election's contenders in order: the leader first,
// then the campaigners in the order they would lead. Holds is the
// election's rule: only the lowest node leads, so the first contender's
// Holds is true (it leads, or is about to learn that it does), every other
// one's false. Token is each node's Czxid, a leader's term. Nodes that go
// away while being read are left out.
func (el *Election) Contenders(ctx context.Context) ([]Contender, error) {
	return contenders(ctx, el.s, el.dir, line.Candidate, func(line.Node) line.Rule { return leader })
}

// Observe reports the election's leader: the current one, then every change
// (a new leader, a Proclaim by the current one, or the election left
// without a leader, reported as the zero Leader), in order. The channel
// holds one value: a reader that falls behind skips to the latest rather
// than holding anything up. The channel is closed when ctx ends or the
// session is over; disconnects the session survives are ridden out, and
// after each the leader is read again (a watch re-set on reconnect may have
// missed a change).
//
// Each call runs one goroutine, gone once the channel is closed. It watches
// the leader's node (an observer is no contender, so it does not wait in
// line) or, with no leader, the directory.
func (el *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader, 1)
	if ctx.Err() != nil || el.s.Err() != nil {
		close(ch)
		return ch
	}
	go el.observe(ctx, ch)
	return ch
}

func (el *Election) observe(ctx context.Context, ch chan Leader) {
	defer close(ch)
	var (
		sent    bool
		last    string
		version int32
	)
	for try := 0; ; try++ {
		gen := el.s.NextReconnect() // before the read: see session.NextReconnect
		l, st, ev, err := el.watchLeader(ctx)
		if err != nil {
			if ctx.Err() != nil || el.s.Err() != nil {
				return
			}
			el.s.Log().Warn("zklock: observe: retrying", "path", el.dir, "err", err)
			if !znode.Pause(ctx, el.s, try) {
				return
			}
			continue
		}
		try = -1
		v := int32(-1) // no leader
		if st != nil {
			v = st.Version
		}
		if !sent || l.Path != last || v != version {
			sent, last, version = true, l.Path, v
			offer(ch, l)
		}
		select {
		case e := <-ev:
			if znode.Dropped(e) {
				return
			}
		case <-gen:
			// Read again: the watch may have missed a change.
		case <-el.s.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// offer puts v in ch, replacing a value the reader has not taken. Only one
// goroutine sends on ch, so once emptied it has room.
func offer(ch chan Leader, v Leader) {
	select {
	case ch <- v:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// watchLeader reads the leader and sets a watch that fires when it changes:
// on the leader's node, or, with no leader, on the directory (its children,
// or its creation). st is nil when there is no leader. Connection errors
// are the caller's to retry.
func (el *Election) watchLeader(ctx context.Context) (Leader, *zk.Stat, <-chan zk.Event, error) {
	conn := el.s.Conn()
	type listing struct {
		children []string
		ev       <-chan zk.Event
	}
	list := func(watch bool) (listing, error) {
		return znode.Do(ctx, func() (listing, error) {
			if watch {
				ch, _, ev, err := conn.ChildrenW(el.dir)
				return listing{ch, ev}, err
			}
			ch, _, err := conn.Children(el.dir)
			return listing{children: ch}, err
		})
	}
	for {
		ls, err := list(false)
		if errors.Is(err, zk.ErrNoNode) {
			// No directory yet. An exists watch on a missing node is a
			// creation watch: it stays on the server until the directory is
			// made, which the first Campaign does.
			type exists struct {
				found bool
				ev    <-chan zk.Event
			}
			x, err := znode.Do(ctx, func() (exists, error) {
				found, _, ev, err := conn.ExistsW(el.dir)
				return exists{found, ev}, err
			})
			if err != nil {
				return Leader{}, nil, nil, err
			}
			if x.found {
				continue
			}
			return Leader{}, nil, x.ev, nil
		}
		if err != nil {
			return Leader{}, nil, nil, err
		}
		l, _ := line.Parse(ls.children, line.Candidate)
		if len(l) == 0 {
			// Watch the directory, and list it again with the watch set, so
			// that a campaigner who came in between is not missed.
			ls, err := list(true)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return Leader{}, nil, nil, err
			}
			if l, _ = line.Parse(ls.children, line.Candidate); len(l) == 0 {
				return Leader{}, nil, ls.ev, nil
			}
			// Someone came in: that watch fires later, into a channel no one
			// reads, and is gone.
		}
		w, err := znode.Do(ctx, func() (*znode.Watch, error) {
			p := el.dir + "/" + l[0].Name
			d, st, ev, err := conn.GetW(p)
			return &znode.Watch{Path: p, Node: znode.Node{Data: d, Stat: st}, Ev: ev}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // that leader is gone already: list again
		}
		if err != nil {
			return Leader{}, nil, nil, err
		}
		st := w.Stat
		return Leader{Path: w.Path, Value: w.Data, Token: st.Czxid, SessionID: st.EphemeralOwner}, st, w.Ev, nil
	}
}
