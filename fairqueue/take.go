package fairqueue

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Take waits for the oldest pending item, claims it and returns it as a Job.
//
// When items wait for consumers, every consumer takes at once: each claims
// the oldest item not claimed yet, and a consumer that froze or died holds
// up no one; most Takes then read only the oldest few items of the backlog
// their Queue's last look found, not the whole queue (see the package
// documentation). When consumers wait for items, they are served in the order
// they called Take: they stand in a line, only the first two look at the
// items (so a put wakes two consumers, not all of them), the first takes
// at once and the second after a grace of a few round trips, in case the
// first froze or died. A consumer never takes a lower id than it took
// before, except an item that came back (Nack, a lost claim).
//
// Take returns when ctx ends or the session is over, leaving the line
// without taking anything; it rides out disconnects the session survives.
func (q *Queue) Take(ctx context.Context) (*Job, error) {
	ctx, w := q.s.Telemetry().StartWait(ctx, "fairqueue.Queue.Take", "")
	j, err := q.take(ctx, true)
	w.End(ctx, err)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	return j, nil
}

// TryTake claims the oldest pending item, or returns ErrEmpty when there is
// none. It does not stand in the consumers' line (it never waits), so it can
// take an item that a waiting Take was about to get; waiting consumers keep
// their order among themselves.
func (q *Queue) TryTake(ctx context.Context) (*Job, error) {
	j, err := q.take(ctx, false)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	case j == nil:
		return nil, ErrEmpty
	}
	return j, nil
}

// taker is one Take in progress.
type taker struct {
	q *Queue
	e *line.Entry // our place in line, once we stand in it
	// The item we found reserved for consumers ahead of us, and when: we
	// take it ourselves once they have had their grace.
	seenID string
	seenAt time.Time
}

func (q *Queue) take(ctx context.Context, wait bool) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, err
	}
	t := &taker{q: q}
	defer t.leave()
	for {
		if t.e == nil {
			if j, err := q.takeBacklog(ctx); j != nil || err != nil {
				return j, err
			}
		}
		v, err := q.look(ctx, t.e, false)
		if err != nil {
			return nil, err
		}
		q.backlog.keep(v)
		if len(v.due) > 0 {
			if _, err := q.promote(ctx, v.due); err != nil {
				return nil, err
			}
			continue
		}
		if !wait {
			v.ahead = 0 // TryTake does not stand in line
		}
		if cs := t.pick(v); len(cs) > 0 {
			j, err := q.claimFirst(ctx, t.me(), cs)
			if err != nil {
				return nil, err
			}
			if j != nil {
				t.e = nil // the claim's multi took us out of the line
				return j, nil
			}
			continue // all someone else's: look again
		}
		if !wait {
			return nil, nil
		}
		if len(v.avail) == 0 && t.e == nil {
			// Nothing for anyone: stand in line, until among the first two.
			if err := t.join(ctx); err != nil {
				return nil, err
			}
			continue
		}
		// Wait for what could bring us an item: look again, with watches.
		// After a reconnect, look again rather than trust them: see
		// session.NextReconnect.
		gen := q.s.NextReconnect()
		w, err := q.look(ctx, t.e, true)
		if err != nil {
			return nil, err
		}
		if len(t.pick(w)) > 0 || len(w.due) > 0 {
			continue
		}
		wake := w.next
		if !t.seenAt.IsZero() {
			wake = earliest(wake, t.seenAt.Add(q.grace()))
		}
		if err := q.waitAny(ctx, w.watches, wake, gen); err != nil {
			return nil, err
		}
	}
}

// pick says which items to claim, if any: the oldest we see (never
// another: so no consumer is handed a lower id after a higher one), and,
// should it be someone else's by the time our claim arrives, the next
// oldest, and so on, while there are more items than consumers ahead of
// us; or the oldest alone, once those consumers have had their grace to
// claim it.
func (t *taker) pick(v *view) []candidate {
	if len(v.avail) == 0 {
		t.seenID = ""
		return nil
	}
	if n := len(v.avail) - v.ahead; n > 0 {
		return v.avail[:n]
	}
	c := v.avail[0]
	now := time.Now()
	if c.id() != t.seenID {
		t.seenID, t.seenAt = c.id(), now
		return nil
	}
	if now.Sub(t.seenAt) < t.q.grace() {
		return nil
	}
	return v.avail[:1]
}

// me is our line node's path, or "" when we are not in line.
func (t *taker) me() string {
	if t.e == nil {
		return ""
	}
	return t.e.Path()
}

// join puts us in the consumers' line and waits until we are among the
// first two, who look at the items.
func (t *taker) join(ctx context.Context) error {
	e, err := line.Join(ctx, t.q.s, t.q.lineSpec())
	if err != nil {
		return err
	}
	t.e = e
	h, err := e.Wait(ctx, true)
	if err != nil {
		return err
	}
	if h.Behind {
		t.q.announce(ctx, e.Path())
	}
	return nil
}

// leave deletes our line node, if we still stand in line.
func (t *taker) leave() {
	if t.e != nil {
		t.e.Leave()
		t.e = nil
	}
}

// waitAny waits until one of the watches fires, wake comes (unless zero),
// gen is closed (the client reconnected), the session ends or ctx ends.
// The watches not fired fire later into buffered channels.
func (q *Queue) waitAny(ctx context.Context, watches []<-chan zk.Event, wake time.Time, gen <-chan struct{}) error {
	var timer <-chan time.Time
	if !wake.IsZero() {
		tm := time.NewTimer(time.Until(wake))
		defer tm.Stop()
		timer = tm.C
	}
	cases := make([]reflect.SelectCase, 0, len(watches)+4)
	for _, w := range watches {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.s.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(gen)})
	i, v, _ := reflect.Select(cases)
	switch n := len(watches); {
	case i < n:
		if znode.Dropped(v.Interface().(zk.Event)) {
			<-q.s.Done()
			return q.s.Err()
		}
		return nil
	case i == n, i == n+3: // wake, or a reconnect: look again
		return nil
	case i == n+1:
		return q.s.Err()
	default:
		return context.Cause(ctx)
	}
}
