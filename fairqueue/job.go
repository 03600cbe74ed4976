package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/owner"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Job is one delivery of an item, claimed by this consumer until Ack, Nack
// or the loss of the claim.
//
// The claim is an ephemeral node: it lasts as long as the consumer's
// session. If the session ends before Ack, the item is delivered again to
// another consumer; Done tells this consumer so, as early as the Session
// knows (before the ensemble expires the session, when the Session gives
// itself up first). A disconnect the session survives is not a loss. No
// claim can stop a consumer that pauses past that point: jobs must be safe
// to run twice.
//
// One goroutine owns the claim's state (the same owner as a zklock
// Lease's); the methods are messages to it, and are safe for concurrent use.
type Job struct {
	q       *Queue
	o       *owner.Owner
	id      string
	item    string // the item's path
	claim   string // the claim's path
	key     string // the producer's key (WithKey), or ""
	data    []byte
	version int32 // the item's data version after our claim: its delivery count
}

func newJob(q *Queue, id, item, claim, key string, data []byte, version int32) *Job {
	// The owner sets its watch on the claim itself, off Take's path, so it
	// costs Take no round trip; and only a moment later, so that a job
	// settled at once costs no read and its Ack does not wait behind one.
	o := owner.Start(owner.Config{Session: q.s, Path: claim, Lost: ErrClaimLost, Released: errDone, Settled: ErrSettled,
		FirstLook: claimFirstLook, Hold: q.s.Telemetry().StartJob()})
	return &Job{q: q, o: o, id: id, item: item, claim: claim, key: key, data: data, version: version}
}

// claimFirstLook is how long after a claim its owner first watches it
// (owner.Config.FirstLook): the loss of the session is seen at once all the
// same; only a stranger's delete of the claim is seen this much later.
const claimFirstLook = 100 * time.Millisecond

// ID is the item's id, "<bucket>-<sequence>". Ids sort in queue order and
// stay the same across redeliveries.
func (j *Job) ID() string { return j.id }

// Data is the item's payload. Do not modify it.
func (j *Job) Data() []byte { return j.data }

// Attempt is how many times the item was handed out, this time included:
// 1 on its first delivery. An item that came back (a Nack, a lost claim, an
// ended hold, an offer another consumer left unclaimed) has Attempt above
// 1: only such an item is ever handed to a consumer after a higher id.
func (j *Job) Attempt() int { return int(j.version) }

// Done is closed if the claim is lost (the session ended, or another client
// deleted the claim): the item will be delivered again. It is not closed by
// Ack or Nack.
func (j *Job) Done() <-chan struct{} { return j.o.Lost() }

// Ack removes the item for good, with its claim (and its key), in one
// multi. It returns an error wrapping ErrClaimLost if the claim was lost
// before the ack was sent (the item is then delivered again). Once called,
// the ack is sent, even if ctx had ended before the call, and goes on until
// it is applied or the session is over: ctx bounds only the wait. If ctx
// ends first, Ack returns an error wrapping ErrOutcomeUnknown and ctx's
// cause; if the session ends while the ack is sent and not answered, one
// wrapping ErrOutcomeUnknown alone (the item is either gone or delivered
// again; which, only the queue can tell). Ack after Ack returns nil; Ack
// after Nack or NackAfter, an error wrapping ErrSettled.
//
// Concurrent Acks of one Queue share multis (see Put), each failing alone.
func (j *Job) Ack(ctx context.Context) error {
	_, err := j.ack(ctx, nil)
	return err
}

// ack acks the job; with join, the create of a node of Work's in line goes
// in the same batch, on the first try only (a try sent again after a lost
// reply leaves it out), and ack returns its outcome: nil when it was sent
// on a try whose reply was lost (the caller looks for the node).
func (j *Job) ack(ctx context.Context, join *ackReq) (*ackResult, error) {
	ops := []any{&zk.DeleteRequest{Path: j.item, Version: j.version}, &zk.DeleteRequest{Path: j.claim, Version: -1}}
	if j.key != "" {
		ops = append(ops, &zk.DeleteRequest{Path: j.q.keys + "/" + j.key, Version: -1})
	}
	var joined *ackResult
	err := j.settle(ctx, "ack", j.q.s.Telemetry().Acked, func(*zk.Conn) error {
		reqs := []ackReq{{build: func() []any { return ops }}}
		if join != nil {
			reqs, join = append(reqs, *join), nil
		}
		rs, _, _ := j.q.acks.run(context.Background(), reqs...)
		if len(rs) > 1 && !session.IsConnErr(rs[1].err) {
			joined = &rs[1]
		}
		return gone(rs[0].i, rs[0].err)
	})
	return joined, err
}

// ackReq is a request to the acks' group: an Ack's ops, or the create of a
// node of Work's in line (join), whose ops are made as its batch is.
type ackReq struct {
	build func() []any
	join  bool
}

// ackResult is the outcome of one request's ops in a shared multi; with a
// node of Work's joining the line, the line's listing taken right behind
// the multi, if it holds the node.
type ackResult struct {
	res     []zk.MultiResponse
	listing []string
	opResult
}

// takeAcks says how many of the pending Acks go in one multi.
func takeAcks(pending []ackReq) int { return min(len(pending), 2*maxHandOut) }

// lingerAcks: a batch that puts a node of Work's in line waits a moment for
// the acks of the handlers that finish with the one that asked for it: the
// node then wants them too.
func lingerAcks(pending []ackReq) bool {
	return slices.ContainsFunc(pending, func(r ackReq) bool { return r.join })
}

// ackBatch sends the ops of a batch of requests (Acks, and Work's joins,
// whose ops are made now: see worker.join) in one multi, and again without
// those of a request that failed alone (an Ack whose claim was lost); a
// failure of the whole (the connection, the session) is every request's.
func (q *Queue) ackBatch(batch []ackReq) []ackResult {
	out := make([]ackResult, len(batch))
	ops := make([][]any, len(batch))
	left := make([]int, len(batch))
	for i, r := range batch {
		ops[i], left[i] = r.build(), i
	}
	for len(left) > 0 {
		var all []any
		start := make([]int, len(left))
		for k, i := range left {
			start[k] = len(all)
			all = append(all, ops[i]...)
		}
		res, listing, err := q.multiListed(all)
		failed, err := znode.MultiErr(res, err)
		if failed < 0 || len(left) == 1 {
			for k, i := range left {
				out[i].opResult = opResult{failed, err}
				if err == nil {
					out[i].res, out[i].listing = res[start[k]:start[k]+len(ops[i])], listing
				} else if failed >= 0 {
					out[i].i -= start[k]
				}
			}
			return out
		}
		k := len(start) - 1
		for start[k] > failed {
			k--
		}
		out[left[k]].opResult = opResult{failed - start[k], err}
		left = append(left[:k], left[k+1:]...)
	}
	return out
}

// multiListed sends a multi and, when it puts a node in line/, a listing of
// line/ right behind it: a session's requests are answered in the order
// sent, so the listing sees the node, and the new waiter needs no round
// trip of its own to learn who is ahead of it. Which of the two is sent
// first is likely, not certain: the waiter keeps the listing only if it
// holds its node.
func (q *Queue) multiListed(ops []any) ([]zk.MultiResponse, []string, error) {
	joins := false
	for _, op := range ops {
		if c, ok := op.(*zk.CreateRequest); ok && strings.HasPrefix(c.Path, q.line+"/") {
			joins = true
		}
	}
	if !joins {
		res, err := q.s.Conn().Multi(ops...)
		return res, nil, err
	}
	type multi struct {
		res []zk.MultiResponse
		err error
	}
	sent := make(chan multi, 1)
	go func() {
		res, err := q.s.Conn().Multi(ops...)
		sent <- multi{res, err}
	}()
	runtime.Gosched() // let the multi be queued first
	names, _, _ := q.s.Conn().Children(q.line)
	m := <-sent
	return m.res, names, m.err
}

// Nack gives the item back: it stays at its original place in line, ahead
// of everything put after it, and is delivered again, to the first consumer
// in line. The delivery was counted at the Take: an item that has had
// WithMaxAttempts deliveries moves to the dead-letter area now. Errors as
// for Ack; Nack after Nack or NackAfter returns nil, Nack after Ack an
// error wrapping ErrSettled.
func (j *Job) Nack(ctx context.Context) error {
	if j.q.maxAttempts > 0 && j.Attempt() >= j.q.maxAttempts {
		return j.settle(ctx, "nack", j.q.s.Telemetry().Buried, j.bury)
	}
	// The version check fences: if the claim was lost and the item claimed
	// again, its version moved on and we must not delete the new claim.
	return j.settle(ctx, "nack", j.q.s.Telemetry().Nacked, func(conn *zk.Conn) error {
		return gone(znode.MultiErr(conn.Multi(
			&zk.CheckVersionRequest{Path: j.item, Version: j.version},
			&zk.DeleteRequest{Path: j.claim, Version: -1})))
	})
}

// NackAfter gives the item back, as Nack does, but keeps it from every
// consumer until d has passed (d > 0; measured by the clocks of the clients
// that look: keep them in sync): back off before a retry. Its place in line
// is kept, so when d has passed it comes before everything put after it. An
// item that has had WithMaxAttempts deliveries moves to the dead-letter
// area now, as with Nack. Errors as for Ack.
func (j *Job) NackAfter(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("fairqueue: nack %s: %w: delay %v must be positive", j.id, zkrecipes.ErrInvalidArgument, d)
	}
	if j.q.maxAttempts > 0 && j.Attempt() >= j.q.maxAttempts {
		return j.settle(ctx, "nack", j.q.s.Telemetry().Buried, j.bury)
	}
	hold := j.q.held + "/" + heldName(j.id, time.Now().Add(d))
	return j.settle(ctx, "nack", j.q.s.Telemetry().Nacked, func(conn *zk.Conn) error {
		ops := []any{
			&zk.CheckVersionRequest{Path: j.item, Version: j.version},
			&zk.DeleteRequest{Path: j.claim, Version: -1},
			&zk.CreateRequest{Path: hold, Data: []byte{}, Acl: j.q.acl},
		}
		for range maxDirTries {
			i, err := znode.MultiErr(conn.Multi(ops...))
			if i == 2 && errors.Is(err, zk.ErrNoNode) {
				if _, err := conn.CreateContainer(j.q.held, nil, zk.FlagContainer, j.q.acl); err != nil &&
					!errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
					return err
				}
				continue
			}
			return gone(i, err)
		}
		return fmt.Errorf("hold %s: %s keeps vanishing", j.id, j.q.held)
	})
}

// bury moves the item to dead/ with the claim's delete, in one multi; a
// missing dead/ (never made, or reaped since) is made and the multi sent
// again.
func (j *Job) bury(conn *zk.Conn) error {
	ops := j.q.buryOps(j.id, j.item, j.key, j.version, j.Attempt(), j.data,
		&zk.DeleteRequest{Path: j.claim, Version: -1})
	for range maxDirTries {
		i, err := znode.MultiErr(conn.Multi(ops...))
		if i == 1 && errors.Is(err, zk.ErrNoNode) {
			if _, err := conn.CreateContainer(j.q.dead, nil, zk.FlagContainer, j.q.acl); err != nil &&
				!errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			continue
		}
		if err == nil {
			j.q.log.Info("fairqueue: item moved to dead letters", "id", j.id, "attempts", j.Attempt())
		}
		return gone(i, err)
	}
	return fmt.Errorf("move %s to dead letters: %s keeps vanishing", j.id, j.q.dead)
}

// maxDirTries bounds the retries of a multi whose directory keeps being
// reaped between its creation and the multi.
const maxDirTries = 8

// gone maps a multi's failure to what the owner needs to know: the claim or
// the item is gone or moved on (our own earlier try, or a loss), or
// something else.
func gone(_ int, err error) error {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return owner.ErrGone
	}
	return err
}

// settle releases the claim with fn, counting it with count once applied.
func (j *Job) settle(ctx context.Context, op string, count func(), fn func(*zk.Conn) error) error {
	err := j.o.ReleaseWith(ctx, op, func(conn *zk.Conn, _ bool) error {
		err := fn(conn)
		if err == nil {
			count()
		}
		return err
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && j.o.Err() == nil:
		// Sent, and not answered: it may have landed; the owner goes on.
		return fmt.Errorf("fairqueue: %s %s: %w: %w", op, j.id, ErrOutcomeUnknown, err)
	case ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
		// The holding ended right after the wait gave up on it: its end is
		// the answer (asked again, fn is not sent again).
		return j.settle(context.Background(), op, count, fn)
	case errors.Is(err, owner.ErrUnsettled):
		// Sent, and the session ended before its answer: it may have
		// landed, so the claim's loss is not wrapped; ErrClaimLost would
		// promise a redelivery that may never come.
		return fmt.Errorf("fairqueue: %s %s: %w: %v", op, j.id, ErrOutcomeUnknown, err)
	default:
		return fmt.Errorf("fairqueue: %s %s: %w", op, j.id, err)
	}
}
