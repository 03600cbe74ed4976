package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Contender is one node in a lock's line.
type Contender struct {
	Path      string
	Data      []byte
	SessionID int64 // the node's ephemeralOwner
	Token     int64 // the node's Czxid
}

// contenders lists the line of kind's family in dir, in order, reading every
// node in one round trip. Nodes that go away meanwhile are left out.
func contenders(ctx context.Context, s *session.Session, dir string, kind line.Kind) ([]Contender, error) {
	children, err := znode.Children(ctx, s, dir)
	if err != nil {
		return nil, fmt.Errorf("zklock: %w", err)
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
	for i, c := range l {
		switch {
		case errors.Is(errs[i], zk.ErrNoNode):
			continue
		case errs[i] != nil:
			return nil, fmt.Errorf("zklock: read %s/%s: %w", dir, c.Name, errs[i])
		}
		st := nodes[i].Stat
		out = append(out, Contender{Path: dir + "/" + c.Name, Data: nodes[i].Data, SessionID: st.EphemeralOwner, Token: st.Czxid})
	}
	return out, nil
}

// lockSpec is the line of one of the lock recipes.
func (o options) lockSpec(kind line.Kind, marker string, rule line.Rule, recipe, span string) *line.Spec {
	return &line.Spec{
		Dir: o.dir, Kind: kind, Marker: marker, Data: o.data, ACL: o.acl, Rule: rule,
		ListWithCreate: true,
		Busy:           ErrLocked, Lost: ErrLockLost, Mixed: ErrPathInUse,
		Recipe: recipe, Span: span,
	}
}
