package fairqueue

import (
	"context"
	"sync"
)

// group is group commit: the requests of concurrent callers that arrive
// while a batch is in flight go together in the next one. A caller alone
// waits for nothing; one that comes while a batch is out waits for that
// batch, then for its own: one round trip more than alone, at most. Callers
// that put one item at a time so pay about one transaction per batch, not
// one per item.
//
// do sends one batch (it may take several round trips: a request that
// fails alone is answered so and the others sent again) and returns one
// result per request; take says how many of the pending requests, oldest
// first, go into the next batch (at least one).
type group[T, R any] struct {
	do   func(batch []T) []R
	take func(pending []T) int

	mu      sync.Mutex
	pending []*call[T, R]
	sending bool
}

type call[T, R any] struct {
	in   T
	out  R
	done chan struct{}
	sent bool // taken into a batch
}

// run sends in with the next batch and returns its result. If ctx ends
// first, it returns ctx's cause, and sent says whether in had gone out (its
// outcome is then unknown; otherwise nothing was sent).
func (g *group[T, R]) run(ctx context.Context, in T) (out R, sent bool, err error) {
	if ctx.Err() != nil {
		return out, false, context.Cause(ctx)
	}
	c := &call[T, R]{in: in, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	if !g.sending {
		g.sending = true
		go g.send()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.out, true, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.sent {
		for i, p := range g.pending {
			if p == c {
				g.pending = append(g.pending[:i], g.pending[i+1:]...)
				break
			}
		}
	}
	return out, c.sent, context.Cause(ctx)
}

// send sends batches until none is pending.
func (g *group[T, R]) send() {
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.sending = false
			g.mu.Unlock()
			return
		}
		ins := make([]T, len(g.pending))
		for i, c := range g.pending {
			ins[i] = c.in
		}
		n := max(1, min(g.take(ins), len(ins)))
		batch := g.pending[:n:n]
		g.pending = g.pending[n:]
		for _, c := range batch {
			c.sent = true
		}
		g.mu.Unlock()
		outs := g.do(ins[:n])
		for i, c := range batch {
			c.out = outs[i]
			close(c.done)
		}
	}
}
