package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
)

// maxHandOut bounds the items one hand-out hands out: its multi carries
// three ops for each item offered (and three or four for each it claims),
// and a multi of a few hundred small ops costs a few times one of 8 (it is
// one transaction, logged and sent as one).
const maxHandOut = 64

// lead hands out items as the head of the line; when there are none, it
// waits for what could bring one.
func (w *waiter) lead(ctx context.Context) ([]*Job, wake, error) {
	for {
		js, idle, err := w.handOut(ctx, nil, w.idle)
		if js != nil || err != nil || idle == nil {
			return js, wake{}, err
		}
		if w.idle {
			wk := w.wait(ctx, idle.watches, idle.next)
			return nil, wk, wk.err
		}
		w.idle = true // look again, leaving watches
	}
}

// handOut is one hand-out by the head of the line (or by the consumer second
// in line, passing over the head, pass). It looks at the queue and, in one
// multi, claims the oldest free items for us (as many as we want) and hands
// the next ones to the consumers waiting behind us, in line order, as many
// as each wants: it writes an offer into each one's node, which its watch
// sees; it then claims the items itself, with its own session, so that the
// claims are ephemeral to the consumer doing the work. The multi also
// proves, by creating and deleting its claim, that no one holds an offered
// item; passes over the nodes whose offers stood too long (their items go
// to others); writes the offers standing back to line/, checked against
// the version read, so that two hand-outs never overlap; and deletes our
// node, checked to be still waiting: a head passed over hands nothing out.
//
// With watch set, its look leaves watches (see Queue.look). It returns our
// Jobs; or the view, when there was nothing to hand out; or neither, when
// the queue or the line changed under us (the caller looks where it stands
// again).
func (w *waiter) handOut(ctx context.Context, pass *standing, watch bool) ([]*Job, *view, error) {
	q := w.q
	v, err := q.look(ctx, w, maxHandOut, watch)
	switch {
	case err != nil:
		return nil, nil, q.ended(ctx, err)
	case len(v.due) > 0:
		return nil, nil, q.promote(ctx, v.due)
	case len(v.free) == 0:
		return nil, v, nil
	}
	// Who gets how many: us first, then the waiting consumers behind us.
	type share struct {
		name string
		want int
	}
	shares := []share{{w.name, wantOf(w.name)}}
	n := shares[0].want
	for _, name := range v.behind {
		if n >= min(len(v.free), maxHandOut) {
			break
		}
		shares = append(shares, share{name, wantOf(name)})
		n += shares[len(shares)-1].want
	}
	items, later, err := q.readFree(ctx, v.free[:min(len(v.free), n, maxHandOut)])
	switch {
	case err != nil:
		return nil, nil, q.ended(ctx, err)
	case len(items) == 0 && !later.IsZero():
		v.next = earliest(v.next, later) // held meanwhile: wait as for nothing to hand out
		return nil, v, nil
	case len(items) == 0:
		return nil, nil, nil // acked or buried meanwhile: look again
	}
	w.idle = false

	// The multi: our claims first (the first one's token settles an
	// unknown outcome), then the offers (the last in line first, so that
	// each consumer's own event comes before the one that tells it the
	// node ahead of it was served), the passes, the offers standing, and
	// our node's delete.
	mine := q.newClaims(items[:min(len(items), shares[0].want)], false)
	items = items[len(mine):]
	ops := q.claimOps(mine)
	size := 0
	for _, c := range mine {
		size += len(c.node.Data)
	}
	var offers []any
	now := time.Now()
	for _, sh := range shares[1:] {
		its := items[:min(len(items), sh.want)]
		if len(its) == 0 {
			break
		}
		// An offer counts its hand-out in the item's data version, as a
		// claim does (so that an item whose offer is left unclaimed comes
		// back with Attempt above 1), and carries the version it set.
		offered := make([]item, len(its))
		for i, it := range its {
			offered[i] = it
			offered[i].node.Stat = &zk.Stat{Version: it.node.Stat.Version + 1}
			size += len(it.node.Data)
		}
		data := encodeOffer(offered)
		if size += len(data); size > zkrecipes.MaxDataSize/2 {
			break // the rest wait for the next hand-out
		}
		items = items[len(its):]
		var theirs []any
		for _, it := range its {
			cp := q.claims + "/" + it.id()
			theirs = append(theirs, &zk.CreateRequest{Path: cp, Data: []byte{}, Acl: q.acl, Flags: zk.FlagEphemeral},
				&zk.DeleteRequest{Path: cp, Version: -1},
				&zk.SetDataRequest{Path: q.itemPath(it.candidate), Data: it.node.Data, Version: it.node.Stat.Version})
			v.offers = append(v.offers, standing{id: it.id(), node: sh.name, at: now, version: 1})
		}
		theirs = append(theirs, &zk.SetDataRequest{Path: q.line + "/" + sh.name, Data: data, Version: 0})
		offers = append(theirs, offers...)
	}
	ops = append(ops, offers...)
	if pass != nil {
		v.revoke = append(v.revoke, *pass)
	}
	for _, o := range v.revoke {
		ops = append(ops, &zk.SetDataRequest{Path: q.line + "/" + o.node, Data: passedMark, Version: o.version})
	}
	ops = append(ops,
		&zk.SetDataRequest{Path: q.line, Data: encodeStanding(v.offers), Version: v.version},
		&zk.DeleteRequest{Path: w.path, Version: 0})

	js, r, err := q.sendClaims(ctx, ops, mine)
	switch {
	case js != nil || err != nil:
		return js, nil, err
	case r.i == len(ops)-1 && errors.Is(r.err, zk.ErrNoNode):
		return nil, nil, fmt.Errorf("%w: %s vanished", errLineLost, w.path)
	}
	// Anything else moved under us (another head, a consumer that left, a
	// claim from TryTake): where do we stand now?
	return nil, nil, q.claimFailed(ctx, r)
}

func compareIDs(a, b candidate) int {
	switch {
	case a.bucket != b.bucket:
		return int(a.bucket - b.bucket)
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}
