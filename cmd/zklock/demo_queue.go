package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// queueDemo is the demo's third part: producers, each with a session of
// its own, put jobs in one fairqueue.Queue while consumers, each with a
// session of its own, take them, oldest first, work on each and ack it.
type queueDemo struct {
	*demoRun
	start time.Time

	mu    sync.Mutex
	said  *sync.Cond          // on mu: broadcast when a put is printed
	puts  map[string][]string // producer -> the ids of its jobs, in the order it put them
	shown map[string]bool     // the ids whose put is printed
	takes map[string][]string // consumer -> the ids it took, in order
	taken map[string]int      // id -> deliveries
	acked map[string]int      // id -> acks that returned nil
}

func (d *demoRun) queuePart(ctx context.Context) error {
	p := &queueDemo{demoRun: d, puts: map[string][]string{}, shown: map[string]bool{},
		takes: map[string][]string{}, taken: map[string]int{}, acked: map[string]int{}}
	p.said = sync.NewCond(&p.mu)
	total := d.producers * d.items
	d.printf("\n3. Job queue at %s: %s, each putting %s; %s,\n",
		d.qPath, count(d.producers, "producer"), count(d.items, "job"), count(d.consumers, "consumer"))
	d.printf("each taking the oldest job, working on it for %v and acking it, until all are done.\n", d.hold)
	producers, err := d.connectAll(ctx, "producer", d.producers)
	if err != nil {
		return err
	}
	defer closeAll(producers)
	consumers, err := d.connectAll(ctx, "consumer", d.consumers)
	if err != nil {
		return err
	}
	defer closeAll(consumers)
	open := func(ss []*zkrecipes.Session) ([]*fairqueue.Queue, error) {
		qs := make([]*fairqueue.Queue, len(ss))
		for i, s := range ss {
			var err error
			if qs[i], err = fairqueue.New(s, d.qPath); err != nil {
				return nil, err
			}
		}
		return qs, nil
	}
	pqs, err := open(producers)
	if err != nil {
		return err
	}
	cqs, err := open(consumers)
	if err != nil {
		return err
	}

	// Interrupted or failed, the part takes back what its clients left in
	// the queue, so that the next demo finds it empty.
	completed := false
	defer func() {
		if !completed {
			closeAll(producers)
			closeQueues(cqs)
			closeAll(consumers)
			p.drain()
		}
	}()

	var wg sync.WaitGroup
	defer wg.Wait()
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// allAcked ends the consumers' wait for more once every job is acked.
	allAcked, finish := context.WithCancel(work)
	defer finish()
	// A take waits for its put to be printed, or for the part to end.
	defer context.AfterFunc(work, func() {
		p.mu.Lock() // not between a waiter's look at work and its Wait
		p.said.Broadcast()
		p.mu.Unlock()
	})()
	var acks atomic.Int64
	ackedOne := func() {
		if acks.Add(1) == int64(total) {
			finish()
		}
	}

	p.start = time.Now()
	d.printf("\nPuts, takes and acks (time since start, who, what, the job's id and data):\n")
	for i, q := range cqs {
		name := clientName("consumer", i)
		wg.Go(func() {
			if err := p.consume(work, allAcked, name, q, ackedOne); err != nil {
				cancel(fmt.Errorf("%s: %w", name, err))
			}
		})
	}
	for i, q := range pqs {
		name := clientName("producer", i)
		wg.Go(func() {
			if err := p.produce(work, name, q); err != nil {
				cancel(fmt.Errorf("%s: %w", name, err))
			}
		})
	}
	wg.Wait()
	if err := context.Cause(work); err != nil {
		return err
	}

	closeAll(producers)
	closeQueues(cqs)
	closeAll(consumers)
	left, err := queueLeft(d.observer, d.qPath)
	if err != nil {
		return err
	}
	completed = true
	p.verify(left)
	return nil
}

// closeQueues closes the consumers' Queues, at once, before their sessions:
// a Queue that took stands as the queue's dispatcher, and keeps an inbox,
// until then. A close that does not finish in time is left to the
// session's.
func closeQueues(qs []*fairqueue.Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Go(func() { _ = q.Close(ctx) })
	}
	wg.Wait()
}

// produce puts the producer's jobs, one after the other.
func (p *queueDemo) produce(ctx context.Context, name string, q *fairqueue.Queue) error {
	for j := range p.items {
		data := fmt.Sprintf("job %d of %s", j+1, name)
		id, err := q.Put(ctx, []byte(data))
		if err != nil {
			return fmt.Errorf("put %q: %w", data, err)
		}
		p.mu.Lock()
		p.puts[name] = append(p.puts[name], id)
		p.event(p.start, name, "put    %s  %q", id, data)
		p.shown[id] = true
		p.said.Broadcast()
		p.mu.Unlock()
	}
	return nil
}

// consume takes jobs, works on each and acks it, until allAcked ends.
func (p *queueDemo) consume(work, allAcked context.Context, name string, q *fairqueue.Queue, ackedOne func()) error {
	for {
		job, err := q.Take(allAcked)
		if err != nil {
			if allAcked.Err() != nil && work.Err() == nil {
				return nil // every job is acked: nothing more will come
			}
			return err
		}
		p.took(work, name, job)
		sleep(work, p.hold)
		if work.Err() != nil {
			return context.Cause(work) // interrupted: the work is not done
		}
		err = job.Ack(work)
		if errors.Is(err, fairqueue.ErrClaimLost) {
			p.event(p.start, name, "lost   %-21s  its delivery: the job will be delivered again", job.ID())
			continue
		}
		if err != nil {
			return fmt.Errorf("ack %s: %w", job.ID(), err)
		}
		p.mu.Lock()
		p.acked[job.ID()]++
		p.mu.Unlock()
		p.event(p.start, name, "acked  %s", job.ID())
		ackedOne()
	}
}

// took records and prints a take. A consumer may have the job before its
// producer has the put's reply: the take is printed after the put, so that
// the lines read in the order of cause and effect (the time printed is when
// the line is).
func (p *queueDemo) took(ctx context.Context, name string, job *fairqueue.Job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes[name] = append(p.takes[name], job.ID())
	p.taken[job.ID()]++
	for !p.shown[job.ID()] && ctx.Err() == nil {
		p.said.Wait()
	}
	p.event(p.start, name, "took   %s  %q, delivery %d", job.ID(), job.Data(), job.Attempt())
}

// verify prints the part's checks: every job delivered and acked once, each
// consumer's ids increasing, each producer's ids in the order of its puts,
// nothing left behind.
func (p *queueDemo) verify(left []string) {
	var ids []string
	for _, put := range p.puts {
		ids = append(ids, put...)
	}
	once, why := true, ""
	for _, id := range ids {
		if p.taken[id] != 1 || p.acked[id] != 1 {
			once, why = false, fmt.Sprintf("job %s: taken %d times, acked %d times", id, p.taken[id], p.acked[id])
			break
		}
	}
	if once && len(p.taken) != len(ids) {
		once, why = false, fmt.Sprintf("%d jobs put, %d taken", len(ids), len(p.taken))
	}
	p.printf("\n  Jobs: %d put, %d taken, %d acked\n", len(ids), len(p.taken), len(p.acked))
	p.check("Every job taken and acked, once", once, why)

	increasing := func(what string, lists map[string][]string) (bool, string) {
		for _, who := range slices.Sorted(mapKeys(lists)) {
			ids := lists[who]
			for i := 1; i < len(ids); i++ {
				if ids[i] <= ids[i-1] {
					return false, fmt.Sprintf("%s %s %s after %s", who, what, ids[i], ids[i-1])
				}
			}
		}
		return true, ""
	}
	ok, why := increasing("took", p.takes)
	p.check("Each consumer took its jobs oldest first (ids increasing)", ok, why)
	ok, why = increasing("put", p.puts)
	p.check("Each producer's jobs are in the queue in the order it put them (ids increasing)", ok, why)
	p.checkNoneLeft(p.qPath, left)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// drain takes back and acks the jobs an interrupted or failed queue part
// left in the queue, which was empty when the demo began: they are all the
// demo's. It says on stderr what it did.
func (p *queueDemo) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	q, err := fairqueue.New(p.observer, p.qPath)
	if err == nil {
		defer closeQueues([]*fairqueue.Queue{q})
	}
	n := 0
	for err == nil {
		var job *fairqueue.Job
		if job, err = q.TryTake(ctx); err == nil {
			if err = job.Ack(ctx); err == nil {
				n++
			}
		}
	}
	if errors.Is(err, fairqueue.ErrEmpty) {
		if n > 0 {
			fmt.Fprintf(p.stderr, "zklock: demo: took back the %d jobs left in %s\n", n, p.qPath)
		}
		return
	}
	fmt.Fprintf(p.stderr, "zklock: demo: %s may still hold jobs of the demo (see zklock queue ls %s): %s\n", p.qPath, p.qPath, errText(err))
}

// queueLeft lists what the queue at path holds: jobs, consumers' tickets
// and inboxes, dispatchers standing, dead letters, jobs given back or
// delayed, and keys, as the package's layout keeps them (its directories
// are containers, which the server reaps once empty).
func queueLeft(s *zkrecipes.Session, path string) ([]string, error) {
	list := func(dir string) ([]string, error) {
		names, err := children(s, dir)
		for i := range names {
			names[i] = dir + "/" + names[i]
		}
		return names, err
	}
	var out []string
	for _, dir := range queueDirs {
		if dir == "items" {
			continue // its buckets are directories: their items are listed below
		}
		names, err := list(path + "/" + dir)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	buckets, err := list(path + "/items")
	if err != nil {
		return nil, err
	}
	for _, b := range buckets {
		names, err := list(b)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}
