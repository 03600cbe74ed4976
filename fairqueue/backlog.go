package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// While items wait for consumers, a Take need not look at the whole queue.
// A look reads the line, the claims, the held and delayed items and a bucket
// of up to a thousand items, in requests that each wait their turn at the
// server; and consumers that all looked before each claim chased each other:
// what one saw free, another had claimed by the time its claim arrived, and
// every lost claim cost a round trip.
//
// So a look that finds a backlog (enough items free, no consumer waiting in
// line) leaves its free items with the Queue, and the Takes of the next
// moment (defaultBacklogTTL) use them: each reads the oldest few in one
// round trip and claims the oldest that was never delivered (data version
// 0). That keeps what a look promises:
//   - Order: the backlog is the oldest free items of the look, oldest first,
//     and an item leaves it only once read: passed over only when it is gone
//     or was delivered before (so if it comes back, it comes back as a
//     redelivery). Anything put since is newer than all of it.
//   - Fairness: a backlog is made only when no consumer waits, and it gives
//     out only items never delivered, which a consumer that stood in line,
//     having found nothing free, had not seen.
//   - Items that come back (a lost claim, a hold that ends) and delayed items
//     that come due are found by the next look, at most defaultBacklogTTL
//     later; a Nack clears its own Queue's backlog, so that the item given
//     back is that Queue's next.

// defaultBacklogTTL is how long the items of a look serve Takes.
const defaultBacklogTTL = 100 * time.Millisecond

// backlogMin is the number of free items a look must see, with no consumer
// in line, to leave them as a backlog.
const backlogMin = 2 * readAhead

// maxReadWidth bounds the items a Take reads at once from the backlog.
const maxReadWidth = 8 * readAhead

// backlog is the free items of a Queue's last look, for the Takes that
// follow it.
type backlog struct {
	ttl time.Duration

	mu    sync.Mutex
	items []candidate // oldest first
	until time.Time
	width int // how many items the next Take reads at once
}

// keep leaves v's free items for the Takes of the next ttl, if v shows a
// backlog.
func (b *backlog) keep(v *view) {
	if v.ahead > 0 || len(v.avail) < backlogMin {
		return
	}
	items := slices.DeleteFunc(slices.Clone(v.avail), func(c candidate) bool { return c.held != "" })
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items, b.until = items, time.Now().Add(b.ttl)
}

// front returns the oldest items, as many as a Take reads at once; none once
// the backlog's time is over.
func (b *backlog) front() []candidate {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Now().After(b.until) {
		b.items = nil
	}
	return slices.Clone(b.items[:min(max(b.width, readAhead), len(b.items))])
}

// stale records that a Take found n items taken by others before its own
// (or none of its own, in n items): the next Take reads that many more, in
// the same round trip. The more consumers share the queue, the more of the
// backlog they take between two Takes of one of them.
func (b *backlog) stale(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.width = min(n+readAhead, maxReadWidth)
}

// drop removes c: it is ours, someone else's or gone.
func (b *backlog) drop(c candidate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items = slices.DeleteFunc(b.items, func(x candidate) bool { return x.bucket == c.bucket && x.seq == c.seq })
}

// clear forgets the backlog: the next Take looks.
func (b *backlog) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items = nil
}

// takeBacklog claims the oldest item of the backlog never delivered, or
// returns nil, nil when it finds none: then a look decides. It reads one
// batch of items, in one round trip.
func (q *Queue) takeBacklog(ctx context.Context) (*Job, error) {
	cs := q.backlog.front()
	if len(cs) == 0 {
		return nil, nil
	}
	nodes, errs := q.readItems(ctx, cs)
	for i, c := range cs {
		err := errs[i]
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			// Not read: it stays, for passing over an item unread could
			// leave it free behind a newer one we take.
			return nil, fmt.Errorf("read %s: %w", q.itemPath(c), err)
		}
		q.backlog.drop(c) // read: whatever comes next, it is not for the backlog again
		if err != nil || nodes[i].Stat.Version > 0 {
			continue // acked meanwhile, or delivered before (claimed now, or for a look to find)
		}
		j, err := q.claim(ctx, "", c, nodes[i])
		if j != nil || err != nil {
			q.backlog.stale(i)
			return j, err
		}
	}
	q.backlog.stale(2 * len(cs))
	return nil, nil
}
