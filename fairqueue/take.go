package fairqueue

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Take waits for the oldest pending item and returns it as a Job, handed
// to it by the queue's dispatcher.
//
// Consumers are served in the order they called Take: each call puts a
// ticket at the end of the line (ready/), and the dispatcher hands the
// oldest free item to the oldest ticket. A ticket asks for one item, and
// only while Take waits; but in a loop that acks and takes again at once,
// the Ack's multi puts the next Take's ticket in line, so that the next
// Take often finds its item offered already. Such a ticket that no Take
// uses within 50 ms is withdrawn, and an item offered to it meanwhile is
// given back (it counts as a delivery); a loop that does something else
// between its Ack and its next Take stops making them. A consumer never
// takes a lower id than it took before, except an item that came back
// (Nack, NackAfter, a consumer gone), which Job.Attempt tells: above 1.
//
// Take returns when ctx ends, the Queue is closed or the session is over,
// leaving the line without taking anything (an item offered meanwhile is
// given back, and counts as a delivery); it rides out disconnects the
// session survives. The Queue stands as the queue's dispatcher from the
// first Take on (see Close).
func (q *Queue) Take(ctx context.Context) (*Job, error) {
	ctx, tw := q.s.Telemetry().StartWait(ctx, "fairqueue.Queue.Take", "")
	j, err := q.takeOne(ctx, kindTake)
	tw.End(ctx, err)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	}
	return j, nil
}

// TryTake takes the oldest pending item, or returns ErrEmpty when none is
// pending. It asks the dispatcher, as Take does, and returns once it has
// answered: a round trip or two, or, while no dispatcher is elected (one
// that died is replaced once its session expires), when ctx ends.
func (q *Queue) TryTake(ctx context.Context) (*Job, error) {
	j, err := q.takeOne(ctx, kindTry)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fairqueue: take: %w", err)
	case j == nil:
		return nil, ErrEmpty
	}
	return j, nil
}

// takeOne puts a ticket of kind in line, waits for its offer and reads
// the item (unless the offer carried it); a TryTake's ticket told that
// nothing is pending returns no job.
func (q *Queue) takeOne(ctx context.Context, kind byte) (*Job, error) {
	if err := q.s.Err(); err != nil {
		return nil, err
	}
	if err := q.consume(ctx); err != nil {
		return nil, err
	}
	for {
		answers := make(chan answer, 1)
		var ticket string
		var err error
		if s, ok := q.claim(); ok && kind == kindTake {
			ticket, answers = s.ticket, s.answers
		} else {
			if ok {
				q.s.Cleanup("spare "+s.ticket, q.dropStep(s.ticket)) // not for a TryTake
			}
			if ticket, err = q.want(ctx, 1, kind, answers); err != nil {
				return nil, err
			}
		}
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-q.closing:
			err = ErrClosed
		case <-q.s.Done():
			return nil, fmt.Errorf("%w: %w", errInboxLost, q.s.Err())
		}
		if err != nil {
			q.s.Cleanup("give up "+ticket, q.dropStep(ticket))
			return nil, err
		}
		if a.offers[0].name == "" {
			q.s.Cleanup("told empty "+ticket, q.dropStep(ticket))
			return nil, nil
		}
		jss, err := q.jobs(ctx, a)
		if err != nil {
			return nil, err
		}
		if js := jss[0]; len(js) == 1 {
			js[0].fromTake = kind == kindTake
			return js[0], nil
		}
		// The item was gone (deleted by another client): take again.
	}
}

// want puts a ticket of ours for n items in line, in one multi shared
// with the Acks of the moment (see group), and has its answer sent to
// answers. A multi whose reply was lost is looked for by the ticket's tag;
// one given up as ctx ended, in flight or while looked for, has its ticket
// dropped once its outcome is known.
func (q *Queue) want(ctx context.Context, n int, kind byte, answers chan<- answer) (string, error) {
	tag := newTag()
	req := ackReq{want: n, kind: kind, tag: tag}
	for range maxDirTries {
		rs, inFlight, err := q.acks.Run(ctx, req)
		switch {
		case err != nil && inFlight != nil:
			q.s.Cleanup("tickets given up in "+q.ready, func() error {
				select {
				case <-inFlight:
				case <-q.s.Done():
					return nil // the tickets went with the session
				}
				return q.dropTagged(tag)
			})
			return "", err
		case err != nil:
			return "", err
		}
		name, err := rs[0].ticket, rs[0].err
		if session.IsConnErr(err) {
			// It may have landed: look. A look given up (ctx ended while
			// the client was away) leaves it unknown: dropped once the
			// client is back, or it would stand in line for no Take, and
			// an item offered to it would wait until the session ends.
			names, lerr := q.tagged(ctx, tag)
			switch {
			case lerr != nil:
				q.s.Cleanup("ticket given up in "+q.ready, func() error { return q.dropTagged(tag) })
				return "", lerr
			case len(names) == 0:
				continue // it did not: send it again
			}
			name, err = names[0], nil
		}
		switch {
		case err == nil:
			q.in.expect(name, answers)
			return name, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.ready, q.acl); err != nil {
				return "", err
			}
		default:
			return "", err
		}
	}
	return "", fmt.Errorf("put a ticket in %s: it keeps vanishing", q.ready)
}

// newTag returns 8 random hex digits: a tag tells apart the tickets of
// one consumer (its name has the session's id), so it needs no more.
func newTag() string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], rand.Uint32())
	return hex.EncodeToString(b[:])
}

// ticketOp is the create of a ticket of kind for n items.
func (q *Queue) ticketOp(n int, kind byte, tag string) *zk.CreateRequest {
	return &zk.CreateRequest{Path: q.ready + "/" + ticketBase(kind, q.name, tag, min(n, maxWant)), Data: []byte{},
		Acl: q.acl, Flags: zk.FlagEphemeralSequential}
}

// tagged finds our tickets made with tag, oldest first.
func (q *Queue) tagged(ctx context.Context, tag string) ([]string, error) {
	names, err := znode.Children(ctx, q.s, q.ready)
	if err != nil {
		return nil, err
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		t, ok := parseTicket(n)
		return !ok || t.tag != tag || t.consumer != q.name
	})
	slices.Sort(names)
	return names, nil
}

func (q *Queue) dropTagged(tag string) error {
	names, err := q.tagged(context.Background(), tag)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := q.dropStep(name)(); err != nil {
			return err
		}
	}
	return nil
}

// dropStep is a clean-up step: let go of a ticket that no one will take
// from. Not served, it is deleted (version 0: an offer cannot land after);
// served, its offers are given back (see giveBack).
func (q *Queue) dropStep(ticket string) func() error {
	return func() error {
		a, ok := q.in.forget(ticket)
		if !ok {
			err := q.s.Conn().Delete(q.ready+"/"+ticket, 0)
			if !errors.Is(err, zk.ErrBadVersion) {
				return ignoreNoNode(err)
			}
			// Served: its offers are in our inbox.
			data, _, err := q.s.Conn().Get(q.in.path)
			if err != nil {
				return ignoreNoNode(err)
			}
			a.ticket = ticket
			for _, o := range parseInbox(data) {
				if o.ticket == ticket {
					a.offers = append(a.offers, o)
				}
			}
		}
		return q.giveBack(a)
	}
}

// backOps give an item back: a check that it is as it was offered (else
// it moved on, and there is nothing to give), and a node in held/ that
// tells the dispatcher it is free from until on.
func (q *Queue) backOps(bucket int64, name string, version int32, until time.Time) []any {
	return []any{
		&zk.CheckVersionRequest{Path: q.bucketPath(bucket) + "/" + name, Version: version},
		&zk.CreateRequest{Path: q.held + "/" + heldBase(bucket, name, until), Data: []byte{}, Acl: q.acl, Flags: zk.FlagSequence},
	}
}

// giveBack gives the items of a ticket's answer that will not be worked on
// back, to be offered again at once, and deletes the ticket, in one multi.
// An offer counts as a delivery: the items come back with Attempt above 1.
func (q *Queue) giveBack(a answer) error {
	var ops []any
	for _, o := range a.offers {
		if o.name != "" {
			ops = append(ops, q.backOps(o.bucket, o.name, o.version, time.Now())...)
		}
	}
	ops = append(ops, q.ticketDelete(a.ticket))
	for len(ops) > 1 {
		i, err := q.sendBack(ops)
		if !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) || i == len(ops)-1 {
			return ignoreNoNode(err)
		}
		// That item is gone or moved on: nothing to give of it.
		i -= i % 2
		ops = append(ops[:i], ops[i+2:]...)
	}
	return ignoreNoNode(q.s.Conn().Delete(q.ready+"/"+a.ticket, -1))
}

func (q *Queue) ticketDelete(ticket string) *zk.DeleteRequest {
	return &zk.DeleteRequest{Path: q.ready + "/" + ticket, Version: -1}
}

// sendBack sends a multi of backOps, making held/ when it is missing. It
// returns the index of the op that failed and its error.
func (q *Queue) sendBack(ops []any) (int, error) {
	return q.multiIn(q.s.Conn(), q.held, "give back", ops)
}

// jobs reads the items of the answers, all at once (the client pipelines
// the reads), unless their offers carried them or their names hold them
// (for the items of a blob, the blob, once), and makes each answer's Jobs,
// oldest first, sharing its ticket: the last to be settled deletes it. An
// item gone or moved on (deleted by another client, or an offer out of
// date; of an item of a blob, only its blob gone is seen; of one whose
// name holds its payload, nothing) makes no job; if ctx ends first, every
// answer is given back.
func (q *Queue) jobs(ctx context.Context, as ...answer) ([][]*Job, error) {
	nodes := make([][]znode.Node, len(as))
	r := znode.Reads{Pool: q.readers}
	rctx := context.WithoutCancel(ctx) // Wait ends with ctx
	// A blob is read once for all its items the answers hold; the offer
	// gives such an item's version (it has no data to read with it, and an
	// offer of an answered ticket is never taken in again).
	blobs := map[string]*znode.Node{}
	type part struct {
		k, i, idx int
		blob      *znode.Node
	}
	var parts []part
	for k, a := range as {
		nodes[k] = make([]znode.Node, len(a.offers))
		for i, o := range a.offers {
			data, known := o.data, o.carried
			if !known {
				data, known = inlinePayload(o.name)
			}
			if known {
				nodes[k][i] = znode.Node{Data: data, Stat: &zk.Stat{Version: o.version}}
				continue
			}
			if p, idx, ok := q.blobOf(o.bucket, o.name); ok {
				n := blobs[p]
				if n == nil {
					n = &znode.Node{}
					blobs[p] = n
					r.Do(func() (err error) {
						*n, err = znode.Get(rctx, q.s, p)
						return ignoreNoNode(err)
					})
				}
				parts = append(parts, part{k, i, idx, n})
				continue
			}
			r.Do(func() (err error) {
				nodes[k][i], err = znode.Get(rctx, q.s, q.bucketPath(o.bucket)+"/"+o.name)
				return ignoreNoNode(err)
			})
		}
	}
	if err := r.Wait(ctx); err != nil {
		for _, a := range as {
			q.s.Cleanup("give back "+a.ticket, func() error { return q.giveBack(a) })
		}
		if q.s.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errInboxLost, q.s.Err())
		}
		return nil, err
	}
	for _, p := range parts {
		if data, ok := blobPart(p.blob.Data, p.idx); ok {
			nodes[p.k][p.i] = znode.Node{Data: data, Stat: &zk.Stat{Version: as[p.k].offers[p.i].version}}
		}
	}
	out := make([][]*Job, len(as))
	for k, a := range as {
		l := &lot{ticket: a.ticket}
		for i, o := range a.offers {
			if n := nodes[k][i]; n.Stat != nil && n.Stat.Version == o.version {
				out[k] = append(out[k], newJob(q, l, o, n.Data, a.token))
			}
		}
		if l.left = len(out[k]); l.left == 0 {
			q.s.Cleanup("settle "+a.ticket, q.s.DeleteStep(q.ready+"/"+a.ticket))
		}
		slices.SortFunc(out[k], func(a, b *Job) int { return strings.Compare(a.id, b.id) })
	}
	return out, nil
}

// lot is a ticket shared by the Jobs of its items: the last one settled
// deletes it, in its own multi, with or after the others' settlements:
// the ticket gone tells the dispatcher that all of its items are settled,
// so none may land after it (one sent again after a lost connection
// would).
type lot struct {
	ticket string
	mu     sync.Mutex
	left   int           // Jobs whose settlement has not begun
	out    map[*Job]bool // settlements begun and not over, the last's aside
	idle   chan struct{} // closed when out is empty
}

// last counts j's settlement begun, and says whether it was the last.
func (l *lot) last(j *Job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left--
	if l.left > 0 {
		if l.out == nil {
			l.out = map[*Job]bool{}
		}
		l.out[j] = true
	}
	return l.left == 0
}

// settled counts j's settlement over, if it was out (not the last's, nor
// one not begun; once).
func (l *lot) settled(j *Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.out[j] {
		return
	}
	delete(l.out, j)
	if len(l.out) == 0 && l.idle != nil {
		close(l.idle)
		l.idle = nil
	}
}

// othersOver is closed once no settlement but the last's is out.
func (l *lot) othersOver() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.idle == nil {
		l.idle = make(chan struct{})
		if len(l.out) == 0 {
			close(l.idle)
		}
	}
	return l.idle
}

// outside says whether a settlement of the lot is out and not among
// those of with (a multi's).
func (l *lot) outside(with map[*Job]bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for j := range l.out {
		if !with[j] {
			return true
		}
	}
	return false
}
