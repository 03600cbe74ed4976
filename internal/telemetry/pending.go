package telemetry

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// The pending items of a queue are a number that only ZooKeeper knows: items
// are put and taken by every process. Reading it costs a listing of the
// queue's buckets and claims and a read per bucket (fairqueue's Queue.Len),
// too much to do on every collection without bound, and a count kept
// locally would know only this process's puts and takes. So the gauge is
// asynchronous, read on collection, but at most once per PendingMaxAge per
// queue (DefaultPendingMaxAge): a collection that comes sooner reports the
// count read before. A collection waits for a read at most pendingWait, then
// reports what it has, so an outage slows no exporter: the value is the
// last one learned, or none until one is. Only the queues this Session has a
// live Queue for are read, each path once, and none once the Session is
// over; with no SDK installed the callback never runs, and nothing is read.

// DefaultPendingMaxAge is how old a queue's pending count may be before a
// collection reads it again.
const DefaultPendingMaxAge = 15 * time.Second

// pendingWait bounds how long a collection waits for the counts it reads.
const pendingWait = 2 * time.Second

// pending is the queues a T observes.
type pending struct {
	mu     sync.Mutex
	queues map[string]*queueCount // by path
	reg    metric.Registration
	closed bool
	ctx    context.Context // ends with the session
	cancel context.CancelFunc
}

// queueCount is one queue's pending count, and the Queues that can read it.
type queueCount struct {
	mu      sync.Mutex
	sources []source
	n       int64
	known   bool
	read    time.Time // when last read, or tried
	reading bool
	gone    bool // no Queue left: dropped
}

type source struct {
	live  func() bool
	count func(context.Context) (int, error)
}

// ObservePending has collections report the pending items of the queue at
// path, read with count while live reports that the Queue that reads it is
// there (a Queue the program dropped is observed no more). Several Queues
// of one path are read as one.
func (t *T) ObservePending(path string, live func() bool, count func(context.Context) (int, error)) {
	if t == nil {
		return
	}
	p := &t.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.queues == nil {
		// No callback of ours runs yet: RegisterCallback cannot wait on p.mu.
		p.queues = map[string]*queueCount{}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		if reg, err := t.meter.RegisterCallback(t.observePending, t.itemPending); err == nil {
			p.reg = reg
		}
	}
	q := p.queues[path]
	if q != nil {
		q.mu.Lock()
		defer q.mu.Unlock()
		if !q.gone {
			q.sources = append(slices.DeleteFunc(q.sources, func(s source) bool { return !s.live() }), source{live, count})
			return
		}
	}
	p.queues[path] = &queueCount{sources: []source{{live, count}}}
}

// observePending is the callback of collections: it reads the counts that
// are due, waiting for them at most pendingWait, and reports their sum.
func (t *T) observePending(ctx context.Context, o metric.Observer) error {
	p := &t.pending
	p.mu.Lock()
	qs := make(map[string]*queueCount, len(p.queues))
	for path, q := range p.queues {
		qs[path] = q
	}
	sessionCtx := p.ctx
	p.mu.Unlock()
	if len(qs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pendingWait)
	defer cancel()
	defer context.AfterFunc(sessionCtx, cancel)()

	var wg sync.WaitGroup
	now := time.Now()
	for _, q := range qs {
		if q.due(now, t.pendingMaxAge) {
			wg.Go(func() { q.refresh(ctx) })
		}
	}
	wg.Wait()
	var total int64
	known := false
	for path, q := range qs {
		n, ok, gone := q.value()
		if gone {
			p.mu.Lock()
			if p.queues[path] == q {
				delete(p.queues, path)
			}
			p.mu.Unlock()
			continue
		}
		if ok {
			total, known = total+n, true
		}
	}
	if known {
		o.ObserveInt64(t.itemPending, total)
	}
	return nil
}

// due reports whether the count is to be read now, and if so takes the
// read on.
func (q *queueCount) due(now time.Time, maxAge time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.reading || q.gone || now.Sub(q.read) < maxAge {
		return false
	}
	q.reading, q.read = true, now
	return true
}

// refresh reads the count through the first live Queue; a failed read
// leaves the last count in place.
func (q *queueCount) refresh(ctx context.Context) {
	q.mu.Lock()
	q.sources = slices.DeleteFunc(q.sources, func(s source) bool { return !s.live() })
	if len(q.sources) == 0 {
		q.gone, q.reading = true, false
		q.mu.Unlock()
		return
	}
	count := q.sources[0].count
	q.mu.Unlock()

	n, err := count(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reading = false
	if err == nil {
		q.n, q.known = int64(n), true
	}
}

func (q *queueCount) value() (n int64, known, gone bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.known, q.gone
}

// close stops the observing, for good: the session is over.
func (p *pending) close() {
	p.mu.Lock()
	p.closed = true
	p.queues = nil
	reg, cancel := p.reg, p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel() // a collection under way stops waiting for its reads
	}
	if reg != nil {
		// Outside p.mu: Unregister waits for a collection under way, whose
		// callback takes p.mu.
		_ = reg.Unregister()
	}
}
