package fairqueue

import (
	"errors"

	"github.com/go-zookeeper/zk"
)

// Sentinel errors, for errors.Is. Errors returned by this package wrap them
// (and the root package's sentinels) with the detail: "fairqueue: ack
// 0000000003-0000000041: claim lost: session expired".
var (
	// ErrEmpty: TryTake found no pending item.
	ErrEmpty = errors.New("queue is empty")

	// ErrClaimLost: the job's delivery was lost (its session ended, or
	// another client deleted its ticket); the item is, or will be,
	// delivered again.
	ErrClaimLost = errors.New("claim lost")

	// ErrOutcomeUnknown: a write was cut off (ctx ended mid-call) and may
	// or may not have been applied. A Put that returns it may have added
	// the item: the caller decides whether to put it again. An Ack or Nack
	// that returns it goes on in the background until it is applied.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrNoDeadLetter: Requeue was given an id that is not in the
	// dead-letter area.
	ErrNoDeadLetter = errors.New("no such dead letter")

	// ErrClosed: the Queue was closed (Close): it takes no more.
	ErrClosed = errors.New("queue closed")

	// ErrSettled: Ack after Nack (or NackAfter), Nack after Ack: the job was
	// settled, or is being settled, the other way. (Ack after Ack, and Nack
	// after Nack, return nil.)
	ErrSettled = errors.New("job already settled another way")
)

var (
	// errInboxLost: the session's inbox is gone (our session ended).
	errInboxLost = errors.New("the consumer's inbox is gone")
	// errDone: a Job's owner says so once Ack or Nack is applied.
	errDone = errors.New("job settled")
)

// ignoreNoNode: a node found gone is no error here.
func ignoreNoNode(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}
