package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Take waits for the oldest pending item, claims it and returns it as a Job.
// Waiting consumers (in this and other processes) are served in the order
// they called Take; only the first one watches the items, so a put wakes one
// consumer. Take returns when ctx ends or the session is over, leaving the
// line without taking anything; it rides out disconnects the session
// survives.
func (q *Queue) Take(ctx context.Context) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	e, err := q.awaitTurn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	j, err := q.takeFirst(ctx, e.Path())
	if err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	return j, nil
}

// takeFirst claims the oldest item for the consumer first in line, whose
// node is me, waiting for an item if need be. The claim's multi deletes me:
// the hand-off to the next consumer costs no round trip of its own. On any
// other way out, me is deleted here (after anything sent that might delete
// it, so a claim in flight either lands with it or not at all).
func (q *Queue) takeFirst(ctx context.Context, me string) (*Job, error) {
	claimed := false
	defer func() {
		if !claimed {
			q.s.Cleanup("leave line "+me, q.s.DeleteStep(me))
		}
	}()
	for {
		j, _, err := q.scan(ctx, me, false)
		if j != nil {
			claimed = true
		}
		if j != nil || err != nil {
			return j, err
		}
		// Nothing pending: look again, this time leaving watches, so that
		// nothing that happens after the look goes unnoticed.
		j, watches, err := q.scan(ctx, me, true)
		if j != nil {
			claimed = true
		}
		if j != nil || err != nil {
			return j, err
		}
		if err := q.waitAny(ctx, watches); err != nil {
			return nil, err
		}
	}
}

// TryTake claims the oldest pending item, or returns ErrEmpty when there is
// none. It does not stand in the consumers' line (it never waits), so it can
// take an item that a waiting Take was about to get; waiting consumers keep
// their order among themselves.
func (q *Queue) TryTake(ctx context.Context) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	j, _, err := q.scan(ctx, "", false)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	case j == nil:
		return nil, ErrEmpty
	}
	return j, nil
}

// scan claims the oldest unclaimed item. It lists the buckets' directory,
// the claims, and buckets from the oldest on until one holds an unclaimed
// item: usually just the oldest. Drained buckets are deleted on the way.
// With watch set, the listings leave watches, returned when nothing was
// found: a new bucket or item, or a claim that ends, is news. A directory
// that does not exist is watched for its creation, never created just to
// be watched: a container that never had a child is never removed.
func (q *Queue) scan(ctx context.Context, me string, watch bool) (*Job, []<-chan zk.Event, error) {
	var watches []<-chan zk.Event
	list := func(dir string) ([]string, error) {
		if !watch {
			return znode.Children(ctx, q.s, dir)
		}
		names, ev, err := q.listW(ctx, dir)
		if ev != nil {
			watches = append(watches, ev)
		}
		return names, err
	}

	// The claims', the buckets' and (on speculation) the likeliest bucket's
	// listings are sent together: the client pipelines them. A claim that
	// ends (Nack, a consumer gone) is news too; with no claims directory
	// there is nothing to wait for there.
	var (
		claims   []string
		claimsEv <-chan zk.Event
		cerr     error
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		if !watch {
			claims, cerr = znode.Children(ctx, q.s, q.claims)
			return
		}
		claims, claimsEv, cerr = q.listW(ctx, q.claims)
		if claims == nil && cerr == nil {
			claimsEv = nil // a creation watch: no claim can end there
		}
	})
	// The bucket the last claim came from is most likely the oldest with a
	// pending item.
	hint := q.hint.Load() - 1
	var pre []string
	var perr error
	if !watch && hint >= 0 {
		wg.Go(func() { pre, perr = znode.Children(ctx, q.s, q.bucketPath(hint)) })
	}
	bnames, berr := list(q.items)
	wg.Wait()
	if err := errors.Join(berr, cerr); err != nil {
		return nil, nil, err
	}
	if claimsEv != nil {
		watches = append(watches, claimsEv)
	}
	var bs []int64
	for _, name := range bnames {
		if n, ok := parseBucket(name); ok {
			bs = append(bs, n)
		}
	}
	slices.Sort(bs)
	claimed := make(map[string]bool, len(claims))
	for _, id := range claims {
		claimed[id] = true
	}

	for i, b := range bs {
		last := i == len(bs)-1
		bp := q.bucketPath(b)
		var names []string
		var err error
		switch {
		case b == hint && perr == nil && pre != nil:
			// A listing of b itself may miss items put since, which are
			// newer than all it lists.
			names, pre = pre, nil
		case watch && last:
			names, err = list(bp) // new items arrive in the newest bucket
		default:
			names, err = znode.Children(ctx, q.s, bp)
		}
		if err != nil {
			return nil, nil, err
		}
		if len(names) == 0 {
			q.dropBucket(ctx, bp)
			continue
		}
		seqs := make([]int64, 0, len(names))
		for _, name := range names {
			if seq, ok := parseItem(name); ok {
				seqs = append(seqs, seq)
			}
		}
		slices.Sort(seqs)
		for _, seq := range seqs {
			if claimed[itemID(b, seq)] {
				continue
			}
			j, err := q.claim(ctx, me, b, seq)
			if j != nil {
				q.hint.Store(b + 1)
			}
			if j != nil || err != nil {
				return j, nil, err
			}
		}
	}
	return nil, watches, nil
}

// listW lists dir and leaves a child watch on it; a missing dir gets a
// creation watch instead (which stays registered on the server until the
// directory is made).
func (q *Queue) listW(ctx context.Context, dir string) ([]string, <-chan zk.Event, error) {
	type listing struct {
		names []string
		ev    <-chan zk.Event
	}
	for {
		l, err := znode.Retry(ctx, q.s, func() (listing, error) {
			names, _, ev, err := q.s.Conn().ChildrenW(dir)
			return listing{names, ev}, err
		})
		if err == nil {
			return l.names, l.ev, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		l, err = znode.Retry(ctx, q.s, func() (listing, error) {
			found, _, ev, err := q.s.Conn().ExistsW(dir)
			if found {
				return listing{}, zk.ErrNodeExists // made meanwhile: list it
			}
			return listing{ev: ev}, err
		})
		if errors.Is(err, zk.ErrNodeExists) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("watch %s: %w", dir, err)
		}
		return nil, l.ev, nil
	}
}

// dropBucket deletes a drained bucket. A producer that put into it after our
// listing makes the delete fail (not empty), which is fine; one that puts
// after the delete finds it gone and makes a newer bucket.
func (q *Queue) dropBucket(ctx context.Context, bp string) {
	_, err := znode.Do(ctx, func() (struct{}, error) { return struct{}{}, q.s.Conn().Delete(bp, -1) })
	if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
		q.log.Debug("fairqueue: could not delete drained bucket", "bucket", bp, "err", err)
	}
}

// claim tries to claim one item. It returns nil, nil when the item is gone
// or claimed by someone else, or was moved to the dead-letter area. With me
// set (a consumer first in line), the same multi takes us out of the
// consumers' line.
//
// A claim sent may land whatever becomes of ctx: if ctx ends first, a
// clean-up waits for the claim's outcome and, if it landed (or may have),
// deletes the claim once the outcome is settled, so that the item is
// delivered again rather than held by no one.
func (q *Queue) claim(ctx context.Context, me string, b, seq int64) (*Job, error) {
	id := itemID(b, seq)
	ip := q.bucketPath(b) + "/" + fmt.Sprintf("%s%010d", itemPrefix, seq)
	cp := q.claims + "/" + id
	n, err := znode.Get(ctx, q.s, ip)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ip, err)
	}
	if q.maxAttempts > 0 && int(n.Stat.Version) >= q.maxAttempts {
		// Delivered often enough: to the dead letters. Creating and
		// deleting the claim in the same multi proves no one holds it.
		err := q.bury(ctx, id, ip, n.Stat.Version, int(n.Stat.Version), n.Data,
			&zk.CreateRequest{Path: cp, Data: []byte{}, Acl: q.acl, Flags: zk.FlagEphemeral},
			&zk.DeleteRequest{Path: cp, Version: -1})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return nil, err
		}
		return nil, nil
	}
	for range 3 {
		// The version-checked setData counts the delivery in the item's
		// data version and fails if another consumer claimed it meanwhile.
		ops := []any{
			&zk.CreateRequest{Path: cp, Data: []byte{}, Acl: q.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: ip, Data: n.Data, Version: n.Stat.Version},
		}
		if me != "" {
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
			q.s.Cleanup("abandoned claim "+cp, q.settleClaim(cp, res))
			return nil, context.Cause(ctx)
		}
		switch i, err := r.i, r.err; {
		case err == nil:
			return newJob(q, id, ip, cp, n.Data, n.Stat.Version+1), nil
		case i == 2:
			return nil, fmt.Errorf("our place in line %s: %w", me, err)
		case i == 0 && errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.claims, q.acl); err != nil {
				return nil, err
			}
		case i == 0 && errors.Is(err, zk.ErrNodeExists),
			i == 1 && (errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)):
			return nil, nil // someone else's now
		case i < 0 && session.IsConnErr(err):
			// The connection dropped: the claim may have landed, with all
			// the rest of its multi. Its outcome is settled once the client
			// has reconnected: look.
			st, err := znode.Retry(ctx, q.s, func() (*zk.Stat, error) {
				_, st, err := q.s.Conn().Exists(cp)
				return st, err
			})
			switch {
			case err != nil:
				// Not found out (ctx ended, or the session): whatever the
				// claim left, a clean-up finds.
				q.s.Cleanup("ambiguous claim "+cp, q.deleteOwnClaim(cp))
				return nil, err
			case st != nil && st.EphemeralOwner == q.s.ID():
				return newJob(q, id, ip, cp, n.Data, n.Stat.Version+1), nil
			}
			return nil, nil // it did not land: look again
		default:
			return nil, fmt.Errorf("claim %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("claim %s: claims directory keeps vanishing", id)
}

// opResult is the outcome of a multi: the failed op's index and its error.
type opResult struct {
	i   int
	err error
}

// settleClaim is the clean-up of a claim abandoned mid-flight: it waits for
// the claim's outcome, then deletes the claim if it landed or may have.
func (q *Queue) settleClaim(cp string, res <-chan opResult) func() error {
	var r *opResult
	return func() error {
		if r == nil {
			got := <-res
			r = &got
		}
		if r.i >= 0 || (r.err != nil && !session.IsConnErr(r.err)) {
			return nil // refused: nothing was made
		}
		return q.deleteOwnClaim(cp)()
	}
}

// deleteOwnClaim is a clean-up step: delete the claim at cp if it is ours.
// A failed look is a failure (retried on connection errors), not a success.
func (q *Queue) deleteOwnClaim(cp string) func() error {
	return func() error {
		_, st, err := q.s.Conn().Exists(cp)
		switch {
		case err != nil:
			return err
		case st == nil || st.EphemeralOwner != q.s.ID():
			return nil
		}
		return q.s.DeleteStep(cp)()
	}
}

// waitAny waits until one of the watches fires, the session ends or ctx
// ends. The watches not fired fire later into buffered channels.
func (q *Queue) waitAny(ctx context.Context, watches []<-chan zk.Event) error {
	cases := make([]reflect.SelectCase, 0, len(watches)+2)
	for _, w := range watches {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.s.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	i, v, _ := reflect.Select(cases)
	switch {
	case i < len(watches):
		if znode.Dropped(v.Interface().(zk.Event)) {
			<-q.s.Done()
			return q.s.Err()
		}
		return nil
	case i == len(watches):
		return q.s.Err()
	default:
		return context.Cause(ctx)
	}
}
