package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// opTimeout bounds each Put and Ack, so that a stuck server fails the round
// instead of hanging it.
const opTimeout = 30 * time.Second

// runFairqueue runs the loop with fairqueue in this process: one session
// and one Queue per worker, through fairqueue's public API only; reqs
// counts what the consumers' sessions send, the dispatcher's included
// (the queue's dispatcher is one of the consumers' Queues, elected among
// them: see fairqueue's documentation).
func runFairqueue(ctx context.Context, servers []string, path string, l Loop, reqs *Requests) ([]Report, func() Counts, error) {
	qs, closeAll, err := openFairqueues(ctx, servers, path, l.Producers, l.Consumers, reqs)
	defer closeAll()
	if err != nil {
		return nil, nil, err
	}
	payload := bytes.Repeat([]byte{'x'}, l.Payload)
	reports := make([]Report, len(qs))
	w := newWindow(time.Now(), l)
	counted := reqs.during(w)
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() {
			name := fmt.Sprintf("consumer-%d", i-l.Producers)
			switch {
			case i < l.Producers:
				reports[i] = produce(ctx, q, fmt.Sprintf("producer-%d", i), payload, l.Batch, w, nil, nil)
			case l.Work1 || l.Handlers > 0:
				reports[i] = work(ctx, q, name, w, l.Work, max(l.Handlers, 1), l.Prefetch, nil)
			default:
				reports[i] = consume(ctx, q, name, w, l.Work, nil)
			}
		})
	}
	wg.Wait()
	return reports, counted, nil
}

// connectAll connects producers sessions, then consumers sessions, through
// reqs' dialers (the producers' uncounted). closeAll closes the sessions opened, also on error.
func connectAll(ctx context.Context, servers []string, producers, consumers int, reqs *Requests) (ss []*zkrecipes.Session, closeAll func(), err error) {
	closeAll = func() {
		var wg sync.WaitGroup
		for _, s := range ss {
			wg.Go(func() { s.Close() })
		}
		wg.Wait()
	}
	for i := range producers + consumers {
		dial := reqs.Dial
		if i < producers {
			dial = reqs.DialProducer
		}
		s, err := zkrecipes.Connect(ctx, servers, zkrecipes.WithSessionTimeout(sessionTimeout), zkrecipes.WithDialer(dial))
		if err != nil {
			return nil, closeAll, err
		}
		ss = append(ss, s)
	}
	return ss, closeAll, nil
}

// openFairqueues connects the producers' and the consumers' sessions and
// opens the queue at path on each. closeAll closes the sessions opened,
// also on error.
func openFairqueues(ctx context.Context, servers []string, path string, producers, consumers int, reqs *Requests) (qs []*fairqueue.Queue, closeAll func(), err error) {
	ss, closeAll, err := connectAll(ctx, servers, producers, consumers, reqs)
	if err != nil {
		return nil, closeAll, err
	}
	for _, s := range ss {
		q, err := fairqueue.New(s, path)
		if err != nil {
			return nil, closeAll, err
		}
		qs = append(qs, q)
	}
	return qs, closeAll, nil
}

// produce puts until the window ends, one item per Put, or batch items
// per PutMany. If gate is set, it puts only while gate says so (and sleeps
// a moment otherwise); put, if set, counts every item put.
func produce(ctx context.Context, q *fairqueue.Queue, name string, payload []byte, batch int, w window, gate func() bool, put *atomic.Int64) Report {
	rep := Report{Worker: name}
	many := make([][]byte, max(batch, 1))
	for i := range many {
		many[i] = payload
	}
	for time.Now().Before(w.end) {
		if gate != nil && !gate() {
			time.Sleep(time.Millisecond)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		var err error
		if batch > 1 {
			_, err = q.PutMany(pctx, many)
		} else {
			_, err = q.Put(pctx, payload)
		}
		cancel()
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		n := int64(len(many))
		if put != nil {
			put.Add(n)
		}
		rep.PutsAll += n
		if w.in(time.Now()) {
			rep.Puts += n
		}
	}
	return rep
}

// work runs Work with handlers handlers, prefetch items held ahead
// (DefaultPrefetch: Work's default), until the window ends; a handler
// sleeps for work and returns nil (Work acks the job right after). taken,
// if set, counts every job handled. A job counts as acked when its handler
// returns: Work acks it then, in a multi shared with the other acks.
func work(ctx context.Context, q *fairqueue.Queue, name string, w window, work time.Duration, handlers, prefetch int, taken *atomic.Int64) Report {
	rep := Report{Worker: name}
	var mu sync.Mutex
	wctx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	opts := []fairqueue.WorkOption{fairqueue.WithHandlers(handlers)}
	if prefetch != DefaultPrefetch {
		opts = append(opts, fairqueue.WithPrefetch(prefetch))
	}
	err := q.Work(wctx, func(ctx context.Context, j *fairqueue.Job) error {
		if taken != nil {
			taken.Add(1)
		}
		if work > 0 {
			time.Sleep(work)
		}
		mu.Lock()
		defer mu.Unlock()
		rep.AckedAll++
		if w.in(time.Now()) {
			rep.Acked++
		}
		return nil
	}, opts...)
	if err != nil && wctx.Err() == nil {
		rep.Error = err.Error()
	}
	return rep
}

// consume takes, works and acks until the window ends; a Take still
// waiting then is given up. taken, if set, counts every item taken.
func consume(ctx context.Context, q *fairqueue.Queue, name string, w window, work time.Duration, taken *atomic.Int64) Report {
	rep := Report{Worker: name}
	tctx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	for {
		t0 := time.Now()
		if !t0.Before(w.end) {
			return rep
		}
		j, err := q.Take(tctx)
		if err != nil {
			if tctx.Err() != nil && ctx.Err() == nil {
				return rep // the window is over
			}
			rep.Error = err.Error()
			return rep
		}
		got := time.Now()
		if taken != nil {
			taken.Add(1)
		}
		if w.in(got) {
			rep.TakeUS = append(rep.TakeUS, got.Sub(t0).Microseconds())
		}
		if work > 0 {
			time.Sleep(work)
		}
		actx, cancelAck := context.WithTimeout(ctx, opTimeout)
		err = j.Ack(actx)
		cancelAck()
		if err != nil {
			if errors.Is(err, fairqueue.ErrClaimLost) {
				err = fmt.Errorf("claim lost with no fault injected: %w", err)
			}
			rep.Error = err.Error()
			return rep
		}
		rep.AckedAll++
		if w.in(time.Now()) {
			rep.Acked++
		}
	}
}
