package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/zkrecipes/zkrecipes"
)

// Handler does one job. It returns nil when the job is done, and Work acks
// it; an error, and Work gives the job back to be delivered again after a
// back-off (see WithBackoff). ctx ends when Work's does, and when the job's
// delivery is lost (j.Done): the job is then on its way to another consumer.
type Handler func(ctx context.Context, j *Job) error

// WorkOption configures Work.
type WorkOption func(*workOptions)

type workOptions struct {
	handlers, prefetch int
	backoff            [2]time.Duration
	ackLinger          time.Duration
	errs               []error
}

// withAckLinger sets how long an ack waits for its lot (tests).
func withAckLinger(d time.Duration) WorkOption {
	return func(o *workOptions) { o.ackLinger = d }
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

// WithPrefetch has Work hold n items ahead of its handlers (n >= 0), so
// that a handler that finishes never waits for a hand-out to start the
// next job. An item held ahead is delivered to this consumer (it counts in
// Attempt, and a consumer that dies gives it back as it does its other
// jobs), yet no handler runs it yet. Default: 1; 0 holds nothing ahead.
func WithPrefetch(n int) WorkOption {
	return func(o *workOptions) {
		if n < 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: prefetch %d: at least 0", zkrecipes.ErrInvalidArgument, n))
			return
		}
		o.prefetch = n
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

// Work takes jobs and runs h on each, with WithHandlers handlers at once
// and WithPrefetch items held ahead, until ctx ends, the Queue is closed or
// the session is over; it returns then, once every handler has returned,
// with ctx's cause, an error wrapping ErrClosed, or the session's error.
//
// Work stands in line with tickets for one item per handler and per item
// held ahead, and reads the items it is offered unless their offers carry
// them. Acks go in lots of one job per handler (one at a time with the
// default one handler): a finished job's ack waits, at most 10ms, for the
// lot's others, and one multi acks them all and puts a ticket in line for
// as many items, so that Work is handed out, and reads its offers, once
// per lot; the items held ahead keep handlers busy while a lot's ticket
// waits for its hand-out. A handler's error, or panic
// (recovered, and logged with its stack), gives the job back with
// NackAfter, held for the back-off (WithBackoff); a job delivered
// WithMaxAttempts times goes to the dead letters instead. When Work stops,
// it waits for the handlers still running (their ctx ends with Work's): a
// job whose handler then returns nil is acked, one whose handler failed is
// given back (at once if ctx ended, else held for its back-off), and every
// item held ahead is given back at once (at its WithMaxAttempts-th
// delivery, to the dead letters).
func (q *Queue) Work(ctx context.Context, h Handler, opts ...WorkOption) error {
	o := workOptions{handlers: 1, prefetch: 1, backoff: [2]time.Duration{time.Second, 5 * time.Minute}, ackLinger: ackLinger}
	for _, opt := range opts {
		opt(&o)
	}
	if err := errors.Join(o.errs...); err != nil {
		return fmt.Errorf("fairqueue: work: %w", err)
	}
	if h == nil {
		return fmt.Errorf("fairqueue: work: %w: nil handler", zkrecipes.ErrInvalidArgument)
	}
	if err := q.consume(ctx); err != nil {
		return fmt.Errorf("fairqueue: work: %w", err)
	}
	credits := o.handlers + o.prefetch
	w := &worker{q: q, o: o, answers: make(chan answer, credits), waiting: map[string]bool{}, flushAt: o.handlers}
	w.stand(ctx, credits, "")
	jobs := make(chan *Job, credits)
	// A job is settled off its handler's goroutine, so that the handler
	// goes on with the next: by one of as many settlers as credits, so
	// that a handler never waits for one (a job holds its credit until
	// settled). They stay, and keep the stack that an ack grows.
	done := make(chan ran, credits)
	var wg, settlers sync.WaitGroup
	for range credits {
		settlers.Go(func() {
			for r := range done {
				w.settle(ctx, r.j, r.err)
			}
		})
	}
	for range o.handlers {
		wg.Go(func() {
			for j := range jobs {
				done <- ran{j, run(ctx, h, j)}
			}
		})
	}
	err := w.loop(ctx, jobs)
	for len(jobs) > 0 { // held ahead, not started
		q.settled(<-jobs, "nack", nil, true)
	}
	close(jobs)
	wg.Wait()
	close(done)
	w.flush() // the acks still waiting for their lot
	settlers.Wait()
	w.leave()
	if errors.Is(err, context.Cause(ctx)) {
		return err
	}
	return fmt.Errorf("fairqueue: work: %w", err)
}

// ran is a job whose handler returned err.
type ran struct {
	j   *Job
	err error
}

// worker is Work's state: its tickets waiting for an offer, where their
// offers go, and the acks waiting to go out together.
type worker struct {
	q       *Queue
	o       workOptions
	answers chan answer
	mu      sync.Mutex
	waiting map[string]bool
	stopped bool

	// Acks go out in lots: one multi acks flushAt jobs (one per handler)
	// and puts one ticket in line for as many items, so that the dispatcher
	// hands out, and the consumer reads its inbox, once per lot and not once
	// per job. An ack waits for its lot at most ackLinger: meanwhile the
	// items held ahead run. Lots of half the credits, the earlier rule, cost
	// the server a hand-out, an inbox write and read, and ticket writes per
	// 6 jobs, not per 16, with 16 handlers.
	flushAt int
	acks    chan struct{} // closed when the acks waiting go out
	queued  int           // acks waiting
	linger  *time.Timer
}

// ackLinger bounds how long a finished job's ack waits for its lot.
const ackLinger = 10 * time.Millisecond

// loop turns the offers into jobs for the handlers until Work stops, and
// says why it did.
func (w *worker) loop(ctx context.Context, jobs chan<- *Job) error {
	q := w.q
	for {
		var as []answer
		select {
		case a := <-w.answers:
			as = append(as, a)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-q.closing:
			return ErrClosed
		case <-q.s.Done():
			return q.s.Err()
		}
		for more := true; more; { // the answers of the same read come together
			select {
			case a := <-w.answers:
				as = append(as, a)
			default:
				more = false
			}
		}
		w.mu.Lock()
		for _, a := range as {
			delete(w.waiting, a.ticket)
		}
		w.mu.Unlock()
		jss, err := q.jobs(ctx, as...)
		if err != nil {
			continue // given back; ctx or the session ends the loop
		}
		for k, a := range as {
			// Items that did not come, or came gone, make no job: stand
			// for as many more.
			t, _ := parseTicket(a.ticket)
			w.stand(ctx, t.want-len(jss[k]), "")
			for _, j := range jss[k] {
				jobs <- j
			}
		}
	}
}

// stand puts a ticket for n items in line, unless Work has stopped; with
// a name, the ticket an ack made already (for one item, or shared with
// other acks').
func (w *worker) stand(ctx context.Context, n int, name string) {
	if n <= 0 && name == "" {
		return
	}
	var err error
	if name == "" {
		name, err = w.q.want(context.WithoutCancel(ctx), n, kindWork, w.answers)
	} else {
		w.q.in.expect(name, w.answers)
	}
	if err != nil {
		if w.q.s.Err() == nil {
			w.q.log.Warn("fairqueue: work: could not stand in line", "err", err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[name] = true
	if w.stopped {
		w.leaveLocked()
	}
}

// leave drops the tickets still waiting: an offer that came meanwhile is
// given back.
func (w *worker) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.leaveLocked()
}

func (w *worker) leaveLocked() {
	for name := range w.waiting {
		w.q.s.Cleanup("leave "+name, w.q.dropStep(name))
	}
	clear(w.waiting)
}

// settle settles j after its handler returned herr: an ack, which puts a
// ticket in line for the handler again in the same multi, unless Work is
// stopping; or the job given back, held for the back-off.
func (w *worker) settle(ctx context.Context, j *Job, herr error) {
	q := w.q
	bg := context.WithoutCancel(ctx)
	if herr == nil {
		w.awaitFlush()
	}
	again := ctx.Err() == nil // else Work is stopping: no ticket
	switch {
	case herr == nil && again:
		tag := newTag()
		name, err := j.ack(bg, 1, kindWork, tag)
		if err == nil && name == "" { // the ack's reply was lost
			var names []string
			if names, err = q.tagged(bg, tag); len(names) > 0 {
				name = names[0]
			}
		}
		q.settled(j, "ack", err, false)
		if err != nil {
			name = "" // nothing made: stand on our own
		}
		w.stand(ctx, 1, name)
		return
	case herr == nil:
		q.settled(j, "ack", j.Ack(bg), false)
	case !again, w.o.backoff[0] == 0:
		q.settled(j, "nack", j.Nack(bg), false)
	default:
		d := min(w.o.backoff[0]<<min(j.Attempt()-1, 30), w.o.backoff[1])
		q.log.Info("fairqueue: work: handler failed; job given back", "id", j.ID(), "attempt", j.Attempt(), "backoff", d, "err", herr)
		q.settled(j, "nack", j.NackAfter(bg, d), false)
	}
	if again {
		w.stand(ctx, 1, "")
	}
}

// awaitFlush waits until the ack of a finished job may go: when its lot is
// full, or ackLinger after the lot's first ack.
func (w *worker) awaitFlush() {
	if w.flushAt == 1 {
		return
	}
	w.mu.Lock()
	if w.acks == nil {
		w.acks = make(chan struct{})
		w.linger = time.AfterFunc(w.o.ackLinger, w.flush)
	}
	acks := w.acks
	w.queued++
	full := w.queued >= w.flushAt
	w.mu.Unlock()
	if full {
		w.flush()
	}
	<-acks
}

// flush lets the acks waiting for their lot go.
func (w *worker) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acks != nil {
		w.linger.Stop()
		close(w.acks)
		w.acks, w.queued = nil, 0
	}
}

// run runs h on j with a ctx that ends with Work's or with j's delivery,
// and turns a panic into an error.
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

// settled logs what a settlement that failed means; with nack, it gives j
// back first.
func (q *Queue) settled(j *Job, op string, err error, nack bool) {
	if nack {
		err = j.Nack(context.Background())
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrClaimLost):
		q.log.Warn("fairqueue: work: delivery lost before the "+op+"; the job will be delivered again", "id", j.ID(), "err", err)
	default:
		q.log.Warn("fairqueue: work: "+op+" not confirmed", "id", j.ID(), "err", err)
	}
}
