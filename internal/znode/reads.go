package znode

import (
	"errors"
	"sync"
)

// Reads are requests sent at once, from goroutines: the client pipelines
// them, so they cost one round trip. Wait returns their errors, joined.
type Reads struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// Do sends f's request.
func (r *Reads) Do(f func() error) {
	r.wg.Go(func() {
		if err := f(); err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		}
	})
}

// Wait waits for every request sent.
func (r *Reads) Wait() error {
	r.wg.Wait()
	return errors.Join(r.errs...)
}
