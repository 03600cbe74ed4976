package fairqueue

import (
	"context"
	"sync"
	"time"
)

// A loop of Takes (Take, work, Ack, Take again) asks for its next item as
// soon as it acks: the Ack's multi puts the next Take's ticket in line (a
// spare), so the next Take finds it there, often answered already, and
// costs no write of its own. A spare is made only while this Queue's Takes
// follow their Acks at once; one that no Take claims within spareLinger is
// withdrawn (an item offered to it meanwhile is given back, and comes back
// with its Attempt counting that offer), and no spare is made again until
// a Take follows an Ack at once again.

// spareLinger is how long a spare waits for a Take, and how soon after an
// Ack a Take must come for the Queue to make spares.
const spareLinger = 50 * time.Millisecond

type spares struct {
	mu      sync.Mutex
	loop    bool      // this Queue's Takes follow their Acks at once
	lastAck time.Time // when a Take's job was last acked
	free    []spare   // oldest first
}

type spare struct {
	ticket  string
	answers chan answer
	timer   *time.Timer
}

// want says whether an Ack of a Take's job should make a spare.
func (sp *spares) want() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.loop
}

// acked notes that a Take's job was acked, with the spare its multi made
// (none: "").
func (q *Queue) acked(ticket string) {
	sp := &q.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.lastAck = time.Now()
	if ticket == "" {
		return
	}
	s := spare{ticket: ticket, answers: make(chan answer, 1)}
	q.in.expect(ticket, s.answers)
	s.timer = time.AfterFunc(spareLinger, func() { q.withdraw(ticket) })
	sp.free = append(sp.free, s)
}

// claim takes the oldest spare for a Take, if there is one; the Take that
// follows an Ack at once turns spares on.
func (q *Queue) claim() (spare, bool) {
	sp := &q.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if time.Since(sp.lastAck) < spareLinger {
		sp.loop = true
	}
	for len(sp.free) > 0 {
		s := sp.free[0]
		sp.free = sp.free[1:]
		if s.timer.Stop() {
			return s, true
		}
	}
	return spare{}, false
}

// withdraw drops a spare no Take claimed, and makes no more until a Take
// follows an Ack at once again.
func (q *Queue) withdraw(ticket string) {
	sp := &q.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i, s := range sp.free {
		if s.ticket == ticket {
			sp.free = append(sp.free[:i], sp.free[i+1:]...)
			sp.loop = false
			q.s.Cleanup("withdraw "+ticket, q.dropStep(ticket))
			return
		}
	}
}

// withdrawAll drops every spare (Close).
func (q *Queue) withdrawAll() {
	sp := &q.spares
	sp.mu.Lock()
	free := sp.free
	sp.free, sp.loop = nil, false
	sp.mu.Unlock()
	for _, s := range free {
		if s.timer.Stop() {
			_ = q.dropStep(s.ticket)()
		}
	}
}

// ackTake acks j, with a spare when it came from a Take in a loop.
func (j *Job) ackTake(ctx context.Context) error {
	if !j.fromTake || !j.q.spares.want() || j.q.isClosed() {
		_, err := j.ack(ctx, 0, 0, "")
		if j.fromTake {
			j.q.acked("")
		}
		return err
	}
	tag := newTag()
	ticket, err := j.ack(ctx, 1, kindTake, tag)
	switch {
	case err == nil && ticket == "": // the ack's reply was lost
		if names, _ := j.q.tagged(context.WithoutCancel(ctx), tag); len(names) > 0 {
			ticket = names[0]
		}
	case err != nil:
		// The ack may land later, with the spare: drop it then.
		j.q.s.Cleanup("spare of "+j.id, func() error {
			<-j.o.Done()
			return j.q.dropTagged(tag)
		})
	}
	j.q.acked(ticket)
	return err
}
