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
//	line/_zkr_<guid>-take-0000000003      EPHEMERAL|SEQUENCE: a waiting consumer
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
// was created before the next bucket existed, and a consumer that takes the
// lowest unclaimed id never sees ids go backwards except when an item comes
// back (Nack, a lost claim). Only the buckets' directory and the oldest
// buckets are ever listed; a drained bucket is deleted.
//
// # Taking
//
// A consumer looks at the queue (the claims, the line's size and the oldest
// bucket, in one round trip) and claims the oldest item not claimed yet,
// never another: so a consumer is never handed a lower id than it had
// before, except an item that came back. When items wait for consumers,
// every consumer takes at once, each the oldest it sees; two that race for
// one item settle it with the claim's multi, and the loser goes on to the
// next item that look showed (the first few are read in one round trip),
// with no other look. A consumer that froze or died holds no one up. Many
// consumers racing for the same oldest items is the cost of the order: a
// crowd of them loses most races, each a write (see the README's figures).
//
// While items wait for consumers, a look that finds a backlog (enough items
// free, no consumer in line) leaves its free items with the Queue, and the
// Takes of the next 100 ms use them instead of looking: each reads the
// oldest few in one round trip and claims the oldest never delivered (data
// version 0), passing over only items gone or delivered before. That halves
// what a Take costs when a backlog waits. Items that come back (a lost
// claim, a hold that ends) are found by the next look, so while a backlog
// lasts a consumer may be handed newer items first for up to that moment;
// a Nack clears its own Queue's backlog, so the item given back is that
// Queue's next.
//
// Fairness is for scarcity. A consumer that finds nothing stands in the
// consumers' line, on the same engine as zklock's recipes: the first two in
// line look at the items, the others each watch one or two nodes ahead, so
// a put wakes two consumers, not all of them. Consumers in line, and those
// that arrive while items are fewer than consumers waiting, leave each item
// to those ahead of them for a grace of a few round trips, then take it
// themselves: a frozen consumer at the head of the line delays the others
// by that grace, not by a session timeout.
//
// # At least once
//
// Take claims an item with an EPHEMERAL claim node and a version-checked
// setData on the item in one multi; the item's data version is the number of
// claims (Job.Attempt: the deliveries, and a claim that landed for a Take
// that gave up before it returned). Ack deletes item and claim in one multi; Nack
// deletes only the claim, so the item is back at its place in line. A
// consumer whose session ends loses its claims, and its items are delivered
// again. Items delivered WithMaxAttempts times move to dead/ (see
// DeadLetters and Requeue). NackAfter gives an item back but holds it until
// a back-off has passed.
//
// # Retries, batches, delays
//
// PutMany puts a batch in one multi: all or nothing. A Put WithKey creates
// keys/<key> in its multi, so a retry after ErrOutcomeUnknown finds the item
// instead of making a second one; the key goes with the item's Ack. A Put
// WithDelay waits in delayed/ and gets its place in line, and its id, when
// it comes due: the first consumer to look then moves it to the end of the
// queue.
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
// from 0.
package fairqueue
