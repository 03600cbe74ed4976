// Package fairqueue is an ordered, at-least-once job queue on ZooKeeper that
// survives crashes and holds far more items than one ZooKeeper directory can
// list.
//
// # Layout
//
// Under the queue's path:
//
//	items/b0000000042/i-0000000007        an item (its data is the job's payload)
//	items/b0000000042/i-k.<key>.0000000008 an item put WithKey
//	claims/0000000042-0000000007          EPHEMERAL: the item is being worked on
//	held/0000000042-0000000007-<ms>       the item is held back until then (NackAfter)
//	delayed/d-<ms>-<key>-0000000001       an item put WithDelay, until it is due
//	keys/<key>                            the bucket of the item put with that key
//	line/_zkr_<guid>[.<n>]-take-0000000003 EPHEMERAL|SEQUENCE: a consumer waiting
//	                                      for n items (one when there is no n); its
//	                                      data, once written, an offer of items
//	line (the directory's data)           the offers standing
//	dead/0000000042-0000000007            an item that was delivered too often
//
// The queue's path and the directories under it are container nodes: the
// server removes them once they are empty again.
//
// # Order
//
// Items live in buckets of at most a fixed number of items; a bucket's
// number and an item's sequence number within it make the item's id, and ids
// sort in queue order. A producer puts into the newest bucket with a multi
// that checks the bucket is not sealed and that the queue's high mark (the
// queue directory's data: the newest bucket's number) has not moved since
// the producer saw that bucket as the newest; the producer whose item fills
// the bucket seals it (sets its data), and the next put creates the next
// bucket together with its first item, in one multi that also moves the
// high mark up, conditional on the mark's version: bucket numbers only
// grow, however stale a producer's idea of them. So every item of a bucket
// was created before the next bucket existed. Only the buckets' directory
// and the oldest buckets are ever listed; a drained bucket is deleted.
//
// # Taking: one consumer chooses
//
// Consumers stand in a line, in the order they called Take (Work stands
// there as one consumer that wants as many items as it has handlers free),
// and only the consumer at the head of the line chooses items. It looks at
// the queue (the offers standing, the claims, the held and delayed items and
// the oldest bucket, in one round trip), reads the oldest free items, and in
// one multi claims the first ones for itself and hands the next ones to the
// consumers waiting behind it, in line order, as many as each wants: it
// writes an offer (the items, and their payloads when small) into each one's
// node, checked to be still waiting. The consumer sees its node change
// (its watch), reads it, and claims the items with its own session, so that
// the claims are ephemeral to the consumer that does the work; a claim that
// lands after the offer was passed over fails, checked against the node's
// version. No one else chooses an item, so no claim loses a race. The head
// leaves the line with its multi, and the first consumer behind the ones it
// served is the head next.
//
// So the oldest item goes to the consumer that has waited longest, and no
// consumer (a loop of one Queue's Takes, or one of Work's handlers) is ever
// handed a lower id than it had before, except an item that came back: a
// Nack, a lost claim, an ended hold, or an offer left unclaimed (passed
// over, or given up by a Take that ended). Such an item's Job.Attempt is
// above 1: every hand-out counts, a claim's and an offer's.
//
// The offers standing (made, and their items not claimed yet) are recorded
// in the line directory's data, which every hand-out writes back,
// conditional on the version it read: two hand-outs never overlap, and the
// next head learns which items are spoken for in one read.
//
// A head that froze or died (its session lingering) holds no one up for
// long: the consumer second in line, after a grace of a few hand-outs' time
// with items free and nothing handed out, passes the head over (writes its
// node, checked to be still waiting) and hands out itself. The grace is
// counted by the consumer's Queue, not by its Take, so a loop of Takes each
// shorter than the grace gets past a frozen head too. An offer left
// unclaimed for the grace (its consumer frozen) is passed over by the next
// hand-out, which gives its items to others; TryTake takes such an item too.
// A consumer passed over joins the line again at its end.
//
// # At least once
//
// A claim is an EPHEMERAL claim node and a version-checked setData on the
// item, in one multi; the item's data version is the number of hand-outs
// (Job.Attempt): the head's claims of items for itself, its offers (which
// set the version in the hand-out's multi; the claim of an offered item
// checks it), TryTake's claims. An offer left unclaimed, and a claim that
// landed for a Take that gave up before it returned, count as well: the
// item was handed out. Ack deletes item and claim in one multi; Nack
// deletes only the claim, so the item is back at its place in line. A
// consumer whose session ends loses its claims, and its items are delivered
// again. Items delivered WithMaxAttempts times move to dead/ (see
// DeadLetters and Requeue). NackAfter gives an item back but holds it until
// a back-off has passed.
//
// # Work, batches, retries, delays
//
// Work runs handlers on the jobs: nil acks, an error or a panic gives the
// job back with a back-off. Concurrent Puts and Acks of one Queue share
// multis (group commit): a request that arrives while one is out goes with
// the next, so a caller waits at most one round trip more, and one that
// fails alone (a key taken, a claim lost) fails alone. Work joins the line
// in the multi of the acks sent with it. PutMany puts a batch in one multi:
// all or nothing. A Put WithKey creates keys/<key> in its multi, so a retry
// after ErrOutcomeUnknown finds the item instead of making a second one;
// the key goes with the item's Ack. A Put WithDelay waits in delayed/ and
// gets its place in line, and its id, when it comes due: the head of the
// line moves it to the end of the queue.
//
// # Limits
//
// One getChildren reply must fit in 1 MiB. Items are never listed more than
// one bucket (1,000 items) at a time, and the buckets' directory holds some
// 60,000 buckets, so the queue holds tens of millions of pending items.
// claims/ holds one node per job in progress and dead/ one per dead letter:
// both are flat and meant to stay far below that. Ids are never reused
// while the queue holds anything: only once it is entirely empty (no item,
// claim, waiting consumer or dead letter) does the server reap the queue's
// directory, and with it the high mark, and numbering may start again
// from 0. All consumers of a queue must run this version: the line's
// protocol (offers) is not the one of earlier versions.
package fairqueue
