package fairqueue

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// A claim is an EPHEMERAL node claims/<id>, made in one multi with a
// version-checked setData on the item, which counts the hand-out in the
// item's data version (Job.Attempt) and fences: a claim made from an out of
// date read fails. An item offered to a consumer was counted by the offer
// (see handOut): its claim checks that version instead of setting it. The
// claim node's data is a token of the Take it is for: the session that
// owns the node does not say whose it is, since every Take of every Queue
// on one session shares it; a look for a claim after a lost reply, or a
// clean-up that deletes one, goes by the token.

func (q *Queue) itemPath(c candidate) string { return q.bucketPath(c.bucket) + "/" + c.name }

// readItems reads the items cs, offered to us, at once (the client
// pipelines the reads), leaving out an item gone.
func (q *Queue) readItems(ctx context.Context, cs []candidate) ([]item, error) {
	its, _, err := q.readItemsHeld(ctx, cs, false)
	return its, err
}

// readFree reads the items cs that a look found free (not claimed, not
// held) at once, and lists held/ again in the same round trip. It leaves
// out an item gone (acked meanwhile) and moves to the dead letters an item
// handed out WithMaxAttempts times already (not done for items offered to
// us: our offer counts one of those).
//
// The look's reads go out from goroutines in whatever order they run, and
// the server answers each as of when it arrives: it may have listed held/
// before a NackAfter (a held node made and the claim deleted, in one
// multi) and claims/ after it, and then the item looks free. Listed after
// the look's answers came, held/ shows every hold whose claim the look
// missed. readFree leaves out an item held until later, and returns the
// earliest such time (zero if none).
func (q *Queue) readFree(ctx context.Context, cs []candidate) ([]item, time.Time, error) {
	return q.readItemsHeld(ctx, cs, true)
}

// readItemsHeld reads the items cs; free, it is readFree, else readItems.
func (q *Queue) readItemsHeld(ctx context.Context, cs []candidate, free bool) ([]item, time.Time, error) {
	out := make([]item, len(cs))
	var r reads
	var held []string
	if free {
		r.list(ctx, q, q.held, &held, false)
	}
	for i, c := range cs {
		r.do(func() error {
			n, err := znode.Get(ctx, q.s, q.itemPath(c))
			switch {
			case errors.Is(err, zk.ErrNoNode):
				return nil
			case err != nil:
				return fmt.Errorf("read %s: %w", q.itemPath(c), err)
			}
			out[i] = item{c, n}
			return nil
		})
	}
	if err := r.wait(); err != nil {
		return nil, time.Time{}, err
	}
	// The holds listed now (with free): one held until later leaves its
	// item out; one over gives the claim its held node to delete, if the
	// look did not.
	type hold struct {
		name  string
		until time.Time
	}
	holds := make(map[string]hold, len(held))
	for _, name := range held {
		if id, until, ok := parseHeld(name); ok {
			holds[id] = hold{name, until}
		}
	}
	now := time.Now()
	var later time.Time
	kept := out[:0]
	for _, it := range out {
		if it.node.Stat == nil {
			continue // gone
		}
		if h, ok := holds[it.id()]; ok {
			if h.until.After(now) {
				later = earliest(later, h.until) // not free after all
				continue
			}
			if it.held == "" {
				it.held = h.name
			}
		}
		if free && q.maxAttempts > 0 && int(it.node.Stat.Version) >= q.maxAttempts {
			if err := q.buryUnclaimed(ctx, it); err != nil {
				return nil, time.Time{}, err
			}
			continue
		}
		kept = append(kept, it)
	}
	return kept, later, nil
}

// buryUnclaimed moves an item delivered often enough to the dead letters.
// Creating and deleting its claim in the same multi proves no one holds it.
func (q *Queue) buryUnclaimed(ctx context.Context, it item) error {
	cp := q.claims + "/" + it.id()
	_, key, _ := parseItem(it.name)
	ops := []any{&zk.CreateRequest{Path: cp, Data: []byte{}, Acl: q.acl, Flags: zk.FlagEphemeral},
		&zk.DeleteRequest{Path: cp, Version: -1}}
	if it.held != "" {
		ops = append(ops, &zk.DeleteRequest{Path: q.held + "/" + it.held, Version: -1})
	}
	err := q.bury(ctx, it.id(), q.itemPath(it.candidate), key, it.node.Stat.Version, int(it.node.Stat.Version), it.node.Data, ops...)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
		return err
	}
	return nil
}

// claimOf is a claim a multi makes for this consumer.
type claimOf struct {
	item
	path    string // claims/<id>
	token   []byte
	version int32 // the item's data version once claimed: the hand-out it counts
	// offered: the item was offered to us, and the offer counted the
	// hand-out already (see handOut); the claim checks the version.
	offered bool
}

// newClaims makes the claims of items as read (the claim counts a
// hand-out), or, with offered, as offered to us (the offer counted it).
func (q *Queue) newClaims(its []item, offered bool) []*claimOf {
	cs := make([]*claimOf, len(its))
	for i, it := range its {
		v := it.node.Stat.Version
		if !offered {
			v++
		}
		cs[i] = &claimOf{item: it, path: q.claims + "/" + it.id(), token: []byte(rand.Text()), version: v, offered: offered}
	}
	return cs
}

// claimOps are the claims' part of a multi: for each, the claim node; the
// item's setData, counting the hand-out (or, for an item offered to us,
// the check of the version the offer set); and the delete of its held/
// node when it was held.
func (q *Queue) claimOps(cs []*claimOf) []any {
	var ops []any
	for _, c := range cs {
		ops = append(ops, &zk.CreateRequest{Path: c.path, Data: c.token, Acl: q.acl, Flags: zk.FlagEphemeral})
		if c.offered {
			ops = append(ops, &zk.CheckVersionRequest{Path: q.itemPath(c.candidate), Version: c.version})
		} else {
			ops = append(ops, &zk.SetDataRequest{Path: q.itemPath(c.candidate), Data: c.node.Data, Version: c.node.Stat.Version})
		}
		if c.held != "" {
			ops = append(ops, &zk.DeleteRequest{Path: q.held + "/" + c.held, Version: -1})
		}
	}
	return ops
}

// claimOf returns the claim of cs that op i of its multi belongs to (the
// claims' ops come first, in order), or -1.
func claimAt(cs []*claimOf, i int) int {
	for k, c := range cs {
		n := 2
		if c.held != "" {
			n = 3
		}
		if i < n {
			return k
		}
		i -= n
	}
	return -1
}

// job makes the Job of a claim that landed.
func (q *Queue) job(c *claimOf) *Job {
	if c.version > 1 {
		q.s.Telemetry().Redelivered()
	}
	_, key, _ := parseItem(c.name)
	return newJob(q, c.id(), q.itemPath(c.candidate), c.path, key, c.node.Data, c.version)
}

// ours reports whether the claim at c.path is this one. zk.ErrNoNode: there
// is none.
func (c *claimOf) ours(s *session.Session) (bool, error) {
	data, st, err := s.Conn().Get(c.path)
	if err != nil {
		return false, err
	}
	return st.EphemeralOwner == s.ID() && bytes.Equal(data, c.token), nil
}

// opResult is the outcome of a multi: the failed op's index and its error.
type opResult struct {
	i   int
	err error
}

// sendClaims sends ops, a multi that starts with the claims cs, and settles
// its outcome whatever becomes of ctx. A multi whose connection dropped may
// have landed: once the client has reconnected, the first claim, looked for
// by its token, says whether it did. If ctx ends first, the claims, if they
// landed, are deleted, so that their items are delivered again.
func (q *Queue) sendClaims(ctx context.Context, ops []any, cs []*claimOf) ([]*Job, opResult, error) {
	if ctx.Err() != nil {
		return nil, opResult{}, context.Cause(ctx) // nothing sent
	}
	type outcome struct {
		r      opResult
		landed bool
		err    error
	}
	var (
		mu     sync.Mutex
		gaveUp bool
		res    = make(chan outcome, 1)
	)
	settle := func(o outcome) { // the caller gave up: delete the claims if they landed
		if o.landed || o.err != nil {
			for _, c := range cs {
				q.s.Cleanup("abandoned claim "+c.path, q.deleteOwnClaim(c))
			}
		}
	}
	go func() {
		var o outcome
		o.r.i, o.r.err = znode.MultiErr(q.s.Conn().Multi(ops...))
		o.landed = o.r.err == nil
		if o.r.i < 0 && session.IsConnErr(o.r.err) {
			ours, err := znode.Retry(context.Background(), q.s, func() (bool, error) { return cs[0].ours(q.s) })
			switch {
			case err == nil || errors.Is(err, zk.ErrNoNode):
				o.landed = ours
				if !ours {
					o.r = opResult{0, zk.ErrNodeExists} // not landed: the claim is someone else's, or none
				}
			default:
				o.err = err // the session is over
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			settle(o)
			return
		}
		res <- o
	}()
	select {
	case o := <-res:
		if !o.landed {
			return nil, o.r, o.err
		}
		js := make([]*Job, len(cs))
		for i, c := range cs {
			js[i] = q.job(c)
		}
		return js, opResult{-1, nil}, nil
	case <-ctx.Done():
		mu.Lock()
		gaveUp = true
		mu.Unlock()
		select {
		case o := <-res:
			settle(o)
		default:
		}
		return nil, opResult{}, context.Cause(ctx)
	}
}

// claimFailed deals with a claim's multi that failed at op r.i: a missing
// claims directory is made (and the caller tries again); a refusal that
// says an item or a node in line moved on is no error (the caller looks
// again); anything else is.
func (q *Queue) claimFailed(ctx context.Context, r opResult) error {
	switch {
	case errors.Is(r.err, zk.ErrNoNode) && r.i == 0:
		return znode.EnsureDir(ctx, q.s, q.claims, q.acl)
	case errors.Is(r.err, zk.ErrNodeExists), errors.Is(r.err, zk.ErrNoNode), errors.Is(r.err, zk.ErrBadVersion):
		return nil
	}
	return r.err
}

// deleteOwnClaim is a clean-up step: delete the claim c if it is there and
// ours. The delete is fenced by the item's version, which only this
// delivery set: a claim of a later delivery is never deleted by it. A
// failed look is a failure (retried on connection errors), not a success.
func (q *Queue) deleteOwnClaim(c *claimOf) func() error {
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
			&zk.CheckVersionRequest{Path: q.itemPath(c.candidate), Version: c.version},
			&zk.DeleteRequest{Path: c.path, Version: -1}))
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			return nil // settled meanwhile
		}
		return err
	}
}

// claimOffer claims the items offered to us: in one multi, the claims and
// the delete of our node, checked against the offer's version (an offer
// passed over cannot be claimed). An item whose claim fails (another
// consumer took it: TryTake) is left out and the rest claimed again. It
// returns no job when the offer is void (we were passed over, or no item of
// it can be ours): then we join the line again.
func (w *waiter) claimOffer(ctx context.Context) ([]*Job, error) {
	q := w.q
	its := w.offer
	var unread []candidate
	for _, it := range its {
		if it.node.Data == nil {
			unread = append(unread, it.candidate)
		}
	}
	if len(unread) > 0 {
		read, err := q.readItems(ctx, unread)
		if err != nil {
			return nil, err
		}
		its = slices.DeleteFunc(its, func(it item) bool { return it.node.Data == nil })
		for _, it := range read {
			for _, o := range w.offer {
				if o.id() == it.id() && o.node.Stat.Version == it.node.Stat.Version {
					its = append(its, it) // as offered: not claimed since
				}
			}
		}
		slices.SortFunc(its, func(a, b item) int { return compareIDs(a.candidate, b.candidate) })
	}
	for tries := 0; len(its) > 0 && tries < maxDirTries; tries++ {
		cs := q.newClaims(its, true)
		ops := append(q.claimOps(cs), &zk.DeleteRequest{Path: w.path, Version: w.version})
		js, r, err := q.sendClaims(ctx, ops, cs)
		k := claimAt(cs, r.i)
		switch {
		case js != nil || err != nil:
			return js, err
		case r.i == len(ops)-1 && errors.Is(r.err, zk.ErrNoNode):
			return nil, fmt.Errorf("%w: %s vanished", errLineLost, w.path)
		case r.i == len(ops)-1:
			return nil, w.rejoin(ctx) // passed over
		case r.i == 0 && errors.Is(r.err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.claims, q.acl); err != nil {
				return nil, err
			}
		case k >= 0:
			if err := q.claimFailed(ctx, r); err != nil {
				return nil, err
			}
			its = slices.Delete(its, k, k+1) // someone else's now
		default:
			return nil, fmt.Errorf("claim: %w", r.err)
		}
	}
	return nil, w.rejoin(ctx) // nothing of it left for us
}
