package fairqueue

import "errors"

// Sentinel errors, for errors.Is. Errors returned by this package wrap them
// (and the root package's sentinels) with the detail.
var (
	// ErrEmpty: TryTake found no pending item.
	ErrEmpty = errors.New("fairqueue: queue is empty")

	// ErrClaimLost: the job's claim is gone (its session ended, or another
	// client deleted it); the item is, or will be, delivered again.
	ErrClaimLost = errors.New("fairqueue: claim lost")

	// ErrOutcomeUnknown: a write was cut off (connection lost, ctx ended)
	// and may or may not have been applied. A Put that returns it may have
	// added the item: the caller decides whether to put it again.
	ErrOutcomeUnknown = errors.New("fairqueue: outcome unknown")

	// ErrNoDeadLetter: Requeue was given an id that is not in the
	// dead-letter area.
	ErrNoDeadLetter = errors.New("fairqueue: no such dead letter")
)
