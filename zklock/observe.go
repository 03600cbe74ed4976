package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/nodewatch"
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
// Each call runs one goroutine, gone once the channel is closed. It follows
// the leader's node as zkrecipes.Watch does (an observer is no contender,
// so it does not wait in line) or, with no leader, the directory's
// children. Once a leader's node has gone, no watch of the observer's is
// left on it.
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
	report := func(l Leader, v int32) {
		if !sent || l.Path != last || v != version {
			sent, last, version = true, l.Path, v
			offer(ch, l)
		}
	}
	for try := 0; ; try++ {
		lead, err := el.awaitLeader(ctx, func() { report(Leader{}, -1) })
		if err == nil {
			// The lowest candidate leads until its node goes: a lower one
			// cannot come (sequence numbers only grow).
			err = el.followLeader(ctx, lead, report)
		}
		if err == nil {
			try = -1
			continue // gone: who leads now?
		}
		if ctx.Err() != nil || el.s.Err() != nil {
			return
		}
		el.s.Log().Warn("zklock: observe: retrying", "path", el.dir, "err", err)
		if !znode.Pause(ctx, el.s, try) {
			return
		}
	}
}

// awaitLeader follows the directory until it has a candidate, and returns
// the candidate's node; none is called each time the directory is found
// without one.
func (el *Election) awaitLeader(ctx context.Context, none func()) (string, error) {
	// Its children only: a data watch on a directory whose data never
	// changes would stay set, one more after each leader.
	for st, err := range nodewatch.Node(ctx, el.s, el.dir, nodewatch.Follow{Children: true}) {
		if err != nil {
			return "", err
		}
		if l, _ := line.Parse(st.Children, line.Candidate); len(l) > 0 {
			return el.dir + "/" + l[0].Name, nil
		}
		none()
	}
	return "", context.Cause(ctx)
}

// followLeader reports the leader at path, and every change of its value,
// until its node goes (nil). A candidate's node, once gone, never comes
// back (its sequential name is not reused): no watch is left on it for a
// creation, or one would be left per leader for the session's life.
func (el *Election) followLeader(ctx context.Context, path string, report func(Leader, int32)) error {
	for st, err := range nodewatch.Node(ctx, el.s, path, nodewatch.Follow{Data: true, Once: true}) {
		if err != nil {
			return err
		}
		if !st.Exists {
			return nil
		}
		report(Leader{Path: path, Value: st.Data, Token: st.Stat.Czxid, SessionID: st.Stat.EphemeralOwner}, st.Stat.Version)
	}
	return context.Cause(ctx)
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
