package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/batch"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Queue is a first-in, first-out job queue at one ZooKeeper path.
//
// Guarantees: items are handed out oldest first (by id), to consumers in
// the order they began to wait; no consumer (a loop of one Queue's Takes,
// or Work) is ever handed a lower id than it had before, except an item
// that came back (Nack, NackAfter, a consumer gone), whose Attempt says so
// (above 1); every item put is delivered until it is acked or moved to
// the dead-letter area (at least once: a consumer that dies mid-job causes
// a redelivery, which Job.Token and Job.Guard let a resource refuse once
// the next delivery began). Not guaranteed: an order between items put
// concurrently by different producers (each producer's own items keep
// their order), or exactly-once processing.
//
// A Queue is safe for concurrent use by many goroutines; producers and
// consumers may each have their own Queue on their own Session. A Queue
// that takes (Take, TryTake, Work) stands, until Close or the end of its
// session, as the queue's dispatcher (see the package documentation).
type Queue struct {
	s   *session.Session
	pub *zkrecipes.Session
	log *slog.Logger
	dir string
	acl []zk.ACL

	maxAttempts int
	bucketSize  int
	handedOut   func() // see withHandOutHook

	items, ready, consumers, dispatch, dead, held, delayed, keys string

	tailMu sync.Mutex
	tail   tail

	name   string // as a consumer: its inbox's and its tickets' (see ticketBase)
	in     *inbox
	spares spares

	// standing: this Queue stands as dispatcher (stop ends it, done is
	// closed when it has).
	mu        sync.Mutex
	closed    bool
	closing   chan struct{} // closed by Close
	standing  bool
	stop      context.CancelFunc
	done      chan struct{}
	unsettled map[string]int // the tickets of the Jobs not yet settled nor lost: how many Jobs each

	// puts and acks send concurrent Puts, and Acks (and tickets), in
	// shared multis.
	puts *batch.Group[putItem, putResult]
	acks *batch.Group[ackReq, ackResult]
	// readers read the items a consumer is offered, one goroutine each.
	readers *znode.Pool
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
		s: ss, pub: s, log: ss.Log().With("queue", path), dir: path, acl: o.acl,
		maxAttempts: o.maxAttempts, bucketSize: o.bucketSize, handedOut: o.handedOut,
		items: path + "/items", ready: path + "/ready", consumers: path + "/consumers", dispatch: path + "/dispatch",
		dead: path + "/dead", held: path + "/held", delayed: path + "/delayed", keys: path + "/keys",
		closing: make(chan struct{}), unsettled: map[string]int{},
	}
	q.name = consumerName(ss.ID(), newTag())
	q.in = &inbox{q: q, path: q.consumers + "/" + q.name,
		waiting: map[string]chan<- answer{}, answered: map[string]bool{}, early: map[string]answer{}}
	q.puts = &batch.Group[putItem, putResult]{Do: q.putBatch, Take: takePuts}
	q.acks = &batch.Group[ackReq, ackResult]{Do: q.ackBatch, Take: takeAcks}
	q.readers = znode.NewPool(q.closing, ss.Done())
	observePending(q)
	return q, nil
}

// consume readies the Queue to take: it stands as dispatcher (once) and
// has its inbox.
func (q *Queue) consume(ctx context.Context) error {
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
		return ErrClosed
	case !q.standing:
		q.standing = true
		cctx, stop := context.WithCancel(context.Background())
		q.stop, q.done = stop, make(chan struct{})
		go func() {
			defer close(q.done)
			q.campaign(cctx)
		}()
		go func() { // the session's end ends the campaign
			select {
			case <-q.s.Done():
				stop()
			case <-cctx.Done():
			}
		}()
	}
	q.mu.Unlock()
	return q.in.ensure(ctx)
}

// Close stops the Queue taking: it no longer stands as the queue's
// dispatcher, and if it was dispatching, another taking Queue is elected
// at once (a dispatcher that dies instead is replaced only once its
// session has expired). Its waiting tickets are dropped (an item offered
// to one meanwhile is given back). Jobs taken before stay valid until
// settled; Takes and Work in flight fail, and later ones fail at once,
// with errors wrapping ErrClosed. Put and the other calls that do not take
// go on working.
//
// Close waits for the dispatcher to stop and for the Queue's inbox to be
// removed (when a Job is still unsettled, the last one settled removes
// it), or until ctx ends: then it returns ctx's cause, and the removal
// goes on (ctx bounds only the wait). Otherwise it returns nil, and nil
// again if called again.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.closing)
	}
	stop, done := q.stop, q.done
	q.mu.Unlock()
	q.withdrawAll()
	if stop == nil {
		return nil
	}
	stop()
	// The inbox goes once the dispatcher has stopped, whatever becomes of
	// ctx, which bounds only the wait: left, it would stand until the
	// session's end.
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		q.s.Cleanup("remove "+q.in.path, func() error {
			<-done
			return q.in.remove(context.Background())
		})
	}()
	select {
	case <-removed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fairqueue: close: %w", context.Cause(ctx))
	}
}

// holding notes a Job on ticket until it is settled or lost (see holdEnded).
func (q *Queue) holding(j *Job) {
	q.mu.Lock()
	q.unsettled[j.ticket[len(q.ready)+1:]]++ // the Jobs of a lot share their ticket
	q.mu.Unlock()
}

// holdEnded is told, by its owner, that j's holding ended: a closed Queue's
// last Job removes the inbox. A Job lost while the session lives (another
// client deleted or wrote its ticket) gives its item back: the dispatcher
// takes the ticket's going for a settlement.
func (q *Queue) holdEnded(j *Job, lost bool) {
	if lost {
		sent := false
		q.s.Cleanup("give back "+j.id, func() error {
			if sent {
				// Sent, and its answer lost with the connection. Its
				// ticket is gone already, so nothing in the multi fails
				// if it landed: it would make a second node in held/.
				// While the item is as we got it, a node of its in held/
				// is ours.
				landed, err := q.givenBack(j.bucket, j.name)
				if err != nil || landed {
					return err
				}
			}
			sent = true
			_, err := q.sendBack(q.backOps(j.bucket, j.name, j.version, time.Now()))
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
				return nil // settled, or offered again since
			}
			return err
		})
	}
	name := j.ticket[len(q.ready)+1:]
	q.mu.Lock()
	if q.unsettled[name]--; q.unsettled[name] <= 0 {
		delete(q.unsettled, name)
	}
	last := q.closed && len(q.unsettled) == 0
	q.mu.Unlock()
	if last {
		q.s.Cleanup("remove "+q.in.path, func() error { return q.in.remove(context.Background()) })
	}
}

func (q *Queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

func (q *Queue) holds(ticket string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unsettled[ticket] > 0
}

func (q *Queue) bucketPath(n int64) string { return q.items + "/" + bucketName(n) }

// blobDir is where the blobs of bucket n's items are (see blobPrefix).
func (q *Queue) blobDir(n int64) string {
	return q.items + "/" + string(appendPadded([]byte(blobDirPrefix), n, 10))
}

// blobOf returns the path of the blob that holds the payload of bucket b's
// item name, and the payload's index in it; false for an item with its
// payload of its own.
func (q *Queue) blobOf(b int64, name string) (path string, idx int, ok bool) {
	blob, idx, ok := parseBlobRef(name)
	if !ok {
		return "", 0, false
	}
	return q.blobDir(b) + "/" + blob, idx, true
}

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

// Len returns the number of pending items: put and neither acked, handed
// out (offered to a consumer, and not given back) nor dead; an item put
// WithDelay counts once it is due and moved into the queue. It is a
// snapshot taken with one read per bucket and per consumer, not an atomic
// count: with puts and takes in flight it may be off by those.
func (q *Queue) Len(ctx context.Context) (int, error) {
	var r znode.Reads
	var bs []int64
	var tickets, consumers []string
	r.Do(func() (err error) { bs, err = q.listBuckets(ctx); return err })
	r.Do(func() (err error) { tickets, err = znode.Children(ctx, q.s, q.ready); return err })
	r.Do(func() (err error) { consumers, err = znode.Children(ctx, q.s, q.consumers); return err })
	if err := r.Wait(ctx); err != nil {
		return 0, fmt.Errorf("fairqueue: len: %w", err)
	}
	// Ask for every bucket's size and every inbox at once: the client
	// pipelines them.
	counts := make([]int32, len(bs))
	inboxes := make([][]byte, len(consumers))
	for i, b := range bs {
		r.Do(func() (err error) {
			counts[i], err = znode.Retry(ctx, q.s, func() (int32, error) {
				_, st, err := q.s.Conn().Exists(q.bucketPath(b))
				if err != nil || st == nil {
					return 0, err
				}
				return st.NumChildren, nil
			})
			return err
		})
	}
	for i, c := range consumers {
		r.Do(func() error {
			n, err := znode.Get(ctx, q.s, q.consumers+"/"+c)
			inboxes[i] = n.Data
			return ignoreNoNode(err)
		})
	}
	if err := r.Wait(ctx); err != nil {
		return 0, fmt.Errorf("fairqueue: len: %w", err)
	}
	n := 0
	for _, c := range counts {
		n += int(c)
	}
	// An offer stands while its ticket does.
	live := make(map[string]bool, len(tickets))
	for _, t := range tickets {
		live[t] = true
	}
	for _, data := range inboxes {
		for _, o := range parseInbox(data) {
			if o.name != "" && live[o.ticket] {
				n--
			}
		}
	}
	return max(0, n), nil
}
