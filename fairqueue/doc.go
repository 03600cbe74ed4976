// Package fairqueue is an ordered, at-least-once job queue on ZooKeeper that
// survives crashes and holds far more items than one ZooKeeper directory can
// list.
//
// # Layout
//
// Under the queue's path:
//
//	items/b0000000042/i-0000000007   an item (its data is the job's payload)
//	claims/0000000042-0000000007     EPHEMERAL: the item is being worked on
//	line/_zkr_<guid>-take-0000000003 EPHEMERAL|SEQUENCE: a waiting consumer
//	dead/0000000042-0000000007       an item that was delivered too often
//
// The queue's path and items/, claims/, line/ and dead/ are container nodes:
// the server removes them once they are empty again.
//
// # Order
//
// Items live in buckets of at most a fixed number of items; a bucket's
// number and an item's sequence number within it make the item's id, and ids
// sort in queue order. A producer puts into the newest bucket with a multi
// that checks the bucket is not sealed; the producer whose item fills the
// bucket seals it (sets its data), and the next put creates the next bucket
// together with its first item, in one multi that also moves the queue's
// high mark (the queue directory's data) up, conditional on the mark's
// version: bucket numbers only grow, however stale a producer's idea of
// them. So every item of a bucket was created before the next bucket
// existed, and a consumer that takes the lowest unclaimed id never sees ids
// go backwards except when an item comes back (Nack, a lost claim). Only the
// buckets' directory and the oldest buckets are ever listed; a drained
// bucket is deleted.
//
// # Fairness
//
// Waiting consumers stand in a line, on the same engine as zklock's
// recipes: each watches only the consumer ahead of it, and only the
// consumer at the head of the line looks at the items, so a put wakes one
// consumer.
//
// # At least once
//
// Take claims an item with an EPHEMERAL claim node and a version-checked
// setData on the item in one multi; the item's data version is the number of
// deliveries (Job.Attempt). Ack deletes item and claim in one multi; Nack
// deletes only the claim, so the item is back at its place in line. A
// consumer whose session ends loses its claims, and its items are delivered
// again. Items delivered WithMaxAttempts times move to dead/ (see
// DeadLetters and Requeue).
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
