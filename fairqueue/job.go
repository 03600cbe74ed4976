package fairqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/owner"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Job is one delivery of an item, offered to this consumer and held until
// Ack, Nack or the loss of the delivery.
//
// The delivery is the consumer's ticket, an ephemeral node, with the offer
// in the consumer's inbox, another: it lasts as long as the consumer's
// session. If
// the session ends before Ack, the item is delivered again to another
// consumer; Done tells this consumer so, as early as the Session knows
// (before the ensemble expires the session, when the Session gives itself
// up first). A disconnect the session survives is not a loss. Nothing can
// stop a consumer that pauses past that point from acting: fence what the
// job writes with Token, or for ZooKeeper itself with Guard, so that a
// resource refuses a delivery once the next one began.
//
// One goroutine owns the delivery's state (the same owner as a zklock
// Lease's); the methods are messages to it, and are safe for concurrent use.
type Job struct {
	q       *Queue
	o       *owner.Owner
	lot     *lot
	id      string
	item    string // the item's path
	ticket  string // the ticket's path
	key     string // the producer's key (WithKey), or ""
	bucket  int64
	name    string
	data    []byte
	version int32 // the item's data version: its deliveries before this one
	token   int64
	// fromTake: taken by Take, whose Ack may put the next one's ticket in
	// line (see spares).
	fromTake bool

	lastOnce sync.Once
	isLast   bool
}

// ticketServed is a ticket's data version once the dispatcher served it.
const ticketServed = 1

func newJob(q *Queue, l *lot, o offer, data []byte, token int64) *Job {
	// The owner watches the ticket itself, off Take's path, so it costs Take
	// no round trip; and only a moment later, so that a job settled at once
	// costs no read and its Ack does not wait behind one.
	ticket := q.ready + "/" + l.ticket
	_, key, _ := parseItem(o.name)
	j := &Job{q: q, lot: l, id: o.id(), item: q.bucketPath(o.bucket) + "/" + o.name, ticket: ticket, key: key,
		bucket: o.bucket, name: o.name, data: data, version: o.version, token: token}
	q.holding(j)
	j.o = owner.Start(owner.Config{Session: q.s, Path: ticket, Version: ticketServed,
		Lost: ErrClaimLost, Released: errDone, Settled: ErrSettled,
		FirstLook: claimFirstLook, Hold: q.s.Telemetry().StartJob(),
		Ended: func(lost bool) { q.holdEnded(j, lost) }})
	return j
}

// closing returns the delete of the ticket when this Job is the last of
// its lot to be settled (decided once: a settlement sent again asks
// again), for the settlement's own multi. With wait, once the others'
// settlements are over (see lot); without, the acks' group sends it only
// with them or after them (see ackBatch).
func (j *Job) closing(wait bool) []any {
	j.lastOnce.Do(func() { j.isLast = j.lot.last(j) })
	if !j.isLast {
		return nil
	}
	if wait {
		j.othersOver()
	}
	return []any{&zk.DeleteRequest{Path: j.ticket, Version: ticketServed}}
}

// othersOver waits until the settlements of the other Jobs of the lot are
// over, or the session is (the ticket goes with it).
func (j *Job) othersOver() {
	select {
	case <-j.lot.othersOver():
	case <-j.q.s.Done():
	}
}

// claimFirstLook is how long after a delivery its owner first watches the
// ticket (owner.Config.FirstLook): the loss of the session is seen at once
// all the same; only a stranger's delete of the ticket is seen this much
// later.
const claimFirstLook = 100 * time.Millisecond

// ID is the item's id, "<bucket>-<sequence>". Ids sort in queue order and
// stay the same across redeliveries.
func (j *Job) ID() string { return j.id }

// Data is the item's payload. Do not modify it.
func (j *Job) Data() []byte { return j.data }

// Attempt is how many times the item was handed out, this time included:
// 1 on its first delivery. An item that came back (a Nack, a NackAfter, a
// consumer gone, an offer given back by a Take that ended) has Attempt
// above 1: only such an item is ever handed to a consumer after a higher
// id.
func (j *Job) Attempt() int { return int(j.version) + 1 }

// Token is the delivery's fencing token: it grows with every delivery of
// the item (it is a ZooKeeper zxid, of a write made after the previous
// delivery ended). A resource that remembers the highest token it has seen
// for the item and refuses lower ones refuses a consumer that lost the job.
func (j *Job) Token() int64 { return j.token }

// Guard returns a check to put first in conn.Multi(...): the multi
// commits only while the item is as this delivery got it. It fails once
// the item is acked, or offered again (every offer of an item handed out
// before moves its version on): so a consumer that lost its delivery and
// writes late is refused once the next delivery began (not before: between
// the loss and the next offer, or after a Nack, the check still passes).
// It fences the job's writes to ZooKeeper itself; for other resources use
// Token.
func (j *Job) Guard() *zk.CheckVersionRequest {
	return &zk.CheckVersionRequest{Path: j.item, Version: j.version}
}

// Done is closed if the delivery is lost (the session ended, or another
// client deleted its ticket): the item will be delivered again. It is not
// closed by Ack or Nack.
func (j *Job) Done() <-chan struct{} { return j.o.Lost() }

// Ack removes the item for good, with its key, and with its ticket once
// every job of the ticket is settled, in one multi. It returns an error
// wrapping ErrClaimLost if the delivery was lost before the ack was sent
// (the item is then delivered again). Once called,
// the ack is sent, even if ctx had ended before the call, and goes on until
// it is applied or the session is over: ctx bounds only the wait. If ctx
// ends first, Ack returns an error wrapping ErrOutcomeUnknown and ctx's
// cause; if the session ends while the ack is sent and not answered, one
// wrapping ErrOutcomeUnknown alone (the item is either gone or delivered
// again; which, only the queue can tell). Ack after Ack returns nil; Ack
// after Nack or NackAfter, an error wrapping ErrSettled.
//
// Concurrent Acks of one Queue share multis (as Puts do), each failing
// alone.
func (j *Job) Ack(ctx context.Context) error { return j.ackTake(ctx) }

// ack acks the job, in the acks' group; with want > 0, the same multi puts
// a ticket of kind for that many items in line (Work's is shared with the
// other Acks of the multi that want some), and ack returns its name (""
// when the multi's reply was lost: look by tag).
func (j *Job) ack(ctx context.Context, want int, kind byte, tag string) (string, error) {
	var ticket string
	err := j.settle(ctx, "ack", j.q.s.Telemetry().Acked, func(*zk.Conn) error {
		ops := []any{&zk.DeleteRequest{Path: j.item, Version: j.version}}
		if j.key != "" {
			ops = append(ops, &zk.DeleteRequest{Path: j.q.keys + "/" + j.key, Version: -1})
		}
		closing := j.closing(false)
		req := ackReq{ops: append(ops, closing...), want: want, kind: kind, tag: tag, job: j, closes: len(closing) > 0}
		rs, _, _ := j.q.acks.Run(context.Background(), req)
		for errors.Is(rs[0].err, errOthersOut) {
			j.othersOver()
			rs, _, _ = j.q.acks.Run(context.Background(), req)
		}
		want = 0 // a try sent again after a lost reply puts none
		ticket = rs[0].ticket
		return gone(rs[0].i, rs[0].err)
	})
	if err != nil {
		// settle may have returned while the ack goes on (ctx ended): the
		// job's owner may still be writing ticket.
		return "", err
	}
	return ticket, nil
}

// ackReq is a request to the acks' group: an Ack's ops, and a ticket of
// ours for want items, of kind, made with tag. The Work tickets of one
// batch are one ticket, for as many items as they want together. closes:
// the ops delete job's ticket, the last of its lot.
type ackReq struct {
	ops    []any
	want   int
	kind   byte
	tag    string
	job    *Job
	closes bool
}

// errOthersOut answers an Ack that deletes its lot's ticket, not sent: a
// settlement of another Job of the lot is out and not in the same multi.
var errOthersOut = errors.New("fairqueue: other settlements of the ticket are out")

// ackResult is the outcome of one request's ops in a shared multi: the
// failed op's index and its error, and the ticket it made.
type ackResult struct {
	opResult
	ticket string
}

// opResult is the outcome of a multi: the failed op's index and its error.
type opResult struct {
	i   int
	err error
}

// takeAcks says how many of the pending requests go in one multi.
func takeAcks(pending []ackReq) int { return min(len(pending), 2*maxRound) }

// ackBatch sends the ops of a batch of requests in one multi, and again
// without those of a request that failed alone (an Ack whose delivery was
// lost); a failure of the whole (the connection, the session) is every
// request's.
func (q *Queue) ackBatch(batch []ackReq) []ackResult {
	out := make([]ackResult, len(batch))
	left := make([]int, len(batch))
	for i := range batch {
		left[i] = i
	}
	noWork := false // the shared Work ticket failed: the Acks go without it
	for len(left) > 0 {
		if left = q.holdClosing(batch, left, out); len(left) == 0 {
			break
		}
		var all []any
		start := make([]int, len(left))
		ticketOp := make([]int, len(batch)) // the op of a request's ticket
		work, workOp := 0, -1
		for k, i := range left {
			start[k] = len(all)
			all = append(all, batch[i].ops...)
			r := batch[i]
			switch {
			case r.want == 0, r.kind == kindWork && noWork:
				ticketOp[i] = -1
			case r.kind == kindWork:
				work += r.want
				if workOp < 0 {
					workOp = len(all)
					all = append(all, q.ticketOp(1, kindWork, r.tag))
				}
				ticketOp[i] = workOp
			default:
				ticketOp[i] = len(all)
				all = append(all, q.ticketOp(r.want, r.kind, r.tag))
			}
		}
		if workOp >= 0 {
			all[workOp] = q.ticketOp(work, kindWork, batch[left[0]].tag)
		}
		res, err := q.s.Conn().Multi(all...)
		failed, err := znode.MultiErr(res, err)
		if failed >= 0 && failed == workOp {
			// The Acks go again without it, and stand on their own; a
			// request for the ticket alone fails.
			noWork = true
			left = slices.DeleteFunc(left, func(i int) bool {
				if batch[i].kind == kindWork && batch[i].want > 0 && len(batch[i].ops) == 0 {
					out[i].opResult = opResult{0, err}
					return true
				}
				return false
			})
			continue
		}
		if failed < 0 || len(left) == 1 {
			for k, i := range left {
				out[i].opResult = opResult{failed, err}
				switch {
				case err == nil && ticketOp[i] >= 0:
					out[i].ticket = path.Base(res[ticketOp[i]].String)
				case failed >= 0:
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

// holdClosing takes out of left, answering them errOthersOut, the
// requests that delete their lot's ticket while another settlement of the
// lot is out and not among left's: a ticket's delete goes only with, or
// after, the settlements of the other Jobs of its lot.
func (q *Queue) holdClosing(batch []ackReq, left []int, out []ackResult) []int {
	if !slices.ContainsFunc(left, func(i int) bool { return batch[i].closes }) {
		return left
	}
	with := make(map[*Job]bool, len(left))
	for _, i := range left {
		with[batch[i].job] = true
	}
	return slices.DeleteFunc(left, func(i int) bool {
		if r := batch[i]; r.closes && r.job.lot.outside(with) {
			out[i].opResult = opResult{-1, errOthersOut}
			return true
		}
		return false
	})
}

// Nack gives the item back: it keeps its original place in line, ahead
// of everything put after it, and is delivered again, to the first
// consumer waiting. The delivery was counted when the item was handed out:
// an item that has had WithMaxAttempts deliveries moves to the dead-letter
// area now. Errors as for Ack; Nack after Nack or NackAfter returns nil,
// Nack after Ack an error wrapping ErrSettled.
func (j *Job) Nack(ctx context.Context) error { return j.nack(ctx, time.Now()) }

// NackAfter gives the item back, as Nack does, but keeps it from every
// consumer until d has passed (d > 0; this client's clock says when that
// is, the dispatcher's when it has come: keep clocks in sync): back off
// before a retry. Its place
// in line is kept, so when d has passed it comes before everything put
// after it. An item that has had WithMaxAttempts deliveries moves to the
// dead-letter area now, as with Nack. Errors as for Ack.
func (j *Job) NackAfter(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("fairqueue: nack %s: %w: delay %v must be positive", j.id, zkrecipes.ErrInvalidArgument, d)
	}
	return j.nack(ctx, time.Now().Add(d))
}

// nack gives the item back, free from until on: a node in held/ tells the
// dispatcher, in the multi that deletes the ticket; the item's version
// check fences (an item offered again since is not ours to give).
func (j *Job) nack(ctx context.Context, until time.Time) error {
	if j.q.maxAttempts > 0 && j.Attempt() >= j.q.maxAttempts {
		return j.settle(ctx, "nack", j.q.s.Telemetry().Buried, j.bury)
	}
	sent := false
	return j.settle(ctx, "nack", j.q.s.Telemetry().Nacked, func(*zk.Conn) error {
		closing := j.closing(true)
		if sent && len(closing) == 0 {
			// Sent, and its answer lost with the connection. Without the
			// ticket's delete (other Jobs share it) nothing in the multi
			// fails if it landed: it would make a second node in held/.
			// While we hold the item, a node of its in held/ is ours.
			landed, err := j.q.givenBack(j.bucket, j.name)
			if err != nil || landed {
				return cmp.Or(err, owner.ErrGone)
			}
		}
		sent = true
		return gone(j.q.sendBack(append(j.q.backOps(j.bucket, j.name, j.version, until), closing...)))
	})
}

// givenBack says whether held/ holds a node for the item name of bucket.
func (q *Queue) givenBack(bucket int64, name string) (bool, error) {
	names, _, err := q.s.Conn().Children(q.held)
	if err != nil {
		return false, ignoreNoNode(err)
	}
	for _, n := range names {
		if _, b, iname, ok := parseHeld(n); ok && b == bucket && iname == name {
			return true, nil
		}
	}
	return false, nil
}

// bury moves the item to dead/ with the ticket's delete (see closing), in
// one multi; a missing dead/ (never made, or reaped since) is made and the
// multi sent again.
func (j *Job) bury(conn *zk.Conn) error {
	closing := j.closing(true)
	ops := j.q.buryOps(j.id, j.item, j.key, j.version, j.Attempt(), j.data, closing...)
	i, err := j.q.multiIn(conn, j.q.dead, "move "+j.id+" to dead letters", ops)
	if err == nil {
		j.q.log.Info("fairqueue: item moved to dead letters", "id", j.id, "attempts", j.Attempt())
	}
	if i == len(closing) && errors.Is(err, zk.ErrNodeExists) {
		// Its dead letter exists (ids are never reused): buried, by a
		// try of ours whose answer was lost with the connection (without
		// the ticket's delete, which other Jobs share, nothing else in
		// the multi fails then).
		return owner.ErrGone
	}
	return gone(i, err)
}

// multiIn sends ops in one multi; when their create in dir finds dir
// missing (never made, or reaped since), it makes dir and sends them
// again. It returns the index of the op that failed and its error.
func (q *Queue) multiIn(conn *zk.Conn, dir, what string, ops []any) (int, error) {
	for range maxDirTries {
		i, err := znode.MultiErr(conn.Multi(ops...))
		if i < 0 || !errors.Is(err, zk.ErrNoNode) {
			return i, err
		}
		if c, ok := ops[i].(*zk.CreateRequest); !ok || path.Dir(c.Path) != dir {
			return i, err
		}
		if _, err := conn.CreateContainer(dir, nil, zk.FlagContainer, q.acl); err != nil &&
			!errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
			return -1, err
		}
	}
	return -1, fmt.Errorf("%s: %s keeps vanishing", what, dir)
}

// maxDirTries bounds the retries of a multi whose directory keeps being
// reaped between its creation and the multi.
const maxDirTries = 8

// gone maps a multi's failure to what the owner needs to know: the delivery or
// the item is gone or moved on (our own earlier try, or a loss), or
// something else.
func gone(_ int, err error) error {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return owner.ErrGone
	}
	return err
}

// settle ends the delivery with fn, counting it with count once applied.
func (j *Job) settle(ctx context.Context, op string, count func(), fn func(*zk.Conn) error) error {
	err := j.o.ReleaseWith(ctx, op, func(conn *zk.Conn, _ bool) error {
		err := fn(conn)
		if err == nil {
			count()
		}
		if !session.IsConnErr(err) {
			j.lot.settled(j) // over: applied, or refused for good (else sent again)
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
		// landed, so the delivery's loss is not wrapped; ErrClaimLost would
		// promise a redelivery that may never come.
		return fmt.Errorf("fairqueue: %s %s: %w: %v", op, j.id, ErrOutcomeUnknown, err)
	default:
		return fmt.Errorf("fairqueue: %s %s: %w", op, j.id, err)
	}
}
