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
//     dispatcher killed, frozen or cut off.
//   - Scale: tens of millions of pending items; a few requests per item,
//     fewer in batches.
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
// Take and Ack do one job at a time; PutMany puts a batch in one request;
// Put WithKey is safe to retry, WithDelay holds an item back; NackAfter
// backs off; DeadLetters and Requeue handle the items that failed too often.
//
// # How
//
// Each Queue that takes stands for election (zklock's Election) as the
// queue's dispatcher. A consumer asks for items with a ticket, an
// ephemeral sequential node; the dispatcher hands the oldest free items to
// the oldest tickets, one multi per round, writing the offers into the
// consumers' inboxes (ephemeral nodes of theirs: an offer lasts as long as
// its ticket and its consumer's session). It keeps what it learnt
// between rounds, and learns what changed from watches; every hand-out
// multi checks its election node first, so a deposed dispatcher hands out
// nothing. A dispatcher that closes hands over at once; one that dies or
// freezes stalls hand-out until its session expires (consumers go on with
// the jobs they hold): give taking processes short session timeouts, and
// Close a Queue before a planned stop.
//
// An item's data version counts its deliveries before the current one: an
// item handed out before (given back with Nack or NackAfter, or left by a
// consumer gone) is bumped in the multi that offers it again, and each
// hand-out records the highest id ever handed out, so that a new
// dispatcher knows every free item at or below it was handed out. So
// Attempt is exact even when a consumer and the dispatcher die together.
//
// # Layout
//
// Under the queue's path (whose data is the newest bucket's number):
//
//	items/b0000000042/i-0000000007        an item; i-k.<key>.<seq> put WithKey
//	items (its data)                      the highest id ever handed out
//	ready/t-<consumer>-<tag>-0001-<seq>   a ticket (EPHEMERAL|SEQUENCE)
//	consumers/<consumer>                  a consumer's inbox (EPHEMERAL)
//	dispatch/                             the dispatcher's election
//	held/<until>-<bucket>-<item>-<seq>    an item given back
//	delayed/d-<due>-<key>-<seq>           an item put WithDelay, until due
//	keys/<key>                            the item put with key: its bucket, or "delayed"
//	dead/0000000042-0000000007            an item delivered too often
//
// Items live in buckets, sealed once they hold a thousand items (a batch
// put before the seal may take one past that): an item's id is its
// bucket's number and its sequence number, and ids sort in queue order.
// Only the newest bucket takes puts, checked against the queue's high
// mark, so every item of a bucket is older than every item of the next;
// the dispatcher lists one bucket at a time and deletes each once drained
// (the newest once drained while no consumer waits). The queue's path and
// its directories, buckets aside, are container nodes, removed by the
// server once empty. One getChildren reply must fit in 1 MiB: ready/,
// dead/ and held/ are flat and meant to stay far below that. All consumers of a queue must run this version: the
// layout is not the one of earlier versions (see CHANGELOG).
package fairqueue
