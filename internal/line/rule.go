package line

// Rule is a recipe's whole part in the waiting line: given the line in
// order and our place in it, do we hold, and if not, for whom do we wait. A
// Rule is pure: it looks at its arguments and nothing else, so it can be
// tested on its own, and the engine can ask it again at every listing.
//
// Models: Curator's LockInternalsDriver.getsTheLock (one loop for every lock
// kind, the kind is a rule) and kazoo's Lock.acquired_lock hook.
type Rule func(line []Node, me int) Decision

// Decision is a Rule's answer.
type Decision struct {
	// Hold: we hold now.
	Hold bool
	// Watch: the places (in the line given) of the contenders to wait for;
	// the engine watches each of them, and our own node, and nothing else.
	Watch []int

	// What a change to a watched node proves, without listing again. Both
	// rest on one fact: sequence numbers only grow, so a node ahead of ours
	// can go away but none can appear.

	// GoneHolds: the deletion of any watched node means we hold.
	GoneHolds bool
	// ReleaseHolds: a data change of a watched node made by this module
	// means we hold. Such a node changes its data only as its holder
	// releases it (see the owner package's release mark), so this is for
	// rules under which a watched node that held and left frees us.
	ReleaseHolds bool
	// Written: a watched node found written (data version above 0) when
	// its watch was set has changed already, and its change is news: list
	// again (once per version). A Semaphore's new holder announces itself
	// so to the waiter behind it.
	Written bool
}
