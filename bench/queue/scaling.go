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

// Scale runs one point on a fresh queue: the producers first fill the
// queue to Backlog items (untimed), then everyone runs; a producer puts
// only while fewer than Backlog items are pending (put and not yet taken),
// so that consumers always find work without the producers taking more of
// the server than needed.
func (b *Bench) Scale(ctx context.Context, l ScaleLoop) (res ScaleResult, err error) {
	res.ScaleLoop = l
	path := b.newPath(fmt.Sprintf("scale-%d", l.Consumers))
	defer func() { err = errors.Join(err, deleteTree(b.admin, path)) }()
	qs, closeAll, err := openFairqueues(ctx, b.servers, path, l.Producers+l.Consumers)
	defer closeAll()
	if err != nil {
		return res, err
	}
	payload := bytes.Repeat([]byte{'x'}, l.Payload)
	var put, taken atomic.Int64
	pending := func() int64 { return put.Load() - taken.Load() }
	gate := func() bool { return pending() < int64(l.Backlog) }

	// Fill the queue: each producer reserves an item, then puts it.
	var wg sync.WaitGroup
	fillErrs := make([]error, l.Producers)
	for i, q := range qs[:l.Producers] {
		wg.Go(func() {
			for put.Add(1) <= int64(l.Backlog) {
				pctx, cancel := context.WithTimeout(ctx, opTimeout)
				_, err := q.Put(pctx, payload)
				cancel()
				if err != nil {
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

	lp := Loop{Producers: l.Producers, Consumers: l.Consumers, Warmup: l.Warmup, Duration: l.Duration, Work: l.Work}
	w := newWindow(time.Now(), lp)
	reports := make([]Report, len(qs))
	for i, q := range qs {
		wg.Go(func() {
			if i < l.Producers {
				reports[i] = produce(ctx, q, fmt.Sprintf("producer-%d", i), payload, w, gate, &put)
			} else {
				reports[i] = consume(ctx, q, fmt.Sprintf("consumer-%d", i-l.Producers), w, l.Work, &taken)
			}
		})
	}
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
	res.Result, err = sum(FairQueue, l.Duration, reports)
	return res, err
}
