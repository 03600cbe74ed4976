package fairqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Take waits for the oldest pending item, claims it and returns it as a Job.
// Waiting consumers (in this and other processes) are served in the order
// they called Take; only the first one watches the items, so a put wakes one
// consumer. Take returns when ctx ends or the session is over, leaving the
// line without taking anything.
func (q *Queue) Take(ctx context.Context) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	me, err := q.join(ctx)
	if err != nil {
		return nil, err
	}
	defer q.leave(me)
	if err := q.awaitTurn(ctx, me); err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	for {
		j, _, err := q.scan(ctx, me, false)
		if j != nil || err != nil {
			return j, err
		}
		// Nothing pending: look again, this time leaving watches, so that
		// nothing that happens after the look goes unnoticed.
		j, watches, err := q.scan(ctx, me, true)
		if j != nil || err != nil {
			return j, err
		}
		if err := q.waitAny(ctx, watches); err != nil {
			return nil, fmt.Errorf("fairqueue: take: %w", err)
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
	j, _, err := q.scan(ctx, nil, false)
	if j == nil && err == nil {
		return nil, ErrEmpty
	}
	return j, err
}

// scan claims the oldest unclaimed item. It lists the buckets' directory,
// the claims, and buckets from the oldest on until one holds an unclaimed
// item: usually just the oldest. Drained buckets are deleted on the way.
// With watch set, the listings leave child watches, returned when nothing
// was found.
func (q *Queue) scan(ctx context.Context, me *place, watch bool) (*Job, []<-chan zk.Event, error) {
	var watches []<-chan zk.Event
	list := func(dir string) ([]string, error) {
		if !watch {
			return children(ctx, q.s, dir)
		}
		for {
			names, ev, err := childrenW(ctx, q.s, dir)
			if errors.Is(err, zk.ErrNoNode) {
				// Make the directory, so that there is something to watch.
				if err := ensureDir(ctx, q.s, dir, q.acl); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("fairqueue: list %s: %w", dir, err)
			}
			watches = append(watches, ev)
			return names, nil
		}
	}

	// The claims' and the buckets' listings are sent together: the client
	// pipelines them. In watch mode both leave a watch: a new bucket, or a
	// claim that ends (Nack, a consumer gone), is news.
	type listing struct {
		names []string
		ev    <-chan zk.Event
		err   error
	}
	cl := make(chan listing, 1)
	go func() {
		if !watch {
			names, err := children(ctx, q.s, q.claims)
			cl <- listing{names: names, err: err}
			return
		}
		var l listing
		var err error
		l.names, l.ev, err = childrenW(ctx, q.s, q.claims)
		if errors.Is(err, zk.ErrNoNode) {
			// No claims directory yet: nothing to wait for there either.
			err = nil
		}
		l.err = err
		cl <- l
	}()
	// The bucket the last claim came from is most likely the oldest with a
	// pending item: its listing is sent along too, on speculation.
	hint := q.hint.Load() - 1
	var pre chan listing
	if !watch && hint >= 0 {
		pre = make(chan listing, 1)
		go func() {
			names, err := children(ctx, q.s, q.bucketPath(hint))
			pre <- listing{names: names, err: err}
		}()
	}
	var bl listing
	bl.names, bl.err = list(q.items) // in watch mode, adds the watch
	c := <-cl
	if err := cmp.Or(bl.err, c.err); err != nil {
		return nil, nil, err
	}
	if c.ev != nil {
		watches = append(watches, c.ev)
	}
	var bs []int64
	for _, name := range bl.names {
		if n, ok := parseBucket(name); ok {
			bs = append(bs, n)
		}
	}
	slices.Sort(bs)
	claimed := make(map[string]bool, len(c.names))
	for _, id := range c.names {
		claimed[id] = true
	}

	for i, b := range bs {
		last := i == len(bs)-1
		bp := q.bucketPath(b)
		var names []string
		var err error
		if pre != nil && b >= hint {
			// A listing of an older bucket than b is of no use: that
			// bucket is gone. One of b itself may miss items put since,
			// which are newer than all it lists.
			p := <-pre
			pre = nil
			if b == hint && p.err == nil {
				names = p.names
			}
		}
		switch {
		case names != nil:
		case watch && last:
			names, err = list(bp) // new items arrive in the newest bucket
		default:
			names, err = children(ctx, q.s, bp)
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
			id := itemID(b, seq)
			if claimed[id] {
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
	if pre != nil {
		<-pre // let it finish: nothing is left running
	}
	return nil, watches, nil
}

// dropBucket deletes a drained bucket. A producer that put into it after our
// listing makes the delete fail (not empty), which is fine; one that puts
// after the delete finds it gone and makes a newer bucket.
func (q *Queue) dropBucket(ctx context.Context, bp string) {
	err := zkrecipes.Call(ctx, func() error { return q.s.Conn().Delete(bp, -1) })
	if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
		q.log.Debug("fairqueue: could not delete drained bucket", "bucket", bp, "err", err)
	}
}

// claim tries to claim one item. It returns nil, nil when the item is gone
// or claimed by someone else, or was moved to the dead-letter area. With me
// set, the same multi takes us out of the consumers' line: the hand-off to
// the next consumer costs no round trip of its own.
func (q *Queue) claim(ctx context.Context, me *place, b, seq int64) (*Job, error) {
	id := itemID(b, seq)
	ip := q.bucketPath(b) + "/" + fmt.Sprintf("%s%010d", itemPrefix, seq)
	cp := q.claims + "/" + id
	data, st, err := get(ctx, q.s, ip)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fairqueue: read %s: %w", ip, err)
	}
	if q.maxAttempts > 0 && int(st.Version) >= q.maxAttempts {
		// Delivered often enough: to the dead letters. Creating and
		// deleting the claim in the same multi proves no one holds it.
		err := q.bury(ctx, id, ip, st.Version, int(st.Version), data,
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
			&zk.SetDataRequest{Path: ip, Data: data, Version: st.Version},
		}
		if me != nil {
			ops = append(ops, &zk.DeleteRequest{Path: me.path, Version: -1})
		}
		_, i, err := multi(ctx, q.s, ops...)
		switch {
		case err == nil:
			if me != nil {
				me.left = true
			}
			return newJob(q, id, ip, cp, data, st.Version+1), nil
		case i == 2:
			return nil, fmt.Errorf("fairqueue: take: our place in line %s: %w", me.path, err)
		case i == 0 && errors.Is(err, zk.ErrNoNode):
			if err := ensureDir(ctx, q.s, q.claims, q.acl); err != nil {
				return nil, err
			}
		case i == 0 && errors.Is(err, zk.ErrNodeExists),
			i == 1 && (errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)):
			return nil, nil // someone else's now
		case i < 0 && zkrecipes.IsAmbiguous(err):
			// The claim may exist. Delete it if it is ours: the item is then
			// delivered again, its attempt counted, which at-least-once allows.
			q.s.Cleanup(func(c *zk.Conn) error {
				_, st, err := c.Exists(cp)
				if err != nil || st == nil || st.EphemeralOwner != q.s.ID() {
					return nil
				}
				return zkrecipes.DeleteNode(cp)(c)
			})
			return nil, fmt.Errorf("fairqueue: claim %s: %w", id, err)
		default:
			return nil, fmt.Errorf("fairqueue: claim %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("fairqueue: claim %s: claims directory keeps vanishing", id)
}

// waitAny waits until one of the watches fires, the session ends or ctx
// ends. The abandoned watches fire later into buffered channels.
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
		_, err := q.s.WatchEvent(v.Interface().(zk.Event))
		return err
	case i == len(watches):
		return q.s.Err()
	default:
		return context.Cause(ctx)
	}
}
