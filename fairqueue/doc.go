// Package fairqueue is an ordered, at-least-once job queue on ZooKeeper.
//
// What it promises:
//
//   - Order: items are handed out oldest first, to consumers in the order
//     they began to wait. A consumer is never handed a lower id than before,
//     except an item that came back (given back, or left by a consumer that
//     died), and such an item says so: Job.Attempt is above 1.
//   - At least once: every item put is delivered until it is acked or moved
//     to the dead letters (WithMaxAttempts). A consumer that dies mid-job
//     causes a redelivery; Job.Token and Job.Guard let a resource refuse the
//     late writes of a delivery once the next one began.
//   - Nothing lost or stranded by a fault: a dropped connection the session
//     survives, a caller's ctx ending at any moment, a consumer or the
//     dispatcher killed or frozen.
//   - Scale: the queue holds tens of millions of pending items; putting and
//     taking cost a few requests per item, fewer in batches.
//
// A producer and a consumer:
//
//	q, _ := fairqueue.New(session, "/jobs")
//	id, err := q.Put(ctx, []byte("payload"))
//	...
//	err = q.Work(ctx, func(ctx context.Context, j *fairqueue.Job) error {
//		return handle(j.Data()) // nil acks; an error gives the job back
//	}, fairqueue.WithHandlers(8))
//
// Take and Ack do the same one job at a time; PutMany puts a batch in one
// request; Put WithKey is safe to retry, WithDelay holds an item back;
// NackAfter backs off; DeadLetters and Requeue handle the items that failed
// too often.
//
// # Dispatching
//
// Each Queue that takes stands for election (zklock's Election) as the
// queue's dispatcher; one is elected, and the others wait behind it. A
// consumer asks for an item with a ticket, an ephemeral sequential node in
// ready/, one per item it wants; the dispatcher hands the oldest free items
// to the oldest tickets, in one multi per round: it writes the offers into
// the consumers' inboxes (ephemeral nodes of theirs, so an offer is the
// consumer's claim, and goes with its session) and marks each ticket
// served. The consumer reads its inbox when its watch fires, then the
// items themselves, and Ack deletes item and ticket in one multi (Work puts
// a new ticket in line in the same multi). The dispatcher keeps what it
// learnt between rounds, and learns what changed from watches: no claim
// ever races another.
//
// A dispatcher that closes (Queue.Close, Session.Close) hands over at once;
// one whose process dies or freezes stalls hand-out until its session
// expires (consumers go on with the jobs they hold): keep the sessions of
// taking processes short, or close the Queue before a planned stop. A
// deposed dispatcher can never hand out: every hand-out multi checks its
// election node first.
//
// # At least once, and Attempt
//
// An item's data version counts its deliveries before the current one
// (Job.Attempt is one more): the first offer of an item leaves it as it
// is; an offer of an item handed out before (given back, or of a consumer
// gone) sets it again, version-checked, in the hand-out's multi. Each
// hand-out also writes the highest id ever handed out into items/'s data,
// so that a new dispatcher knows every free item at or below it was handed
// out before. So Attempt is exact under any fault, even a consumer and the
// dispatcher dying together: the consumer's items are then free, at or
// below the mark, and the next dispatcher bumps them as it offers them.
//
// Nack and NackAfter give an item back with a node in held/, made in the
// multi that deletes the ticket, which the dispatcher watches; the item
// keeps its place in line and comes back when its hold ends. Take that
// ends after its item was offered gives it back the same way (the offer
// counts as a delivery). A consumer whose session ends loses its tickets
// and its inbox with them: the dispatcher, seeing both gone, offers its
// items that are still there again.
//
// # Layout
//
// Under the queue's path (the queue's data is its high mark, the newest
// bucket's number):
//
//	items/b0000000042/i-0000000007         an item: its data is the payload
//	items/b0000000042/i-k.<key>.0000000008 an item put WithKey
//	items (its data)                       the highest id ever handed out
//	ready/t-<consumer>-<tag>-0000000003    EPHEMERAL|SEQUENCE: a ticket, for one
//	                                       item ("y-": a TryTake's); data
//	                                       version 1 once served
//	consumers/<consumer>                   EPHEMERAL: a consumer's inbox, the
//	                                       offers standing for its tickets
//	dispatch/_zkr_<guid>-elect-0000000001  the dispatcher's election
//	held/<until>-<bucket>-<item>-0000000004 an item given back, free from then
//	delayed/d-<due>-<key>-0000000001       an item put WithDelay, until due
//	keys/<key>                             the bucket of the item put with key
//	dead/0000000042-0000000007             an item delivered too often
//
// Items live in buckets of at most a thousand items; a bucket's number and
// an item's sequence number within it make the item's id, and ids sort in
// queue order. A producer puts into the newest bucket with a multi that
// checks the bucket is not sealed and that the queue's high mark has not
// moved since the producer saw that bucket as the newest; the producer
// whose item fills the bucket seals it, and the next put creates the next
// bucket with its first item, moving the high mark up, conditional on its
// version. So every item of a bucket was created before the next bucket
// existed, and the dispatcher lists one bucket at a time, deleting each
// once drained.
//
// The queue's path and the directories under it are container nodes: the
// server removes them once they are empty again. Ids are never reused
// while the queue holds anything.
//
// # Limits
//
// One getChildren reply must fit in 1 MiB: the buckets' directory holds
// some 60,000 buckets (tens of millions of items); ready/ one ticket per
// item wanted, dead/ one node per dead letter, held/ one per item given
// back: they are meant to stay far below that. All consumers of a queue
// must run this version: the layout is not the one of versions before it.
package fairqueue
