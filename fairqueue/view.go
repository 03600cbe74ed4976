package fairqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// view is what one look at the queue showed: the head of the line's, before
// it hands items out, or TryTake's.
type view struct {
	// free: the items a consumer may be handed now, oldest first: not
	// claimed, not held, not offered to anyone (or offered to a consumer
	// that left its offer too long: see revoke), from the oldest buckets.
	free []candidate
	// behind: the nodes behind ours in line, in order.
	behind []string
	// offers: the offers standing (made, and their items not claimed yet),
	// as line/'s data records them, and that data's version: a hand-out
	// writes them back, with its own, conditional on it.
	offers  []standing
	version int32
	// revoke: offers left unclaimed for longer than the grace, which this
	// hand-out passes over (their nodes hold them still), giving their
	// items to others.
	revoke []standing
	// next: when the next held item or delayed entry comes due, or the next
	// standing offer has had its grace; zero if none. due: delayed entries
	// whose time has come, to move into the queue.
	next time.Time
	due  []string
	// watches fire on what would change the view (with watch set).
	watches []<-chan zk.Event
}

// look reads the queue in one round trip (a second one only when the oldest
// bucket holds too few items, or an offer has stood too long): the line's
// names (for the head, w), the offers standing, the claims, the held items,
// the delayed entries and the oldest bucket. It looks for want free items.
// With watch set, it leaves watches on what can bring an item: a new bucket
// or item, a claim that ends, a delayed entry.
func (q *Queue) look(ctx context.Context, w *waiter, want int, watch bool) (*view, error) {
	begin := time.Now()
	v := &view{}
	var (
		r                            reads
		names, claims, held, delayed []string
		first, bucketNames           []string
		record                       znode.Node
		buckets                      = q.cachedBuckets()
		relisted                     = watch || len(buckets) == 0
		firstB                       = int64(-1)
	)
	if w != nil {
		r.do(func() (err error) { names, err = znode.Children(ctx, q.s, q.line); return err })
	}
	r.do(func() (err error) {
		if record, err = znode.Get(ctx, q.s, q.line); errors.Is(err, zk.ErrNoNode) {
			record, err = znode.Node{Stat: &zk.Stat{Version: -1}}, nil
		}
		return err
	})
	r.list(ctx, q, q.claims, &claims, watch)
	r.list(ctx, q, q.held, &held, false) // held items change only with claims, which are watched
	r.list(ctx, q, q.delayed, &delayed, watch)
	if len(buckets) > 0 {
		firstB = buckets[0]
		r.do(func() (err error) { first, err = znode.Children(ctx, q.s, q.bucketPath(firstB)); return err })
	}
	if relisted {
		r.list(ctx, q, q.items, &bucketNames, watch) // a new bucket is news; with none known, learn them
	}
	if err := r.wait(); err != nil {
		return nil, err
	}
	v.watches = r.watches
	if relisted {
		buckets = q.setBuckets(bucketNames)
	}
	q.noteRTT(time.Since(begin))

	now := time.Now()
	taken := make(map[string]bool, len(claims))
	for _, id := range claims {
		taken[id] = true
	}
	if w != nil {
		l, _ := line.Parse(names, line.Consumer)
		if me := line.Index(l, w.name); me >= 0 {
			for _, n := range l[me+1:] {
				v.behind = append(v.behind, n.Name)
			}
		}
	}
	// The offers standing: an offer stands until its item is claimed (its
	// consumer's claim deletes its node) or it is passed over. One whose
	// item is gone (claimed and acked) is forgotten; one left too long is
	// passed over by the next hand-out, if its node still holds it (a
	// consumer that left took its offer with its node).
	v.version = record.Stat.Version
	listed := map[string]bool{}
	for _, name := range first {
		if seq, _, ok := parseItem(name); ok {
			listed[itemID(firstB, seq)] = true
		}
	}
	gone := func(id string) bool {
		b, _, err := parseID(id)
		return err == nil && firstB >= 0 && b <= firstB && !listed[id]
	}
	var stale []standing
	for _, o := range parseStanding(record.Data) {
		switch {
		case taken[o.id], gone(o.id):
		case now.Sub(o.at) > q.grace():
			if w != nil {
				stale = append(stale, o) // TryTake takes its item; a head passes it over
			}
		default:
			v.offers = append(v.offers, o)
			taken[o.id] = true
			if w != nil {
				v.next = earliest(v.next, o.at.Add(q.grace())) // look again then
			}
		}
	}
	if len(stale) > 0 {
		var err error
		if v.revoke, err = q.stillOffered(ctx, stale); err != nil {
			return nil, err
		}
	}

	for _, name := range delayed {
		if due, _, ok := parseDelayed(name); ok {
			if !due.After(now) {
				v.due = append(v.due, name)
			} else {
				v.next = earliest(v.next, due)
			}
		}
	}
	holds := make(map[string]string, len(held))
	for _, name := range held {
		id, until, ok := parseHeld(name)
		switch {
		case !ok:
		case until.After(now):
			taken[id] = true // not before then
			v.next = earliest(v.next, until)
		default:
			holds[id] = name
		}
	}

	// The buckets, oldest first, until enough is found. The first one's
	// listing came with the others; the list of buckets is learnt again when
	// it runs out.
	scanned := int64(-1)
	for i := 0; len(v.free) < want; i++ {
		if i == len(buckets) {
			if relisted {
				break
			}
			names, err := znode.Children(ctx, q.s, q.items)
			if err != nil {
				return nil, err
			}
			relisted = true
			buckets = slices.DeleteFunc(q.setBuckets(names), func(b int64) bool { return b <= scanned })
			i = -1
			continue
		}
		b := buckets[i]
		scanned = b
		names := first
		if b != firstB {
			var err error
			if names, err = znode.Children(ctx, q.s, q.bucketPath(b)); err != nil {
				return nil, err
			}
		}
		if watch && i == len(buckets)-1 {
			// New items arrive in the newest bucket.
			var ev <-chan zk.Event
			var err error
			if names, ev, err = q.listW(ctx, q.bucketPath(b)); err != nil {
				return nil, err
			}
			if ev != nil {
				v.watches = append(v.watches, ev)
			}
		}
		if len(names) == 0 {
			q.dropBucket(ctx, b)
			continue
		}
		var items []candidate
		for _, name := range names {
			if seq, _, ok := parseItem(name); ok && !taken[itemID(b, seq)] {
				items = append(items, candidate{bucket: b, seq: seq, name: name, held: holds[itemID(b, seq)]})
			}
		}
		slices.SortFunc(items, func(a, c candidate) int { return cmp.Compare(a.seq, c.seq) })
		v.free = append(v.free, items...)
	}
	return v, nil
}

// reads are requests sent at once, in goroutines: the client pipelines
// them, so they cost one round trip.
type reads struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
	watches []<-chan zk.Event
}

func (r *reads) do(f func() error) {
	r.wg.Go(func() {
		if err := f(); err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		}
	})
}

// list lists dir into names, with a child watch if asked.
func (r *reads) list(ctx context.Context, q *Queue, dir string, names *[]string, watch bool) {
	r.do(func() (err error) {
		if !watch {
			*names, err = znode.Children(ctx, q.s, dir)
			return err
		}
		var ev <-chan zk.Event
		*names, ev, err = q.listW(ctx, dir)
		if ev != nil {
			r.mu.Lock()
			r.watches = append(r.watches, ev)
			r.mu.Unlock()
		}
		return err
	})
}

func (r *reads) wait() error {
	r.wg.Wait()
	return errors.Join(r.errs...)
}

// stillOffered returns the offers of os whose nodes still hold them, read
// at once.
func (q *Queue) stillOffered(ctx context.Context, os []standing) ([]standing, error) {
	held := make([]bool, len(os))
	var r reads
	for i, o := range os {
		r.do(func() error {
			st, err := znode.Retry(ctx, q.s, func() (*zk.Stat, error) {
				_, st, err := q.s.Conn().Exists(q.line + "/" + o.node)
				return st, err
			})
			held[i] = err == nil && st != nil && st.Version == 1
			return err
		})
	}
	if err := r.wait(); err != nil {
		return nil, err
	}
	var out []standing
	for i, o := range os {
		if held[i] {
			out = append(out, o)
		}
	}
	return out, nil
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// cachedBuckets returns the buckets known from the last listing of items/.
func (q *Queue) cachedBuckets() []int64 {
	q.bucketsMu.Lock()
	defer q.bucketsMu.Unlock()
	return slices.Clone(q.buckets)
}

func (q *Queue) setBuckets(names []string) []int64 {
	var bs []int64
	for _, name := range names {
		if n, ok := parseBucket(name); ok {
			bs = append(bs, n)
		}
	}
	slices.Sort(bs)
	q.bucketsMu.Lock()
	defer q.bucketsMu.Unlock()
	q.buckets = bs
	return slices.Clone(bs)
}

// dropBucket deletes a drained bucket, other than the newest. A producer
// that put into it after our listing makes the delete fail (not empty),
// which is fine; one that puts after the delete finds it gone and makes a
// newer bucket.
func (q *Queue) dropBucket(ctx context.Context, b int64) {
	q.bucketsMu.Lock()
	q.buckets = slices.DeleteFunc(q.buckets, func(x int64) bool { return x == b })
	q.bucketsMu.Unlock()
	_, err := znode.Do(ctx, func() (struct{}, error) { return struct{}{}, q.s.Conn().Delete(q.bucketPath(b), -1) })
	if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
		q.log.Debug("fairqueue: could not delete drained bucket", "bucket", b, "err", err)
	}
}

// noteRTT folds the duration of a round trip into the running mean.
func (q *Queue) noteRTT(d time.Duration) {
	old := q.rtt.Load()
	if old == 0 {
		q.rtt.Store(int64(d))
		return
	}
	q.rtt.Store(old + (int64(d)-old)/8)
}

// grace is how long an offer may stand unclaimed, and how long the consumer
// second in line waits for the head to hand out items it could, before they
// are taken from a consumer that seems frozen or dead: a few hand-outs'
// time (each is some four round trips), so that such a consumer delays the
// others by that much, not by a session timeout. A live consumer passed
// over loses only its place in line.
func (q *Queue) grace() time.Duration {
	return min(max(16*time.Duration(q.rtt.Load()), 100*time.Millisecond), 2*time.Second)
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
