// Package zklock holds ZooKeeper's lock recipes done right: a fair mutex, a
// read/write lock, a semaphore and leader election. Every acquire returns a
// Lease that carries a fencing token and says when it is lost.
//
// # The line
//
// Every recipe here is one waiting line in one directory. A contender
// creates an EPHEMERAL|SEQUENCE node there, lists the directory, sorts the
// contenders by sequence number, and asks its recipe's rule two questions:
// do I hold now, and if not, which contenders ahead of me do I wait for?
//
//	Mutex        hold when first; else wait for the one just ahead
//	RWMutex      a writer as a Mutex; a reader holds when no writer is
//	             ahead, else waits for the nearest writer ahead
//	Semaphore(n) hold when among the first n; the first waiter waits for
//	             every holder, a later waiter for the one just ahead
//	Election     as a Mutex: the first leads
//
// A waiter watches those contenders with getData and nothing else, so a
// release wakes the one contender it concerns (no herd). When one of them
// changes, it lists again and asks again. Its own node is watched too: a
// contender whose node another client deleted is told so.
//
// Why this is safe: sequence numbers only grow, so a node ahead of ours can
// go away but none can ever appear. What the rule granted stays granted,
// and a contender never needs to watch anything behind it.
//
// # Fast paths
//
// The same fact makes listing again unnecessary in two cases. If the one
// we wait for goes away and it was the only one ahead of us that could hold
// us back, we hold. And a holder made by this module releases with one
// multi that writes a release mark to its node and deletes it: the
// successor, watching with getData, sees the data change, which no waiter
// giving up and no session expiring ever produces, and knows that the
// contender ahead held and left (for a Mutex: everyone ahead of it was gone
// already). When no one has joined the line since the holder listed it, no
// one waits for the mark and the release is a plain delete.
//
// The first listing is sent in the create's own round trip (a session's
// requests are answered in order), and its child watch stands in for the
// watch on our own node until something in the directory changes: an
// uncontended lock costs two round trips, create-and-list and delete, and
// no request for loss detection.
//
// # Tokens and loss
//
// A lease's token is its node's Czxid, read from the create's reply: a
// 64-bit number, strictly increasing over the successive holders of one
// lock and unique in the ensemble. A resource that refuses tokens lower
// than the highest it has seen cannot be written by a holder that paused
// past its lease. For ZooKeeper itself, Lease.Guard fences a multi.
//
// A lease is lost when its session is over or another client deletes or
// writes its node. The Session declares itself lost once 80% of the
// negotiated timeout has passed since the latest request that the
// ensemble's leader provably heard (a follower's own answers prove nothing:
// cut off from the leader, it goes on answering), so the holder is told
// (Lease.Done, Err, Context) before any leader can expire the session and
// grant the lock to anyone else, whichever server the holder is on. A disconnect that the session survives (a
// server restarting, an ensemble electing a leader) ends nothing: reads are
// asked again once the client has reconnected, and a write whose outcome is
// unknown is looked at once it is settled, never guessed at.
//
// One goroutine owns each lease's state. Unlock, a leader's Proclaim and
// the watch on the node are messages to it, so it alone decides whether
// the lease has ended: a node found gone after its own release was sent
// was released, not lost, and its own write is never taken for a
// stranger's. Once asked, a release is sent and goes on until it is
// confirmed or the session ends, whatever becomes of the caller's context,
// even one that had ended before the call.
//
// # Sharing a path
//
// A Mutex and an RWMutex on one path are one line: a Mutex contender is a
// writer. Curator's, kazoo's and go-zookeeper's lock nodes are recognised
// and take their place in it. A Semaphore, an Election and the lock family
// each need a path of their own: contenders of another kind make an acquire
// fail with ErrPathInUse rather than let both in.
package zklock
