package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Queue is a first-in, first-out job queue at one ZooKeeper path.
//
// Guarantees: items are handed out oldest first (by id), to consumers in
// the order they began to wait; no consumer (a loop of one Queue's Takes,
// or one of Work's handlers) is ever handed a lower id than it had before,
// except when an item comes back (Nack, a lost claim, an offer left
// unclaimed); every item put is delivered until it is acked or moved to the
// dead-letter area (at least once: a consumer that dies mid-job causes a
// redelivery, so jobs should be idempotent). Not guaranteed: an order
// between items put concurrently by different producers (each producer's
// own items keep their order), or exactly-once processing.
//
// A Queue is safe for concurrent use by many goroutines; producers and
// consumers may each have their own Queue on their own Session.
type Queue struct {
	s   *session.Session
	log *slog.Logger
	dir string
	acl []zk.ACL

	maxAttempts int
	bucketSize  int

	items, claims, line, dead, held, delayed, keys string

	tailMu sync.Mutex
	tail   tail

	// bucketsMu guards buckets, the bucket numbers of the last listing of
	// items/, oldest first: consumers list items/ only when it runs out.
	bucketsMu sync.Mutex
	buckets   []int64
	// rtt is a running mean of how long a round trip takes (a look, a
	// consumer's look at where it stands), in nanoseconds: the grace a
	// consumer in line gets is some of them.
	rtt atomic.Int64
	// graceHead is the head of the line that this Queue's consumer second
	// in line last waited behind, graceFrom when the grace it has to hand
	// out items began, and graceSeen when one was last second behind it
	// (see waiter.second).
	graceMu              sync.Mutex
	graceHead            string
	graceFrom, graceSeen time.Time

	// puts and acks send concurrent Puts, and Acks, in shared multis.
	puts *group[putItem, putResult]
	acks *group[ackReq, ackResult]
}

// New returns the queue at path. It writes nothing: nodes are created by
// the first Put or Take, as containers the server removes once empty.
func New(s *zkrecipes.Session, path string, opts ...Option) (*Queue, error) {
	if s == nil {
		return nil, fmt.Errorf("fairqueue: %w: nil Session", zkrecipes.ErrInvalidArgument)
	}
	if err := zkrecipes.ValidatePath(path); err != nil {
		return nil, fmt.Errorf("fairqueue: %w", err)
	}
	o := options{bucketSize: defaultBucketSize}
	for _, opt := range opts {
		opt(&o)
	}
	if err := errors.Join(o.errs...); err != nil {
		return nil, fmt.Errorf("fairqueue: %w", err)
	}
	ss := session.Of(s)
	if err := ss.Err(); err != nil {
		return nil, fmt.Errorf("fairqueue: session is over: %w", err)
	}
	if o.acl == nil {
		o.acl = ss.ACL()
	}
	q := &Queue{
		s: ss, log: ss.Log().With("queue", path), dir: path, acl: o.acl,
		maxAttempts: o.maxAttempts, bucketSize: o.bucketSize,
		items: path + "/items", claims: path + "/claims", line: path + "/line", dead: path + "/dead",
		held: path + "/held", delayed: path + "/delayed", keys: path + "/keys",
	}
	q.puts = &group[putItem, putResult]{do: q.putBatch, take: takePuts}
	q.acks = &group[ackReq, ackResult]{do: q.ackBatch, take: takeAcks, linger: lingerAcks}
	observePending(q)
	return q, nil
}

func (q *Queue) bucketPath(n int64) string { return q.items + "/" + bucketName(n) }

// listBuckets lists the bucket numbers in order.
func (q *Queue) listBuckets(ctx context.Context) ([]int64, error) {
	names, err := znode.Children(ctx, q.s, q.items)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(names))
	for _, name := range names {
		if n, ok := parseBucket(name); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Len returns the number of pending items: put and neither acked, claimed
// nor dead. It is a snapshot taken with one read per bucket, not an atomic
// count: with puts and takes in flight it may be off by those.
func (q *Queue) Len(ctx context.Context) (int, error) {
	bs, err := q.listBuckets(ctx)
	if err != nil {
		return 0, fmt.Errorf("fairqueue: len: %w", err)
	}
	claims, err := znode.Children(ctx, q.s, q.claims)
	if err != nil {
		return 0, fmt.Errorf("fairqueue: len: %w", err)
	}
	// Ask for every bucket's size at once: the client pipelines them.
	counts := make([]int32, len(bs))
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, b := range bs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			counts[i], errs[i] = znode.Retry(ctx, q.s, func() (int32, error) {
				_, st, err := q.s.Conn().Exists(q.bucketPath(b))
				if err != nil || st == nil {
					return 0, err
				}
				return st.NumChildren, nil
			})
		}()
	}
	wg.Wait()
	n := 0
	for i := range bs {
		if errs[i] != nil {
			return 0, fmt.Errorf("fairqueue: len: %w", errs[i])
		}
		n += int(counts[i])
	}
	return max(0, n-len(claims)), nil
}
