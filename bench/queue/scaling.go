package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ScaleLoop is one point of the consumer-scaling curve: fairqueue alone,
// Consumers consumers each taking a job, working on it for Work and acking
// it, while Producers producers keep about Backlog items pending.
type ScaleLoop struct {
	Consumers, Producers int
	Backlog              int
	Work                 time.Duration
	Warmup, Duration     time.Duration
	Payload              int
	// For fairqueue.Work: handlers per consumer (0: 1) and items held
	// ahead (Prefetch, as Loop's); for fairqueue, items per PutMany (0: one
	// per Put).
	Handlers, Prefetch, Batch int
}

// ScaleResult is what one point measured.
type ScaleResult struct {
	ScaleLoop
	Result
	// MinBacklog is the fewest items pending at any sample in the window
	// (every 2 ms): 0 means consumers may have waited for items, and the
	// point measures the producers rather than the consumers.
	MinBacklog int64
}

// Ideal is what the consumers would ack if taking and acking cost nothing:
// Consumers jobs per Work.
func (r ScaleResult) Ideal() float64 {
	if r.Work <= 0 {
		return math.Inf(1)
	}
	return float64(r.Consumers) / r.Work.Seconds()
}

// Scale runs one point on a fresh queue, with impl (FairQueue or Floor):
// the producers first fill the queue to Backlog items (untimed), then
// everyone runs; a producer puts only while fewer than Backlog items are
// pending (put and not yet taken), so that consumers always find work
// without the producers taking more of the server than needed.
func (b *Bench) Scale(ctx context.Context, impl Impl, l ScaleLoop) (res ScaleResult, err error) {
	res.ScaleLoop = l
	path := b.newPath(fmt.Sprintf("scale-%s-%d", impl, l.Consumers))
	defer func() { err = errors.Join(err, deleteTree(b.admin, path)) }()
	reqs := &Requests{}
	var puts []func() error
	var run func(w window) []Report
	var put, taken atomic.Int64
	pending := func() int64 { return put.Load() - taken.Load() }
	gate := func() bool { return pending() < int64(l.Backlog) }
	lp := Loop{Producers: l.Producers, Consumers: l.Consumers, Warmup: l.Warmup, Duration: l.Duration, Work: l.Work, Payload: l.Payload}
	payload := bytes.Repeat([]byte{'x'}, l.Payload)
	switch impl {
	case FairQueue, FairQueueWork:
		qs, closeAll, err := openFairqueues(ctx, b.servers, path, l.Producers, l.Consumers, reqs)
		defer closeAll()
		if err != nil {
			return res, err
		}
		for _, q := range qs[:l.Producers] {
			puts = append(puts, func() error {
				pctx, cancel := context.WithTimeout(ctx, opTimeout)
				defer cancel()
				_, err := q.Put(pctx, payload)
				return err
			})

		}
		run = func(w window) []Report {
			reports := make([]Report, len(qs))
			var wg sync.WaitGroup
			for i, q := range qs {
				wg.Go(func() {
					if i < l.Producers {
						reports[i] = produce(ctx, q, fmt.Sprintf("producer-%d", i), payload, l.Batch, w, gate, &put)
					} else if impl == FairQueueWork {
						reports[i] = work(ctx, q, fmt.Sprintf("consumer-%d", i-l.Producers), w, l.Work, max(l.Handlers, 1), l.Prefetch, &taken)
					} else {
						reports[i] = consume(ctx, q, fmt.Sprintf("consumer-%d", i-l.Producers), w, l.Work, &taken)
					}
				})
			}
			wg.Wait()
			return reports
		}
	case Floor:
		fw, err := openFloor(ctx, b.servers, path, l.Producers, l.Consumers, reqs)
		defer fw.close()
		if err != nil {
			return res, err
		}
		for _, conn := range fw.conns[:l.Producers] {
			puts = append(puts, func() error { return fw.f.put(conn, payload) })
		}
		run = func(w window) []Report { return fw.run(ctx, lp, w, gate, &put, &taken) }
	default:
		return res, fmt.Errorf("the scaling curve runs fairqueue, fairqueue.Work and the floor, not %s", impl)
	}

	// Fill the queue: each producer reserves an item, then puts it.
	var wg sync.WaitGroup
	fillErrs := make([]error, l.Producers)
	for i, p := range puts {
		wg.Go(func() {
			for put.Add(1) <= int64(l.Backlog) {
				if err := p(); err != nil {
					fillErrs[i] = fmt.Errorf("fill: %w", err)
					return
				}
			}
			put.Add(-1) // the reservation past the end
		})
	}
	wg.Wait()
	if err := errors.Join(fillErrs...); err != nil {
		return res, err
	}

	w := newWindow(time.Now(), lp)
	counted := reqs.during(w)
	var reports []Report
	wg.Go(func() { reports = run(w) })
	// Sample the backlog through the window.
	res.MinBacklog = math.MaxInt64
	tick := time.NewTicker(2 * time.Millisecond)
	for now := range tick.C {
		if !now.Before(w.end) {
			break
		}
		if w.in(now) {
			res.MinBacklog = min(res.MinBacklog, pending())
		}
	}
	tick.Stop()
	wg.Wait()
	res.Result, err = sum(impl, l.Duration, reports)
	res.Counted = true
	res.Counts = counted()
	return res, err
}
