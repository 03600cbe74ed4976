package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Take waits for the oldest pending item, claims it and returns it as a Job.
//
// Consumers wait in a line and are served in the order they called Take:
// the consumer at the head of the line hands out the oldest items, to
// itself and to the consumers behind it, in one multi; no one else chooses
// an item, so no claim loses a race. A consumer never takes a lower id than
// it took before, except an item that came back (Nack, a lost claim, an
// offer left unclaimed: its consumer too slow to claim it, or gone), which
// Job.Attempt tells: above 1. A head that froze or died is passed over by
// the consumer behind it after a grace of a few round trips.
//
// Take returns when ctx ends or the session is over, leaving the line
// without taking anything; it rides out disconnects the session survives.
func (q *Queue) Take(ctx context.Context) (*Job, error) {
	ctx, tw := q.s.Telemetry().StartWait(ctx, "fairqueue.Queue.Take", "")
	js, err := q.take(ctx, nil, 1)
	tw.End(ctx, err)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	return js[0], nil
}

// take stands in line (joining it, wanting want items, unless w stands in
// it already) until items are ours, and returns them, oldest first: at
// least one, at most as many as the node wants.
func (q *Queue) take(ctx context.Context, w *waiter, want int) ([]*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, err
	}
	var err error
	switch {
	case w == nil:
		if w, err = q.join(ctx, want); err != nil {
			return nil, err
		}
	case w.ahead == nil:
		err = w.relist(ctx) // a node made in another multi (Work's), not listed with it
	}
	var js []*Job
	if err == nil {
		js, err = w.take(ctx)
	}
	if err != nil {
		w.leave()
	}
	return js, err
}

// waiter is one consumer's node in the line: a Take's, or Work's. It
// belongs to the goroutine that takes with it.
type waiter struct {
	q     *Queue
	name  string
	path  string
	ahead []string // the nodes ahead of ours, in line order (nil: not listed yet): they can only go
	// The two nearest nodes ahead of ours as last read, and the events of
	// the watches on ours and on them (nil once fired, or when not set).
	prev   []*znode.Watch
	ownEv  <-chan zk.Event
	prevEv []<-chan zk.Event
	// gen is the session's NextReconnect taken before our last look at
	// where we stand: once it is closed, the watches set since may have
	// missed a change, and we read again rather than trust them.
	gen <-chan struct{}
	// offer: the items offered to us, once read; version: our node's data
	// version.
	offer   []item
	version int32
	// idle: our last look as the head found nothing to hand out, so the
	// next one leaves watches.
	idle bool
}

// role is where a waiter stands.
type role int

const (
	waiting role = iota // behind the two first waiting consumers
	offered             // our node holds an offer
	passed              // we were passed over
	head                // the first waiting consumer: it hands items out
	second              // the consumer behind the head: it takes over a frozen one
)

// take waits in line until items are ours. Our node is new: with no node
// ahead of it, we are the head, and need not read it.
func (w *waiter) take(ctx context.Context) ([]*Job, error) {
	r, err := w.stand(ctx, len(w.ahead) > 0)
	for err == nil {
		var js []*Job
		var wk wake
		switch r {
		case offered:
			js, err = w.claimOffer(ctx)
		case passed:
			err = w.rejoin(ctx)
		case head:
			js, wk, err = w.lead(ctx)
		case second:
			js, wk, err = w.second(ctx)
		default:
			wk = w.wait(ctx, nil, time.Time{})
			err = wk.err
		}
		if js != nil || err != nil {
			return js, err
		}
		r, err = w.next(ctx, r, wk)
	}
	return nil, err
}

// next says where we stand after wk woke us, sparing the reads that what
// woke us proves needless: a head serves the waiting consumers behind it in
// line order, and writes their offers in the reverse order, so a change of
// our node is seen before one of the node ahead of us; if that node was
// offered (or passed over) and ours was not, we are the head; if the one
// before it was, we are second.
func (w *waiter) next(ctx context.Context, was role, wk wake) (role, error) {
	select {
	case ev := <-w.ownEv: // nil when not set, or fired already
		w.ownEv = nil
		wk = wake{src: firedOwn, typ: ev.Type}
	default:
	}
	switch {
	case wk.src == firedOwn && wk.typ == zk.EventNodeDataChanged:
		return w.readOwn(ctx)
	case wk.src == firedPrev && wk.idx == 0 && wk.typ == zk.EventNodeDataChanged && w.ownEv != nil:
		return head, nil // our node's watch stands, and did not fire first
	case wk.src == firedPrev && wk.typ == zk.EventNodeDataChanged && was == waiting:
		return second, nil
	case was == head && (wk.src == firedItems || wk.src == firedTimer):
		return head, nil // no node ahead of ours can wait again
	}
	return w.stand(ctx, true)
}

// readOwn reads our node, leaving a watch on it.
func (w *waiter) readOwn(ctx context.Context) (role, error) {
	own, err := znode.WatchNode(ctx, w.q.s, w.path)
	if err != nil {
		return 0, w.q.ended(ctx, err)
	}
	return w.place(own)
}

// place takes our node as read, and says whether it holds an offer or was
// passed over (or waits still: then where, only the nodes ahead say).
func (w *waiter) place(own *znode.Watch) (role, error) {
	w.ownEv = own.Ev
	if own.Gone() {
		return 0, fmt.Errorf("%w: %s vanished", errLineLost, w.path)
	}
	if w.version = own.Stat.Version; w.version == 0 {
		return waiting, nil
	}
	var ok bool
	if w.offer, ok = parseOffer(own.Data); ok {
		return offered, nil
	}
	return passed, nil
}

// stand reads our node (withOwn) and the two nodes nearest ahead of it,
// leaving a watch on each, in one round trip, and says where we stand.
// Nodes only ever leave the line ahead of us, and a head offers to the
// waiting nodes in line order, so the waiting nodes are the line's tail: we
// are the head when the node ahead of us is not waiting, second when the
// one before that is not.
func (w *waiter) stand(ctx context.Context, withOwn bool) (role, error) {
	w.gen = w.q.s.NextReconnect()
	if len(w.ahead) == 0 && !withOwn {
		return head, nil
	}
	for relisted := false; ; relisted = true {
		var paths []string
		if withOwn {
			paths = append(paths, w.path)
		}
		for i := len(w.ahead) - 1; i >= max(0, len(w.ahead)-2); i-- {
			paths = append(paths, w.q.line+"/"+w.ahead[i])
		}
		ws := make([]*znode.Watch, len(paths))
		var r reads
		begin := time.Now()
		for i, p := range paths {
			r.do(func() (err error) { ws[i], err = znode.WatchNode(ctx, w.q.s, p); return err })
		}
		if err := r.wait(); err != nil {
			return 0, w.q.ended(ctx, err)
		}
		w.q.noteRTT(time.Since(begin))
		if withOwn {
			if r, err := w.place(ws[0]); r != waiting || err != nil {
				return r, err
			}
			ws = ws[1:]
		}
		gone := false
		for _, p := range ws {
			gone = gone || p.Gone()
		}
		if gone && !relisted {
			if err := w.relist(ctx); err != nil {
				return 0, err
			}
			continue
		}
		w.prev, w.prevEv = w.prev[:0], w.prevEv[:0]
		for _, p := range ws {
			if !p.Gone() {
				w.prev, w.prevEv = append(w.prev, p), append(w.prevEv, p.Ev)
			}
		}
		switch {
		case len(w.prev) == 0 || w.prev[0].Stat.Version > 0:
			return head, nil
		case len(w.prev) == 1 || w.prev[1].Stat.Version > 0:
			return second, nil
		}
		return waiting, nil
	}
}

// relist learns which nodes are still ahead of ours.
func (w *waiter) relist(ctx context.Context) error {
	names, err := znode.Children(ctx, w.q.s, w.q.line)
	if err != nil {
		return w.q.ended(ctx, err)
	}
	return w.setAhead(names)
}

// setAhead keeps, from a listing of the line, the nodes ahead of ours.
func (w *waiter) setAhead(names []string) error {
	l, foreign := line.Parse(names, line.Consumer)
	if foreign != "" {
		return fmt.Errorf("%w: %s holds %s", errMixed, w.q.line, foreign)
	}
	me := line.Index(l, w.name)
	if me < 0 {
		return fmt.Errorf("%w: %s vanished", errLineLost, w.path)
	}
	w.ahead = make([]string, 0, me)
	for _, n := range l[:me] {
		w.ahead = append(w.ahead, n.Name)
	}
	return nil
}

// second waits behind the head. If the head leaves items it could hand out
// unhanded for a grace (it froze, or died and its session lingers), we pass
// it over and hand them out ourselves: a frozen head delays the line by a
// grace, not a session timeout. An alive head so passed over loses only its
// place in line. The grace is counted from when items could be handed out
// (from the first look at this head, and from each change of the items
// while none could be), by the Queue, not by this Take: a Take that ends
// before the grace does, and the next one behind the same head soon after,
// count on from where it stopped.
func (w *waiter) second(ctx context.Context) ([]*Job, wake, error) {
	h := w.prev[0]
	head := h.Path[len(w.q.line)+1:]
	defer w.q.behind(head, false) // we were behind it until now
	deadline := w.q.behind(head, false).Add(w.q.grace())
	var items []<-chan zk.Event
	for {
		wk := w.wait(ctx, items, deadline)
		switch {
		case wk.err != nil:
			return nil, wk, wk.err
		case wk.src == firedItems:
			items, deadline = nil, w.q.behind(head, true).Add(w.q.grace())
			continue
		case wk.src != firedTimer:
			return nil, wk, nil // our node or those ahead changed
		}
		js, idle, err := w.handOut(ctx, &standing{node: head, version: h.Stat.Version}, true)
		if js != nil || err != nil || idle == nil {
			return js, wake{}, err
		}
		// Nothing the head could have handed out: wait for items.
		w.q.behind(head, true)
		items, deadline = idle.watches, idle.next
	}
}

// behind returns when this Queue began to count the grace of head, the
// head of the line as seen from the place second in it: now, if head is
// not the one it counts for, if restart says the count starts again, or if
// none of its Takes has been second behind head for a grace (it did not
// see what head had to hand out meanwhile).
func (q *Queue) behind(head string, restart bool) time.Time {
	q.graceMu.Lock()
	defer q.graceMu.Unlock()
	now := time.Now()
	if restart || q.graceHead != head || now.Sub(q.graceSeen) > q.grace() {
		q.graceHead, q.graceFrom = head, now
	}
	q.graceSeen = now
	return q.graceFrom
}

// wake is what woke a waiter: the source, the event's type, and for a node
// ahead, which (0: the nearest); or the error that ended the wait.
type wake struct {
	src, idx int
	typ      zk.EventType
	err      error
}

// The sources of a waiter's wake-up.
const (
	firedNone = iota // nothing known: look where we stand
	firedOwn
	firedPrev
	firedItems
	firedTimer
	firedReconnect
)

// wait waits until our node or one of the two ahead of it changes, one of
// items fires, the deadline comes (unless zero), or the client reconnects;
// it says which.
func (w *waiter) wait(ctx context.Context, items []<-chan zk.Event, deadline time.Time) wake {
	var timer <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timer = t.C
	}
	var cases []reflect.SelectCase
	var from []wake
	add := func(ch any, src, idx int) {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		from = append(from, wake{src: src, idx: idx})
	}
	add(w.ownEv, firedOwn, 0)
	for i, ev := range w.prevEv {
		add(ev, firedPrev, i)
	}
	for _, ev := range items {
		add(ev, firedItems, 0)
	}
	add(timer, firedTimer, 0)
	add(w.gen, firedReconnect, 0)
	done, ctxDone := len(cases), len(cases)+1
	add(w.q.s.Done(), 0, 0)
	add(ctx.Done(), 0, 0)

	i, v, _ := reflect.Select(cases)
	switch i {
	case done:
		return wake{err: fmt.Errorf("%w: %w", errLineLost, w.q.s.Err())}
	case ctxDone:
		return wake{err: context.Cause(ctx)}
	}
	wk := from[i]
	switch wk.src { // a watch fires once
	case firedOwn:
		w.ownEv = nil
	case firedPrev:
		w.prevEv[wk.idx] = nil
	}
	if ev, ok := v.Interface().(zk.Event); ok {
		if znode.Dropped(ev) {
			<-w.q.s.Done()
			return wake{err: fmt.Errorf("%w: %w", errLineLost, w.q.s.Err())}
		}
		wk.typ = ev.Type
	}
	return wk
}

// join puts a new node of ours, wanting want items, at the end of the line.
func (q *Queue) join(ctx context.Context, want int) (*waiter, error) {
	e, err := line.Join(ctx, q.s, q.lineSpec(want))
	if err != nil {
		return nil, err
	}
	w := q.newWaiter(e.Path())
	if first := e.Listing(); first != nil {
		err = w.setAhead(first)
	} else {
		err = w.relist(ctx)
	}
	if err != nil {
		w.leave()
		return nil, err
	}
	return w, nil
}

func (q *Queue) newWaiter(path string) *waiter {
	return &waiter{q: q, path: path, name: path[len(q.line)+1:]}
}

// rejoin leaves the line and joins it again, at its end: our offer was void
// or we were passed over.
func (w *waiter) rejoin(ctx context.Context) error {
	w.leave()
	nw, err := w.q.join(ctx, wantOf(w.name))
	if err != nil {
		return err
	}
	*w = *nw
	return nil
}

// leave deletes our node, detached from the caller's context (which may be
// why we leave), asking again across disconnects until it is gone or the
// session is over. An offer standing in it goes back to the line.
func (w *waiter) leave() { w.q.s.Cleanup("leave "+w.path, w.q.s.DeleteStep(w.path)) }

// ended names why a read stopped: the session's end (a loss of our place),
// ctx's cause, or err itself.
func (q *Queue) ended(ctx context.Context, err error) error {
	if serr := q.s.Err(); serr != nil {
		return fmt.Errorf("%w: %w", errLineLost, serr)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// TryTake claims the oldest pending item, or returns ErrEmpty when there is
// none. It does not stand in the consumers' line (it never waits), so it can
// take an item that the head of the line was about to hand out (then one of
// their claims fails); it never takes one offered to a waiting consumer.
func (q *Queue) TryTake(ctx context.Context) (*Job, error) {
	j, err := q.tryTake(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	case j == nil:
		return nil, ErrEmpty
	}
	return j, nil
}

func (q *Queue) tryTake(ctx context.Context) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, err
	}
	for range maxPutTries {
		v, err := q.look(ctx, nil, 1, false)
		switch {
		case err != nil:
			return nil, err
		case len(v.due) > 0:
			if err := q.promote(ctx, v.due); err != nil {
				return nil, err
			}
			continue
		case len(v.free) == 0:
			return nil, nil
		}
		items, _, err := q.readFree(ctx, v.free[:1])
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			continue // acked meanwhile, moved to the dead letters, or held
		}
		cs := q.newClaims(items, false)
		js, r, err := q.sendClaims(ctx, q.claimOps(cs), cs)
		switch {
		case err != nil:
			return nil, err
		case js != nil:
			return js[0], nil
		}
		if err := q.claimFailed(ctx, r); err != nil {
			return nil, err
		}
		// Someone else's now: look again.
	}
	return nil, errors.New("no item claimed in many tries: other consumers kept taking them first")
}
