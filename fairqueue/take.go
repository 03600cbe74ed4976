package fairqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// oldest free item to the oldest ticket. Take holds nothing ahead: its
// ticket asks for one item, and only while Take waits. A consumer never
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
		offers := make(chan delivery, 1)
		tickets, err := q.want(ctx, 1, kind, offers)
		if err != nil {
			return nil, err
		}
		var d delivery
		select {
		case d = <-offers:
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-q.closing:
			err = ErrClosed
		case <-q.s.Done():
			return nil, fmt.Errorf("%w: %w", errInboxLost, q.s.Err())
		}
		if err != nil {
			if debugDispatch {
				fmt.Printf("DBG take: give up %v\n", err)
			}
			q.s.Cleanup("give up "+tickets[0], q.dropStep(tickets[0]))
			return nil, err
		}
		if d.name == "" {
			if debugDispatch {
				fmt.Printf("DBG take: told empty %+v\n", d)
			}
			q.s.Cleanup("told empty "+tickets[0], q.dropStep(tickets[0]))
			return nil, nil
		}
		js, err := q.jobs(ctx, []delivery{d})
		if err != nil || len(js) == 1 {
			return firstJob(js), err
		}
		// The item was gone (deleted by another client): take again.
	}
}

func firstJob(js []*Job) *Job {
	if len(js) == 0 {
		return nil
	}
	return js[0]
}

// want puts n tickets of ours in line, in one multi shared with the Acks
// of the moment (see group), and has their offers sent to offers. A multi
// whose reply was lost is looked for by its tickets' tag; one given up as
// ctx ended has its tickets dropped once its outcome is known.
func (q *Queue) want(ctx context.Context, n int, kind byte, offers chan<- delivery) ([]string, error) {
	tag := newTag()
	req := ackReq{tickets: n, kind: kind, tag: tag}
	for range maxDirTries {
		rs, inFlight, err := q.acks.run(ctx, req)
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
			return nil, err
		case err != nil:
			return nil, err
		}
		names, err := rs[0].tickets, rs[0].err
		if session.IsConnErr(err) {
			// It may have landed: look.
			names, err = q.tagged(ctx, tag)
			if err == nil && len(names) == 0 {
				continue // it did not: send it again
			}
		}
		switch {
		case err == nil:
			for _, name := range names {
				q.in.expect(name, offers)
			}
			return names, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.ready, q.acl); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("put a ticket in %s: it keeps vanishing", q.ready)
}

func newTag() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ticketOps are the creates of n tickets of kind.
func (q *Queue) ticketOps(n int, kind byte, tag string) []any {
	ops := make([]any, n)
	for i := range ops {
		ops[i] = &zk.CreateRequest{Path: q.ready + "/" + ticketBase(kind, q.name, tag), Data: []byte{},
			Acl: q.acl, Flags: zk.FlagEphemeralSequential}
	}
	return ops
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
// served, its offer is given back (see giveBack).
func (q *Queue) dropStep(ticket string) func() error {
	return func() error {
		if d, ok := q.in.forget(ticket); ok {
			return q.giveBack(d.offer, time.Now())
		}
		err := q.s.Conn().Delete(q.ready+"/"+ticket, 0)
		if !errors.Is(err, zk.ErrBadVersion) {
			return ignoreNoNode(err)
		}
		// Served: its offer is in our inbox.
		data, _, err := q.s.Conn().Get(q.in.path)
		if err != nil {
			return ignoreNoNode(err)
		}
		for _, o := range parseInbox(data) {
			if o.ticket == ticket {
				return q.giveBack(o, time.Now())
			}
		}
		return ignoreNoNode(q.s.Conn().Delete(q.ready+"/"+ticket, -1))
	}
}

// backOps give an item back: in one multi, a check that it is as it was
// offered (else it moved on, and there is nothing to give), a node in
// held/ that tells the dispatcher it is free from until on, and the
// delete of the ticket.
func (q *Queue) backOps(bucket int64, name string, version int32, ticket string, until time.Time) []any {
	return []any{
		&zk.CheckVersionRequest{Path: q.bucketPath(bucket) + "/" + name, Version: version},
		&zk.CreateRequest{Path: q.held + "/" + heldBase(bucket, name, until), Data: []byte{}, Acl: q.acl, Flags: zk.FlagSequence},
		&zk.DeleteRequest{Path: q.ready + "/" + ticket, Version: -1},
	}
}

// giveBack gives an offer that will not be worked on back, to be offered
// again at once; a TryTake's "nothing" is just deleted. The offer counts as
// a delivery: the item comes back with Attempt above 1.
func (q *Queue) giveBack(o offer, until time.Time) error {
	ticket := q.ready + "/" + o.ticket
	if o.name == "" {
		return ignoreNoNode(q.s.Conn().Delete(ticket, -1))
	}
	_, err := q.sendBack(q.backOps(o.bucket, o.name, o.version, o.ticket, until))
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		// The item is gone or moved on, or the ticket is: nothing to give.
		return ignoreNoNode(q.s.Conn().Delete(ticket, -1))
	}
	return err
}

// sendBack sends a multi of backOps, making held/ when it is missing. It
// returns the index of the op that failed and its error.
func (q *Queue) sendBack(ops []any) (int, error) {
	for range maxDirTries {
		i, err := znode.MultiErr(q.s.Conn().Multi(ops...))
		if i == 1 && errors.Is(err, zk.ErrNoNode) {
			if _, err := q.s.Conn().CreateContainer(q.held, nil, zk.FlagContainer, q.acl); err != nil &&
				!errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
				return -1, err
			}
			continue
		}
		return i, err
	}
	return -1, fmt.Errorf("give back: %s keeps vanishing", q.held)
}

// jobs reads the items offered (at once: the client pipelines the reads),
// unless their offers carried them, and makes them Jobs, oldest first. An item gone (another client deleted
// it, or an out-of-date offer) makes no job, and its ticket is deleted; if ctx ends first, the
// offers are given back.
func (q *Queue) jobs(ctx context.Context, ds []delivery) ([]*Job, error) {
	nodes := make([]znode.Node, len(ds))
	var r reads
	for i, d := range ds {
		if d.carried {
			nodes[i] = znode.Node{Data: d.data, Stat: &zk.Stat{Version: d.version}}
			continue
		}
		r.do(func() (err error) {
			nodes[i], err = znode.Get(ctx, q.s, q.bucketPath(d.bucket)+"/"+d.name)
			return ignoreNoNode(err)
		})
	}
	if err := r.wait(); err != nil {
		for _, d := range ds {
			q.s.Cleanup("give back "+d.ticket, func() error { return q.giveBack(d.offer, time.Now()) })
		}
		if q.s.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errInboxLost, q.s.Err())
		}
		return nil, err
	}
	var js []*Job
	for i, d := range ds {
		if nodes[i].Stat == nil || nodes[i].Stat.Version != d.version {
			q.s.Cleanup("settle "+d.ticket, q.s.DeleteStep(q.ready+"/"+d.ticket))
			continue
		}
		tr(d.ticket, "read")
		js = append(js, newJob(q, d, nodes[i].Data))
	}
	slices.SortFunc(js, func(a, b *Job) int { return strings.Compare(a.id, b.id) })
	return js, nil
}
