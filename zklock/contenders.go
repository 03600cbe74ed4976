package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Contender is one node in a lock's, semaphore's or election's line.
type Contender struct {
	Path      string
	Data      []byte
	SessionID int64 // the node's ephemeralOwner
	Token     int64 // the node's Czxid
	// Holds: the recipe's own rule, the one its waiters follow, grants
	// this contender the lock (a permit, the leadership) in the line as it
	// was read. It holds, or is about to learn that it does; a contender
	// whose node was just deleted may still be listed, for a moment, by a
	// reader that read it first.
	Holds bool
	// Cached: a CachedMutex's node. Holding, it may be idle between
	// critical sections, kept for the next one; it lets go as soon as
	// anyone joins the line.
	Cached bool
}

// contenders lists the line of kind's family in dir, in order, with whether
// rule says each holds (see judge).
func contenders(ctx context.Context, s *session.Session, dir string, kind line.Kind, rule func(line.Node) line.Rule) ([]Contender, error) {
	cs, l, err := readLine(ctx, s, dir, kind)
	if err != nil {
		return nil, err
	}
	judge(cs, l, rule)
	return cs, nil
}

// readLine lists the line of kind's family in dir, in order, reading every
// node in one round trip, and returns the contenders with their nodes. Nodes
// that go away meanwhile are left out.
func readLine(ctx context.Context, s *session.Session, dir string, kind line.Kind) ([]Contender, []line.Node, error) {
	children, err := znode.Children(ctx, s, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("zklock: %w", err)
	}
	l, _ := line.Parse(children, kind)
	nodes := make([]znode.Node, len(l))
	errs := make([]error, len(l))
	var wg sync.WaitGroup
	for i, c := range l {
		wg.Go(func() { nodes[i], errs[i] = znode.Get(ctx, s, dir+"/"+c.Name) })
	}
	wg.Wait()
	out := make([]Contender, 0, len(l))
	read := make([]line.Node, 0, len(l))
	for i, c := range l {
		switch {
		case errors.Is(errs[i], zk.ErrNoNode):
			continue
		case errs[i] != nil:
			return nil, nil, fmt.Errorf("zklock: read %s/%s: %w", dir, c.Name, errs[i])
		}
		st := nodes[i].Stat
		out = append(out, Contender{Path: dir + "/" + c.Name, Data: nodes[i].Data, SessionID: st.EphemeralOwner, Token: st.Czxid,
			Cached: c.Ours() && strings.Contains(c.Name, cachedMarker)})
		read = append(read, c)
	}
	return out, read, nil
}

// judge sets each contender's Holds to what rule's Rule for its node
// decides, asked about l, the line of the nodes that were still there when
// read: nodes ahead of a contender can only go away, never come, so that
// line is later, and truer, than the listing.
func judge(cs []Contender, l []line.Node, rule func(line.Node) line.Rule) {
	for i, n := range l {
		cs[i].Holds = rule(n)(l, i).Hold
	}
}

// lockRule is the rule of a node of a lock's family: a reader's is shared,
// every other's (ours, Curator's, kazoo's, go-zookeeper's) exclusive.
func lockRule(n line.Node) line.Rule {
	if n.Kind == line.Shared {
		return shared
	}
	return exclusive
}

// lockSpec is the line of one of the lock recipes.
func (o options) lockSpec(kind line.Kind, marker string, rule line.Rule, recipe, span string) *line.Spec {
	return &line.Spec{
		Dir: o.dir, Kind: kind, Marker: marker, Data: o.data, ACL: o.acl, Rule: rule,
		ListWithCreate: true,
		Busy:           ErrLocked, Lost: ErrLockLost, Mixed: ErrPathInUse,
		Recipe: recipe, Span: span, Names: errorName,
	}
}
