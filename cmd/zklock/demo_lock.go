package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// mutexDemo is the demo's first part: workers, each with a session of its
// own, take turns on one zklock.Mutex, first come first served, each
// hand-off with a higher fencing token.
type mutexDemo struct {
	*demoRun
	start     time.Time
	lineShown chan struct{} // closed once the line has been printed

	// joinMu is held by the worker joining the line until its node exists,
	// so the order of joined is the order of the line.
	joinMu sync.Mutex
	joined []string // worker names, in the order they joined the line

	mu       sync.Mutex
	handoffs []handoff // in the order the lock was acquired
}

// handoff is one acquisition of the lock.
type handoff struct {
	worker string
	token  int64
}

func (d *demoRun) mutexPart(ctx context.Context) error {
	p := &mutexDemo{demoRun: d}
	d.printf("\n1. Fair mutex at %s: %s, each taking the lock %s and holding it %v.\n",
		d.lockPath, count(d.workers, "worker"), count(d.rounds, "time"), d.hold)
	sessions, err := d.connectAll(ctx, "worker", d.workers)
	if err != nil {
		return err
	}
	defer closeAll(sessions)
	mutexes := make([]*zklock.Mutex, d.workers)
	for i, s := range sessions {
		if mutexes[i], err = zklock.NewMutex(s, d.lockPath, zklock.WithData(clientData(clientName("worker", i)))); err != nil {
			return err
		}
	}
	line, err := zklock.NewMutex(d.observer, d.lockPath)
	if err != nil {
		return err
	}

	// Start the workers one after another, each once the one before it is
	// in line, so that the first line is worker-1, worker-2, ...
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	p.start = time.Now()
	p.lineShown = make(chan struct{})
	d.printf("The workers join the line in turn; the line as ZooKeeper sees it:\n")
	for i, m := range mutexes {
		name := clientName("worker", i)
		inLine := make(chan struct{})
		wg.Go(func() {
			if err := p.worker(work, name, m, sync.OnceFunc(func() { close(inLine) })); err != nil {
				cancel(fmt.Errorf("%s: %w", name, err))
			}
		})
		select {
		case <-inLine:
		case <-work.Done():
		}
	}
	if cs, err := line.Contenders(work); err != nil {
		cancel(err)
	} else {
		d.outMu.Lock()
		printContenders(d.stdout, kindLock, cs)
		d.outMu.Unlock()
	}
	d.printf("\nHand-offs (time since start, who got the lock, its fencing token, how long it waited):\n")
	close(p.lineShown)
	wg.Wait()
	if err := context.Cause(work); err != nil {
		return err
	}

	closeAll(sessions)
	left, err := children(d.observer, d.lockPath)
	if err != nil {
		return err
	}
	p.verify(left)
	return nil
}

// worker takes the lock d.rounds times. It calls inLine once it has first
// joined the line (or failed to).
func (p *mutexDemo) worker(ctx context.Context, name string, m *zklock.Mutex, inLine func()) error {
	defer inLine()
	for range p.rounds {
		lease, joined, err := p.join(ctx, name, m, inLine)
		if err != nil {
			return err
		}
		got := time.Now()
		select {
		case <-p.lineShown: // the first holder keeps the lock until the line is shown
		case <-ctx.Done():
		}
		p.acquired(name, lease, got, got.Sub(joined))
		sleep(ctx, p.hold)
		if err := lease.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

// join puts the worker in line, calls inLine, and waits for the lock. The
// next worker may join only once this one's node exists (or it holds the
// lock already), so the line is in the order of p.joined.
func (p *mutexDemo) join(ctx context.Context, name string, m *zklock.Mutex, inLine func()) (*zklock.Lease, time.Time, error) {
	p.joinMu.Lock()
	p.joined = append(p.joined, name)
	joined := time.Now()
	var lease *zklock.Lease
	var err error
	locked := make(chan struct{})
	go func() {
		lease, err = m.Lock(ctx)
		close(locked)
	}()
	waitInLine(ctx, m.Contenders, name, locked)
	p.joinMu.Unlock()
	inLine()
	<-locked
	return lease, joined, err
}

// acquired records and prints a hand-off. It is called while the lock is
// held, so the records are in the order of acquisition.
func (p *mutexDemo) acquired(name string, lease *zklock.Lease, at time.Time, waited time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handoffs = append(p.handoffs, handoff{name, lease.Token()})
	p.printf("  %+8.3fs  %-11s  token %-12d  waited %v\n",
		at.Sub(p.start).Seconds(), name, lease.Token(), waited.Round(100*time.Microsecond))
}

// verify prints the part's checks: first come first served, tokens
// increasing, nothing left behind.
func (p *mutexDemo) verify(left []string) {
	p.printf("\n  Hand-offs: %d (%d workers x %d rounds)\n", len(p.handoffs), p.workers, p.rounds)

	fifo, why := len(p.handoffs) == len(p.joined), fmt.Sprintf("%d joins, %d hand-offs", len(p.joined), len(p.handoffs))
	for i := 0; fifo && i < len(p.handoffs); i++ {
		if got, want := p.handoffs[i].worker, p.joined[i]; got != want {
			fifo, why = false, fmt.Sprintf("hand-off %d went to %s, but %s had joined the line before it", i+1, got, want)
		}
	}
	p.check("First come, first served (each hand-off to the worker that joined the line next)", fifo, why)

	increasing, why := true, ""
	for i := 1; increasing && i < len(p.handoffs); i++ {
		if prev, cur := p.handoffs[i-1].token, p.handoffs[i].token; cur <= prev {
			increasing, why = false, fmt.Sprintf("hand-off %d got %d after %d", i+1, cur, prev)
		}
	}
	p.check("Fencing tokens strictly increasing", increasing, why)
	p.checkNoneLeft(p.lockPath, left)
}
