package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Job is one delivery of an item, claimed by this consumer until Ack, Nack
// or the loss of the claim.
//
// The claim is an ephemeral node: it lasts as long as the consumer's
// session. If the session ends before Ack, the item is delivered again to
// another consumer; Done tells this consumer so, as early as the Session
// knows (before the ensemble expires the session, when the Session gives
// itself up first). No claim can stop a consumer that pauses past that
// point: jobs must be safe to run twice.
type Job struct {
	q       *Queue
	id      string
	item    string // the item's path
	claim   string // the claim's path
	data    []byte
	version int32 // the item's data version after our claim: its delivery count

	done chan struct{} // closed when the claim is lost
	stop chan struct{} // closed when Ack or Nack settled the job

	mu      sync.Mutex
	state   jobState
	sent    bool // an Ack or Nack was sent; it may have been applied
	lostErr error
}

type jobState int

const (
	active jobState = iota
	ending          // an Ack or Nack is in flight: changes to the claim are ours
	settled
	lost
)

func newJob(q *Queue, id, item, claim string, data []byte, version int32) *Job {
	j := &Job{q: q, id: id, item: item, claim: claim, data: data, version: version,
		done: make(chan struct{}), stop: make(chan struct{})}
	go j.monitor()
	return j
}

// ID is the item's id, "<bucket>-<sequence>". Ids sort in queue order and
// stay the same across redeliveries.
func (j *Job) ID() string { return j.id }

// Data is the item's payload. Do not modify it.
func (j *Job) Data() []byte { return j.data }

// Attempt is the delivery count of the item: 1 on its first delivery.
func (j *Job) Attempt() int { return int(j.version) }

// Done is closed if the claim is lost (the session ended, or another client
// deleted the claim): the item will be delivered again. It is not closed by
// Ack or Nack.
func (j *Job) Done() <-chan struct{} { return j.done }

// Ack removes the item for good, with its claim, in one multi. It returns an
// error wrapping ErrClaimLost if the claim was lost (the item is then
// delivered again), or ErrOutcomeUnknown if the outcome is unknown (call Ack
// again). Ack after Ack returns nil.
func (j *Job) Ack(ctx context.Context) error {
	return j.settle(ctx, "ack",
		&zk.DeleteRequest{Path: j.item, Version: j.version},
		&zk.DeleteRequest{Path: j.claim, Version: -1})
}

// Nack gives the item back: it stays at its original place in line, ahead
// of everything put after it, and is delivered again, to the first consumer
// in line. The delivery was counted at the Take: an item that has had
// WithMaxAttempts deliveries moves to the dead-letter area now. Errors as
// for Ack.
func (j *Job) Nack(ctx context.Context) error {
	if j.q.maxAttempts > 0 && j.Attempt() >= j.q.maxAttempts {
		// The multi's only possible NoNode must be the claim's: make dead/ first.
		if err := ensureDir(ctx, j.q.s, j.q.dead, j.q.acl); err != nil {
			return fmt.Errorf("fairqueue: nack %s: %w", j.id, err)
		}
		return j.settle(ctx, "nack", j.q.buryOps(j.id, j.item, j.version, j.Attempt(), j.data,
			&zk.DeleteRequest{Path: j.claim, Version: -1})...)
	}
	// The version check fences: if the claim was lost and the item claimed
	// again, its version moved on and we must not delete the new claim.
	return j.settle(ctx, "nack",
		&zk.CheckVersionRequest{Path: j.item, Version: j.version},
		&zk.DeleteRequest{Path: j.claim, Version: -1})
}

func (j *Job) settle(ctx context.Context, op string, ops ...any) error {
	j.mu.Lock()
	switch j.state {
	case settled:
		j.mu.Unlock()
		return nil
	case lost:
		err := j.lostErr
		j.mu.Unlock()
		return fmt.Errorf("fairqueue: %s %s: %w", op, j.id, err)
	}
	j.state = ending
	retry := j.sent
	j.sent = true
	j.mu.Unlock()

	_, i, err := multi(ctx, j.q.s, ops...)
	switch {
	case err == nil:
		j.finish(settled, nil)
		return nil
	case i >= 0 && retry && j.q.s.Err() == nil && (errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)):
		// Our first try was applied: while our session lives, only we can
		// remove the claim or move the item's version on.
		j.finish(settled, nil)
		return nil
	case i >= 0 && (errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)):
		j.finish(lost, fmt.Errorf("%w: claim or item changed by another client", ErrClaimLost))
	case j.q.s.Err() != nil:
		j.finish(lost, fmt.Errorf("%w: %w", ErrClaimLost, j.q.s.Err()))
	case i < 0 && zkrecipes.IsAmbiguous(err):
		j.mu.Lock()
		if j.state == ending {
			j.state = active
		}
		j.mu.Unlock()
		return fmt.Errorf("fairqueue: %s %s: %w: %w", op, j.id, ErrOutcomeUnknown, err)
	default:
		j.mu.Lock()
		if j.state == ending {
			j.state = active
		}
		j.mu.Unlock()
		return fmt.Errorf("fairqueue: %s %s: %w", op, j.id, err)
	}
	return fmt.Errorf("fairqueue: %s %s: %w", op, j.id, j.lostErr)
}

// finish ends the job, once.
func (j *Job) finish(state jobState, why error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state == settled || j.state == lost {
		return
	}
	j.state, j.lostErr = state, why
	if state == lost {
		close(j.done)
	}
	close(j.stop)
}

// monitor watches the claim and the session, and closes done on a loss.
// The watch is set here, off Take's path, so it costs Take no round trip.
func (j *Job) monitor() {
	s := j.q.s
	var ev <-chan zk.Event
	err := zkrecipes.Call(context.Background(), func() (err error) {
		_, _, ev, err = s.Conn().GetW(j.claim)
		return err
	})
	if err != nil {
		j.changed(fmt.Errorf("%w: %w", ErrClaimLost, err))
		return
	}
	select {
	case e := <-ev:
		if e.Type == zk.EventNotWatching || e.Err != nil {
			<-s.Done()
			j.changed(fmt.Errorf("%w: %w", ErrClaimLost, s.Err()))
			return
		}
		j.changed(fmt.Errorf("%w: the claim was deleted or changed by another client", ErrClaimLost))
	case <-s.Done():
		j.changed(fmt.Errorf("%w: %w", ErrClaimLost, s.Err()))
	case <-j.stop:
	}
}

// changed handles a change to the claim: our own Ack or Nack, or a loss.
func (j *Job) changed(why error) {
	for {
		j.mu.Lock()
		st := j.state
		j.mu.Unlock()
		if st != ending {
			break
		}
		// An Ack or Nack is in flight: let it decide.
		select {
		case <-j.stop:
			return
		case <-j.q.s.Done():
			j.finish(lost, fmt.Errorf("%w: %w", ErrClaimLost, j.q.s.Err()))
			return
		}
	}
	if j.q.s.Err() == nil && errors.Is(why, ErrClaimLost) {
		j.mu.Lock()
		sent := j.sent
		j.mu.Unlock()
		if sent {
			// An Ack or Nack gave up without an answer and this is it
			// being applied.
			j.finish(settled, nil)
			return
		}
	}
	j.finish(lost, why)
}
