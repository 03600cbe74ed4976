package fairqueue

import (
	"context"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// The consumers' line is for scarcity: a Take that finds no item for it
// stands in line, on the shared engine (internal/line), like a Semaphore's
// contenders: each waiting consumer has an EPHEMERAL|SEQUENCE node
// "_zkr_<guid>-take-<seq>" in line/ and watches one or two nodes ahead of
// it, so a put wakes the first two consumers, not all of them. The engine
// finds our node again after a create whose reply was lost, and cleans up
// after a create abandoned mid-flight.

// active is the line's rule: the first two consumers in line look at the
// items (the first claims at once, the second after a grace, in case the
// first froze or died); the third watches both, a later one the one just
// ahead of it, which announces by writing its node when it becomes one of
// the first two. It is zklock.Semaphore's rule with two permits: live
// whatever order the first two leave in.
func active(_ []line.Node, me int) line.Decision {
	switch {
	case me < 2:
		return line.Decision{Hold: true}
	case me == 2:
		return line.Decision{Watch: []int{0, 1}}
	default:
		return line.Decision{Watch: []int{me - 1}, Written: true}
	}
}

// lineSpec is the consumers' line of q.
func (q *Queue) lineSpec() *line.Spec {
	return &line.Spec{
		Dir: q.line, Kind: line.Consumer, Marker: "-take-", Data: []byte{}, ACL: q.acl, Rule: active,
		ListWithCreate: true,
		Busy:           ErrEmpty, Lost: errLineLost, Mixed: errMixed,
	}
}

// announce tells the consumer behind us, which may be watching us as its
// predecessor, that we became one of the first two: a write of our node
// fires its watch. Only a wake-up: at worst it hears when we leave.
func (q *Queue) announce(ctx context.Context, me string) {
	_, err := znode.Do(ctx, func() (*zk.Stat, error) { return q.s.Conn().Set(me, []byte{}, -1) })
	if err != nil {
		q.log.Debug("fairqueue: announce not confirmed", "node", me, "err", err)
	}
}
