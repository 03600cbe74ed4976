package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
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
// each delivery, up to last (0 <= first <= last; first 0: given back at
// once, with Nack). Default: 1s, up to 5m.
func WithBackoff(first, last time.Duration) WorkOption {
	return func(o *workOptions) {
		if first < 0 || last < first {
			o.errs = append(o.errs, fmt.Errorf("%w: back-off %v up to %v: want 0 <= first <= last", zkrecipes.ErrInvalidArgument, first, last))
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
// (or, at the head of the line, in the hand-out's own). It joins the line
// in the multi of the acks sent at that moment (see Put): handlers that
// finish together are acked together, and stand in line again, all in one
// write. A handler's error, or panic (recovered, and logged with its
// stack), gives the job back with NackAfter, held for the back-off
// (WithBackoff); a job delivered WithMaxAttempts times goes to the dead
// letters instead. A job whose handler is still running when ctx ends is
// given back at once.
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
	wk := &worker{q: q, idle: o.handlers, freed: make(chan struct{}, 1), nodes: make(chan *waiter, 1)}
	jobs := make(chan *Job, o.handlers)
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
	select {
	case w := <-wk.nodes:
		if w != nil {
			w.leave() // put in line by an ack as ctx ended
		}
	default:
	}
	if err := q.s.Err(); err != nil {
		return fmt.Errorf("fairqueue: work: %w", err)
	}
	return context.Cause(ctx)
}

// worker is Work's state: how many handlers are free, and whether a node of
// ours stands in line for them, or is on its way (standing).
type worker struct {
	q        *Queue
	mu       sync.Mutex
	idle     int
	standing bool
	freed    chan struct{} // idle went up
	nodes    chan *waiter  // the node an ack put in line (nil: none)
}

// loop stands in line for the free handlers and hands them the jobs, until
// ctx ends or the session is over.
func (wk *worker) loop(ctx context.Context, jobs chan<- *Job) {
	q := wk.q
	for {
		var w *waiter
		wk.mu.Lock()
		idle, carried := wk.idle, wk.standing
		wk.standing = idle > 0
		wk.mu.Unlock()
		switch {
		case idle == 0:
			select {
			case <-wk.freed:
			case <-ctx.Done():
			case <-q.s.Done():
			}
			if ctx.Err() != nil || q.s.Err() != nil {
				return
			}
			continue
		case carried:
			select { // a handler's ack is putting our node in line
			case w = <-wk.nodes:
			case <-ctx.Done():
				return
			}
		default:
			w = wk.join(ctx)
		}
		js, err := q.take(ctx, w, wk.free()) // a nil w: take joins
		wk.mu.Lock()
		wk.idle -= len(js)
		wk.standing = false
		wk.mu.Unlock()
		for _, j := range js {
			jobs <- j
		}
		switch {
		case ctx.Err() != nil || q.s.Err() != nil:
			return
		case err != nil:
			q.log.Warn("fairqueue: work: take failed; taking again", "err", err)
			time.Sleep(q.grace())
		}
	}
}

func (wk *worker) free() int {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.idle
}

// joinReq is the create of a node of ours in line, for the acks' group (see
// ackReq): made as its batch is, it wants as many jobs as handlers are free
// then (the handlers that finish together are acked together). Its name
// starts with base; *built is set when it is made (read it once the
// group's call has returned).
func (wk *worker) joinReq(built *bool) (ackReq, string, error) {
	base, err := line.NewPrefix(&line.Spec{})
	if err != nil {
		return ackReq{}, "", err
	}
	return ackReq{join: true, build: func() []any {
		*built = true
		prefix := base + wk.q.lineSpec(wk.free()).Marker
		return []any{&zk.CreateRequest{Path: wk.q.line + "/" + prefix, Data: []byte{}, Acl: wk.q.acl, Flags: zk.FlagEphemeralSequential}}
	}}, base, nil
}

// join puts a node of ours in line with the acks sent at that moment; nil
// if it was not made (take then joins on its own).
func (wk *worker) join(ctx context.Context) *waiter {
	var built bool
	req, base, err := wk.joinReq(&built)
	if err != nil {
		return nil
	}
	rs, inFlight, err := wk.q.acks.run(ctx, req)
	switch {
	case err != nil && inFlight != nil:
		// Look for our node once the multi is answered: looked for before,
		// a node it makes after is left in line.
		wk.q.s.Cleanup("abandoned join in "+wk.q.line, func() error {
			select {
			case <-inFlight:
			case <-wk.q.s.Done():
				return nil // its nodes go with it
			}
			return wk.q.leavePrefixed(base)
		})
		return nil
	case err != nil:
		return nil
	}
	return wk.joined(ctx, &rs[0], base, built)
}

// joined is our node from a join's outcome r; nil if none was made (or it
// was never sent: not built). With r nil (its reply lost), it looks for the
// node by its name's start, base.
func (wk *worker) joined(ctx context.Context, r *ackResult, base string, built bool) *waiter {
	q := wk.q
	switch {
	case r != nil && r.err == nil:
		w := q.newWaiter(r.res[0].String)
		if w.setAhead(r.listing) != nil {
			w.ahead = nil // the listing missed our node: list again
		}
		return w
	case r != nil && !session.IsConnErr(r.err), !built:
		return nil // refused (line/ reaped), or never sent
	}
	p, found, err := line.Find(ctx, q.s, q.line, base)
	if err != nil {
		q.s.Cleanup("ambiguous join in "+q.line, func() error { return q.leavePrefixed(base) })
		return nil
	}
	if !found {
		return nil
	}
	return q.newWaiter(p)
}

// settle frees the handler of j, then settles j after its handler returned
// herr. The first handler freed while no node of ours stands in line puts
// one there with its ack, in the same multi; it frees itself first, so
// that the node wants it too.
func (wk *worker) settle(ctx context.Context, j *Job, herr error, backoff [2]time.Duration) {
	q := wk.q
	wk.mu.Lock()
	wk.idle++
	carry := herr == nil && ctx.Err() == nil && !wk.standing
	wk.standing = wk.standing || carry
	wk.mu.Unlock()
	select {
	case wk.freed <- struct{}{}:
	default:
	}
	bg := context.WithoutCancel(ctx)
	switch {
	case carry:
		var built bool
		req, base, err := wk.joinReq(&built)
		if err != nil {
			q.settled(j, "ack", j.Ack(bg))
			wk.nodes <- nil
			return
		}
		r, err := j.ack(bg, &req)
		q.settled(j, "ack", err)
		wk.nodes <- wk.joined(bg, r, base, built)
	case herr == nil:
		q.settled(j, "ack", j.Ack(bg))
	case ctx.Err() != nil, backoff[0] == 0:
		q.settled(j, "nack", j.Nack(bg))
	default:
		d := min(backoff[0]<<min(j.Attempt()-1, 30), backoff[1])
		q.log.Info("fairqueue: work: handler failed; job given back", "id", j.ID(), "attempt", j.Attempt(), "backoff", d, "err", herr)
		q.settled(j, "nack", j.NackAfter(bg, d))
	}
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
