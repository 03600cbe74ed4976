// Package batch is group commit.
package batch

import (
	"context"
	"runtime"
	"sync"
)

// Group is group commit: the requests of concurrent callers that arrive
// while a batch is in flight go together in the next one. A caller alone
// waits for nothing; one that comes while a batch is out waits for that
// batch, then for its own: one round trip more than alone, at most. Callers
// that put one item at a time so pay about one transaction per batch, not
// one per item.
//
// Do sends one batch (it may take several round trips: a request that
// fails alone is answered so and the others sent again) and returns one
// result per request; Take says how many of the pending requests, oldest
// first, go into the next batch (at least one).
type Group[T, R any] struct {
	Do   func(batch []T) []R
	Take func(pending []T) int

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

// Run sends ins with the next batch and returns their results. If ctx ends
// first, it returns ctx's cause, and inFlight says whether they had gone
// out: nil if nothing was sent; else closed once the batch that carried
// them is answered (their outcome is unknown until then, and may be after:
// a batch whose connection dropped).
func (g *Group[T, R]) Run(ctx context.Context, ins ...T) (outs []R, inFlight <-chan struct{}, err error) {
	if ctx.Err() != nil {
		return nil, nil, context.Cause(ctx)
	}
	cs := make([]*call[T, R], len(ins))
	g.mu.Lock()
	for i, in := range ins {
		cs[i] = &call[T, R]{in: in, done: make(chan struct{})}
	}
	g.pending = append(g.pending, cs...)
	if !g.sending {
		g.sending = true
		go g.send()
	}
	g.mu.Unlock()
	outs = make([]R, len(cs))
	for i, c := range cs {
		select {
		case <-c.done:
			outs[i] = c.out
			continue
		case <-ctx.Done():
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		switch {
		case c.sent:
			inFlight = c.done
		case i > 0:
			inFlight = cs[i-1].done // answered already
		}
		if !c.sent {
			for _, c := range cs[i:] {
				for k, p := range g.pending {
					if p == c {
						g.pending = append(g.pending[:k], g.pending[k+1:]...)
						break
					}
				}
			}
		}
		return nil, inFlight, context.Cause(ctx)
	}
	return outs, cs[len(cs)-1].done, nil
}

// send sends batches until none is pending.
func (g *Group[T, R]) send() {
	for {
		// One turn of the scheduler first: callers made runnable together
		// (Work's acks of one lot) join the batch rather than the next.
		runtime.Gosched()
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
		n := max(1, min(g.Take(ins), len(ins)))
		batch := g.pending[:n:n]
		g.pending = g.pending[n:]
		for _, c := range batch {
			c.sent = true
		}
		g.mu.Unlock()
		outs := g.Do(ins[:n])
		for i, c := range batch {
			c.out = outs[i]
			close(c.done)
		}
	}
}
