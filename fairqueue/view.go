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

// view is what one look at the queue showed a consumer.
type view struct {
	// avail: the items a consumer may claim now (not claimed, not held),
	// oldest first, from the oldest buckets: at least want of them when
	// there are that many.
	avail []candidate
	// ahead: how many consumers wait in line ahead of us (all of them when
	// we are not in line).
	ahead int
	// next: when the next held item or delayed entry comes due; zero if
	// none.
	next time.Time
	// due: delayed entries whose time has come, to move into the queue.
	due []string
	// watches fire on what would change the view (with watch set).
	watches []<-chan zk.Event
}

// candidate is an item a consumer may claim.
type candidate struct {
	bucket, seq int64
	name        string // the item's node
	held        string // its node in held/, when it was held and is free now
}

func (c candidate) id() string { return itemID(c.bucket, c.seq) }

// look reads the queue, every read in one round trip: the line (only its
// size, unless me is in it), the claims, the held items, the delayed
// entries and the oldest bucket; more buckets in order when the first holds
// too few items for us. With watch set, it leaves watches on what
// can bring a consumer an item: a new bucket or item, a claim that ends, a
// delayed entry.
func (q *Queue) look(ctx context.Context, me *line.Entry, watch bool) (*view, error) {
	begin := time.Now()
	v := &view{}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		errs    []error
		claims  []string
		held    []string
		delayed []string
	)
	add := func(ev <-chan zk.Event, err error) {
		mu.Lock()
		defer mu.Unlock()
		if ev != nil {
			v.watches = append(v.watches, ev)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	list := func(dir string, into *[]string, watchIt bool) {
		wg.Go(func() {
			if !watchIt {
				names, err := znode.Children(ctx, q.s, dir)
				*into = names
				add(nil, err)
				return
			}
			names, ev, err := q.listW(ctx, dir)
			*into = names
			add(ev, err)
		})
	}
	wg.Go(func() {
		if me == nil {
			st, err := znode.Retry(ctx, q.s, func() (*zk.Stat, error) {
				_, st, err := q.s.Conn().Exists(q.line)
				return st, err
			})
			if st != nil {
				v.ahead = int(st.NumChildren)
			}
			add(nil, err)
			return
		}
		names, err := znode.Children(ctx, q.s, q.line)
		l, _ := line.Parse(names, line.Consumer)
		v.ahead = line.Index(l, me.Name())
		if err == nil && v.ahead < 0 {
			err = fmt.Errorf("%w: %s vanished", errLineLost, me.Path())
		}
		add(nil, err)
	})
	list(q.claims, &claims, watch)
	list(q.held, &held, false) // held items change only with claims, which are watched
	list(q.delayed, &delayed, watch)

	buckets := q.cachedBuckets()
	firstB := int64(-1)
	var first []string
	var ferr error
	if len(buckets) > 0 {
		firstB = buckets[0]
		wg.Go(func() { first, ferr = znode.Children(ctx, q.s, q.bucketPath(firstB)) })
	}
	relisted := watch || len(buckets) == 0
	if relisted {
		// A new bucket is news; with none known, learn them.
		var names []string
		var ev <-chan zk.Event
		var err error
		if watch {
			names, ev, err = q.listW(ctx, q.items)
		} else {
			names, err = znode.Children(ctx, q.s, q.items)
		}
		add(ev, err)
		if err == nil {
			buckets = q.setBuckets(names)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	q.noteRTT(time.Since(begin))

	now := time.Now()
	for _, name := range delayed {
		if due, _, ok := parseDelayed(name); ok {
			if !due.After(now) {
				v.due = append(v.due, name)
			} else {
				v.next = earliest(v.next, due)
			}
		}
	}
	claimed := make(map[string]bool, len(claims))
	for _, id := range claims {
		claimed[id] = true
	}
	holds := make(map[string]string, len(held))
	for _, name := range held {
		id, until, ok := parseHeld(name)
		switch {
		case !ok:
		case until.After(now):
			claimed[id] = true // not before then
			v.next = earliest(v.next, until)
		default:
			holds[id] = name
		}
	}

	// The buckets, oldest first, until enough is found: one more than the
	// consumers ahead of us, so that we know whether one is ours. The first
	// one's listing came with the others; the list of buckets is learnt
	// again when it runs out.
	want := v.ahead + 1
	scanned := int64(-1)
	for i := 0; len(v.avail) < want; i++ {
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
		names, err := first, ferr
		if b != firstB {
			names, err = znode.Children(ctx, q.s, q.bucketPath(b))
		}
		if err != nil {
			return nil, err
		}
		newest := i == len(buckets)-1
		if watch && newest {
			// New items arrive in the newest bucket.
			var ev <-chan zk.Event
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
			if seq, _, ok := parseItem(name); ok && !claimed[itemID(b, seq)] {
				items = append(items, candidate{bucket: b, seq: seq, name: name, held: holds[itemID(b, seq)]})
			}
		}
		slices.SortFunc(items, func(a, c candidate) int { return cmp.Compare(a.seq, c.seq) })
		v.avail = append(v.avail, items...)
	}
	return v, nil
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

// forgetBucket drops b from the cache, once found drained or gone.
func (q *Queue) forgetBucket(b int64) {
	q.bucketsMu.Lock()
	defer q.bucketsMu.Unlock()
	q.buckets = slices.DeleteFunc(q.buckets, func(x int64) bool { return x == b })
}

// dropBucket deletes a drained bucket, other than the newest. A producer
// that put into it after our listing makes the delete fail (not empty),
// which is fine; one that puts after the delete finds it gone and makes a
// newer bucket.
func (q *Queue) dropBucket(ctx context.Context, b int64) {
	q.forgetBucket(b)
	_, err := znode.Do(ctx, func() (struct{}, error) { return struct{}{}, q.s.Conn().Delete(q.bucketPath(b), -1) })
	if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
		q.log.Debug("fairqueue: could not delete drained bucket", "bucket", b, "err", err)
	}
}

// noteRTT folds the duration of a look into the running mean.
func (q *Queue) noteRTT(d time.Duration) {
	old := q.rtt.Load()
	if old == 0 {
		q.rtt.Store(int64(d))
		return
	}
	q.rtt.Store(old + (int64(d)-old)/8)
}

// grace is how long a consumer lets the consumers ahead of it claim an
// item before it claims the item itself: a few looks' time. A consumer
// that froze or died ahead of it so delays it by that much, not by a
// session timeout.
func (q *Queue) grace() time.Duration {
	return min(max(4*time.Duration(q.rtt.Load()), 2*time.Millisecond), 200*time.Millisecond)
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
