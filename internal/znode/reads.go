package znode

import (
	"context"
	"errors"
	"sync"
)

// Reads are requests sent at once, from goroutines: the client pipelines
// them, so they cost one round trip. Wait returns their errors, joined.
type Reads struct {
	Pool *Pool // runs the requests; nil: a goroutine each

	mu   sync.Mutex
	out  int           // requests not answered yet
	idle chan struct{} // closed when out falls to 0, once Wait waits
	errs []error
}

// Do sends f's request. A request that needs no ctx of its own to end
// the wait (Wait has it) costs one goroutine, not two: give f a ctx that
// never ends.
func (r *Reads) Do(f func() error) {
	r.mu.Lock()
	r.out++
	r.mu.Unlock()
	run := func() {
		err := f()
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.errs = append(r.errs, err)
		}
		if r.out--; r.out == 0 && r.idle != nil {
			close(r.idle)
			r.idle = nil
		}
	}
	if r.Pool != nil {
		r.Pool.Go(run)
	} else {
		go run()
	}
}

// Wait waits for every request sent, or until ctx ends: then it returns
// ctx's cause, and the requests still out go on, their outcome dropped (do
// not use r again).
func (r *Reads) Wait(ctx context.Context) error {
	r.mu.Lock()
	if r.out == 0 {
		defer r.mu.Unlock()
		return errors.Join(r.errs...)
	}
	idle := make(chan struct{})
	r.idle = idle
	r.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}
