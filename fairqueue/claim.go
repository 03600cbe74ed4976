package fairqueue

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// readAhead is how many candidates' items a Take reads at once, in one
// round trip: consumers that look at the same moment race for the same
// oldest items, and a loser goes on to the next without another read.
const readAhead = 4

// claimFirst claims the first of cs (oldest first) that is still free, or
// returns nil, nil when none is. Consumers that look at the same moment
// race for the same oldest items: the items are read readAhead at a time,
// in one round trip, and a claim lost to another consumer goes on to the
// next item without another read or another look.
func (q *Queue) claimFirst(ctx context.Context, me string, cs []candidate) (*Job, error) {
	for len(cs) > 0 {
		batch := cs[:min(len(cs), readAhead)]
		cs = cs[len(batch):]
		nodes, errs := q.readItems(ctx, batch)
		for i, c := range batch {
			switch err := errs[i]; {
			case errors.Is(err, zk.ErrNoNode):
				continue // acked meanwhile
			case err != nil:
				return nil, fmt.Errorf("read %s: %w", q.itemPath(c), err)
			}
			j, err := q.claim(ctx, me, c, nodes[i])
			if j != nil || err != nil {
				return j, err
			}
		}
	}
	return nil, nil
}

// readItems reads the items cs at once: the client pipelines the reads, so
// they cost one round trip.
func (q *Queue) readItems(ctx context.Context, cs []candidate) ([]znode.Node, []error) {
	nodes := make([]znode.Node, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { nodes[i], errs[i] = znode.Get(ctx, q.s, q.itemPath(c)) })
	}
	wg.Wait()
	return nodes, errs
}

func (q *Queue) itemPath(c candidate) string { return q.bucketPath(c.bucket) + "/" + c.name }

// claim tries to claim the item c: in one multi, an EPHEMERAL claim node and
// a version-checked setData on the item, which counts the delivery in the
// item's data version (Job.Attempt) and fails if another consumer claimed it
// meanwhile; with them go the item's held/ node when it was held, and our
// line node me when we stand in line (the hand-off to the next consumer
// costs no round trip of its own). It returns nil, nil when the item is gone
// or someone else's, or was moved to the dead-letter area.
//
// A claim sent may land whatever becomes of ctx: if ctx ends first, a
// clean-up waits for the claim's outcome and, if it landed (or may have),
// deletes the claim once the outcome is settled, so that the item is
// delivered again rather than held by no one. A claim whose connection
// dropped is looked for once the client has reconnected.
//
// A claim names the Take that made it: its data is a token of its own. The
// session that owns the ephemeral node does not say whose it is, since
// every Take of every Queue on one session shares it; a Take that looks for
// its claim after a lost reply, or a clean-up that deletes one, goes by the
// token.
//
// n is the item as read before the claim; a read that is out of date makes
// the claim fail (the version moved on), as another consumer's claim does.
func (q *Queue) claim(ctx context.Context, me string, c candidate, n znode.Node) (*Job, error) {
	id := c.id()
	ip := q.itemPath(c)
	cp := q.claims + "/" + id
	_, key, _ := parseItem(c.name)
	if q.maxAttempts > 0 && int(n.Stat.Version) >= q.maxAttempts {
		// Delivered often enough: to the dead letters. Creating and
		// deleting the claim in the same multi proves no one holds it.
		ops := []any{&zk.CreateRequest{Path: cp, Data: []byte{}, Acl: q.acl, Flags: zk.FlagEphemeral},
			&zk.DeleteRequest{Path: cp, Version: -1}}
		if c.held != "" {
			ops = append(ops, &zk.DeleteRequest{Path: q.held + "/" + c.held, Version: -1})
		}
		err := q.bury(ctx, id, ip, key, n.Stat.Version, int(n.Stat.Version), n.Data, ops...)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return nil, err
		}
		return nil, nil
	}
	token := []byte(rand.Text())
	mine := claimOf{path: cp, token: token, item: ip, version: n.Stat.Version + 1}
	for range maxDirTries {
		ops := []any{
			&zk.CreateRequest{Path: cp, Data: token, Acl: q.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: ip, Data: n.Data, Version: n.Stat.Version},
		}
		heldOp, meOp := -1, -1
		if c.held != "" {
			heldOp = len(ops)
			ops = append(ops, &zk.DeleteRequest{Path: q.held + "/" + c.held, Version: -1})
		}
		if me != "" {
			meOp = len(ops)
			ops = append(ops, &zk.DeleteRequest{Path: me, Version: -1})
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx) // nothing sent
		}
		res := make(chan opResult, 1)
		go func() {
			i, err := znode.MultiErr(q.s.Conn().Multi(ops...))
			res <- opResult{i, err}
		}()
		var r opResult
		select {
		case r = <-res:
		case <-ctx.Done():
			q.s.Cleanup("abandoned claim "+cp, q.settleClaim(mine, res))
			return nil, context.Cause(ctx)
		}
		newJob := func() *Job {
			if n.Stat.Version > 0 {
				q.s.Telemetry().Redelivered()
			}
			return newJob(q, id, ip, cp, key, n.Data, n.Stat.Version+1)
		}
		switch i, err := r.i, r.err; {
		case err == nil:
			return newJob(), nil
		case meOp >= 0 && i == meOp:
			return nil, fmt.Errorf("%w: %s: %w", errLineLost, me, err)
		case i == 0 && errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.claims, q.acl); err != nil {
				return nil, err
			}
		case i == 0 && errors.Is(err, zk.ErrNodeExists),
			i == 1 && (errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)),
			heldOp >= 0 && i == heldOp && errors.Is(err, zk.ErrNoNode):
			return nil, nil // someone else's now
		case i < 0 && session.IsConnErr(err):
			// The connection dropped: the claim may have landed, with all
			// the rest of its multi. Its outcome is settled once the client
			// has reconnected: look.
			ours, err := znode.Retry(ctx, q.s, func() (bool, error) { return mine.ours(q.s) })
			switch {
			case errors.Is(err, zk.ErrNoNode):
				// It did not land, and no one holds the item now: claim it
				// again. Going on to the next item instead would leave this
				// one, free and older, behind us.
				continue
			case err != nil:
				// Not found out (ctx ended, or the session): whatever the
				// claim left, a clean-up finds.
				q.s.Cleanup("ambiguous claim "+cp, q.deleteOwnClaim(mine))
				return nil, err
			case ours:
				return newJob(), nil
			}
			return nil, nil // someone else's now: another consumer's, or another Take's of ours
		default:
			return nil, fmt.Errorf("claim %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("claim %s: no outcome in %d tries (the claims directory vanishing, or the connection)", id, maxDirTries)
}

// opResult is the outcome of a multi: the failed op's index and its error.
type opResult struct {
	i   int
	err error
}

// claimOf is a claim a Take sent: where, its token, and the item's data
// version it set (the delivery it counts).
type claimOf struct {
	path    string
	token   []byte
	item    string
	version int32
}

// ours reports whether the claim at c.path is this one: made by this Take,
// not by another Take on the same session. zk.ErrNoNode: there is none.
func (c claimOf) ours(s *session.Session) (bool, error) {
	data, st, err := s.Conn().Get(c.path)
	if err != nil {
		return false, err
	}
	return st.EphemeralOwner == s.ID() && bytes.Equal(data, c.token), nil
}

// settleClaim is the clean-up of a claim abandoned mid-flight: it waits for
// the claim's outcome, then deletes the claim if it landed or may have.
func (q *Queue) settleClaim(c claimOf, res <-chan opResult) func() error {
	var r *opResult
	return func() error {
		if r == nil {
			got := <-res
			r = &got
		}
		if r.i >= 0 || (r.err != nil && !session.IsConnErr(r.err)) {
			return nil // refused: nothing was made
		}
		return q.deleteOwnClaim(c)()
	}
}

// deleteOwnClaim is a clean-up step: delete the claim c if it is there and
// this Take's. The delete is fenced by the item's version, which only this
// delivery set: a claim of a later delivery is never deleted by it. A
// failed look is a failure (retried on connection errors), not a success.
func (q *Queue) deleteOwnClaim(c claimOf) func() error {
	return func() error {
		ours, err := c.ours(q.s)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil
		case err != nil:
			return err
		case !ours:
			return nil
		}
		_, err = znode.MultiErr(q.s.Conn().Multi(
			&zk.CheckVersionRequest{Path: c.item, Version: c.version},
			&zk.DeleteRequest{Path: c.path, Version: -1}))
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			return nil // settled meanwhile
		}
		return err
	}
}
