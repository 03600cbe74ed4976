package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
)

// Handler does one job. It returns nil when the job is done, and Work acks
// it; an error, and Work gives the job back to be delivered again after a
// back-off (see WithBackoff). ctx ends when Work's does, and when the job's
// claim is lost (j.Done): the job is then on its way to another consumer.
type Handler func(ctx context.Context, j *Job) error

// WorkOption configures Work.
type WorkOption func(*workOptions)

type workOptions struct {
	handlers int
	backoff  [2]time.Duration
	errs     []error
}

// WithHandlers runs n handlers at once (n >= 1), all on the Queue's
// session. Default: 1.
func WithHandlers(n int) WorkOption {
	return func(o *workOptions) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("%w: %d handlers: at least 1", zkrecipes.ErrInvalidArgument, n))
			return
		}
		o.handlers = n
	}
}

// WithBackoff sets how long a job whose handler failed is held back before
// it is delivered again: first after its first delivery, doubling with
// each delivery, up to last (0 < first <= last). Default: 1s, up to 5m.
func WithBackoff(first, last time.Duration) WorkOption {
	return func(o *workOptions) {
		if first <= 0 || last < first {
			o.errs = append(o.errs, fmt.Errorf("%w: back-off %v up to %v: want 0 < first <= last", zkrecipes.ErrInvalidArgument, first, last))
			return
		}
		o.backoff = [2]time.Duration{first, last}
	}
}

// Work takes jobs and runs h on each, with WithHandlers handlers at once,
// until ctx ends or the session is over; it returns then, once every
// handler has returned, with ctx's cause or the session's error.
//
// Work stands in the consumers' line as one consumer that wants as many
// jobs as it has handlers free: served, it claims them all in one multi
// (or, at the head of the line, in the hand-out's own). A job whose
// handler returns nil is acked; when that handler is the first to be free
// while no node of Work's stands in line, its ack puts one there in the
// same multi. A handler's error, or panic (recovered, and logged with its
// stack), gives the job back with NackAfter, held for the back-off
// (WithBackoff); a job delivered WithMaxAttempts times goes to the dead
// letters instead. A job whose handler is still running when ctx ends is
// given back at once. Concurrent acks share multis (see Put).
func (q *Queue) Work(ctx context.Context, h Handler, opts ...WorkOption) error {
	o := workOptions{handlers: 1, backoff: [2]time.Duration{time.Second, 5 * time.Minute}}
	for _, opt := range opts {
		opt(&o)
	}
	if err := errors.Join(o.errs...); err != nil {
		return fmt.Errorf("fairqueue: work: %w", err)
	}
	if h == nil {
		return fmt.Errorf("fairqueue: work: %w: nil handler", zkrecipes.ErrInvalidArgument)
	}
	wk := &worker{q: q, idle: o.handlers, wake: make(chan struct{}, 1), nodes: make(chan *waiter, o.handlers)}
	jobs := make(chan *Job)
	var wg sync.WaitGroup
	for range o.handlers {
		wg.Go(func() {
			for j := range jobs {
				wk.settle(ctx, j, run(ctx, h, j), o.backoff)
			}
		})
	}
	wk.loop(ctx, jobs)
	close(jobs)
	wg.Wait()
	close(wk.nodes)
	for w := range wk.nodes {
		if w != nil {
			w.leave() // made by an ack as ctx ended
		}
	}
	if err := q.s.Err(); err != nil {
		return fmt.Errorf("fairqueue: work: %w", err)
	}
	return context.Cause(ctx)
}

// worker is Work's state: how many handlers are free, and whether a node of
// ours stands in line for them (or is being made by an ack).
type worker struct {
	q        *Queue
	mu       sync.Mutex
	idle     int
	standing bool
	wake     chan struct{} // idle went up
	nodes    chan *waiter  // a node made by an ack (nil: none was)
}

// loop stands in line for the free handlers and hands them the jobs, until
// ctx ends or the session is over.
func (wk *worker) loop(ctx context.Context, jobs chan<- *Job) {
	for {
		w, want, ok := wk.next(ctx)
		if !ok {
			return
		}
		js, err := wk.q.take(ctx, w, want)
		wk.mu.Lock()
		wk.standing = false
		wk.idle -= len(js)
		wk.mu.Unlock()
		switch {
		case ctx.Err() != nil || wk.q.s.Err() != nil:
			for _, j := range js {
				wk.q.settled(j, "nack", j.Nack(context.WithoutCancel(ctx)))
			}
			return
		case err != nil:
			wk.q.log.Warn("fairqueue: work: take failed; taking again", "err", err)
		}
		for _, j := range js {
			jobs <- j
		}
	}
}

// next waits until handlers are free, and returns the node an ack made for
// them; or, when none is on its way, nil and how many are free: the loop
// joins the line itself.
func (wk *worker) next(ctx context.Context) (*waiter, int, bool) {
	for {
		wk.mu.Lock()
		idle, making := wk.idle, wk.standing
		if idle > 0 && !making {
			wk.standing = true
		}
		wk.mu.Unlock()
		wait := wk.wake
		switch {
		case ctx.Err() != nil || wk.q.s.Err() != nil:
			return nil, 0, false
		case idle > 0 && !making:
			return nil, idle, true
		case idle > 0:
			select {
			case w := <-wk.nodes:
				if w != nil {
					return w, wantOf(w.name), true
				}
				wk.mu.Lock()
				wk.standing = false // the ack made none: join
				wk.mu.Unlock()
				continue
			case <-ctx.Done():
				return nil, 0, false
			}
		}
		select {
		case <-wait:
		case <-ctx.Done():
		case <-wk.q.s.Done():
		}
	}
}

// settle settles j after its handler returned herr, and frees the handler.
// The ack of a handler that frees the first of the free handlers while no
// node of ours stands in line puts one there, wanting as many jobs as
// handlers are free, in the same multi.
func (wk *worker) settle(ctx context.Context, j *Job, herr error, backoff [2]time.Duration) {
	q := wk.q
	free := func(carry bool) int {
		wk.mu.Lock()
		defer wk.mu.Unlock()
		wk.idle++
		select {
		case wk.wake <- struct{}{}:
		default:
		}
		if !carry || wk.standing {
			return 0
		}
		wk.standing = true
		return wk.idle
	}
	bg := context.WithoutCancel(ctx)
	switch {
	case herr == nil && ctx.Err() == nil:
		if want := free(true); want > 0 {
			wk.nodes <- q.ackRejoin(bg, j, want)
		} else {
			q.settled(j, "ack", j.Ack(bg))
		}
		return
	case herr == nil:
		q.settled(j, "ack", j.Ack(bg))
	case ctx.Err() != nil:
		q.settled(j, "nack", j.Nack(bg))
	default:
		d := min(backoff[0]<<min(j.Attempt()-1, 30), backoff[1])
		q.log.Info("fairqueue: work: handler failed; job given back", "id", j.ID(), "attempt", j.Attempt(), "backoff", d, "err", herr)
		q.settled(j, "nack", j.NackAfter(bg, d))
	}
	free(false)
}

// run runs h on j with a ctx that ends with Work's or with j's claim, and
// turns a panic into an error.
func run(ctx context.Context, h Handler, j *Job) (err error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(j.o.Context(), func() { cancel(ErrClaimLost) })
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			j.q.log.Error("fairqueue: work: handler panicked", "id", j.ID(), "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(hctx, j)
}

// ackRejoin acks j and, in the same multi, puts a node of ours wanting want
// items at the end of the line, which it returns as our next place (nil if
// none was made, or it cannot be found: the next take joins anew).
func (q *Queue) ackRejoin(ctx context.Context, j *Job, want int) *waiter {
	prefix, err := line.NewPrefix(q.lineSpec(want))
	if err != nil {
		q.settled(j, "ack", j.Ack(ctx))
		return nil
	}
	p, err := j.ack(ctx, prefix)
	q.settled(j, "ack", err)
	if p == "" && err == nil {
		// Acked by a try whose reply was lost: its node may be there.
		var found bool
		if p, found, err = line.Find(ctx, q.s, q.line, prefix); err != nil || !found {
			if err != nil {
				q.s.Cleanup("ambiguous join in "+q.line, func() error { return q.leavePrefixed(prefix) })
			}
			return nil
		}
	}
	if p == "" {
		return nil
	}
	return q.newWaiter(p)
}

// leavePrefixed deletes our node named with prefix, if there is one.
func (q *Queue) leavePrefixed(prefix string) error {
	p, found, err := line.Find(context.Background(), q.s, q.line, prefix)
	if err != nil || !found {
		return err
	}
	return q.s.DeleteStep(p)()
}

// settled logs what a settlement that failed means.
func (q *Queue) settled(j *Job, op string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrClaimLost):
		q.log.Warn("fairqueue: work: claim lost before the "+op+"; the job will be delivered again", "id", j.ID(), "err", err)
	default:
		q.log.Warn("fairqueue: work: "+op+" not confirmed", "id", j.ID(), "err", err)
	}
}
