package fairqueue

import (
	"context"

	"github.com/zkrecipes/zkrecipes/internal/line"
)

// The consumers' line is a line of the shared engine (internal/line), like
// a Mutex's: each waiting consumer has an EPHEMERAL|SEQUENCE node
// "_zkr_<guid>-take-<seq>" in line/, watches only the node just ahead of it,
// and looks at the items only once it is first. The engine finds our node
// again after a create whose reply was lost, and cleans up after a create
// abandoned mid-flight.

// head is the line's rule: the first consumer looks at the items; the
// others wait for the one just ahead. A consumer leaves the line by
// deleting its node (with its claim, or on giving up), never with a release
// mark, so only a deletion with no one else ahead means our turn.
func head(_ []line.Node, me int) line.Decision {
	if me == 0 {
		return line.Decision{Hold: true}
	}
	return line.Decision{Watch: []int{me - 1}, GoneHolds: me == 1}
}

// lineSpec is the consumers' line of q.
func (q *Queue) lineSpec() *line.Spec {
	return &line.Spec{
		Dir: q.line, Kind: line.Consumer, Marker: "-take-", Data: []byte{}, ACL: q.acl, Rule: head,
		ListWithCreate: true,
		Busy:           ErrEmpty, Lost: errLineLost, Mixed: errMixed,
	}
}

// awaitTurn puts us at the end of the line and returns once we are first.
// On error our place is gone (or going, in the background).
func (q *Queue) awaitTurn(ctx context.Context) (*line.Entry, error) {
	e, err := line.Join(ctx, q.s, q.lineSpec())
	if err != nil {
		return nil, err
	}
	if _, err := e.Wait(ctx, true); err != nil {
		e.Leave()
		return nil, err
	}
	return e, nil
}
