package zklock

import "errors"

// Sentinel errors, for errors.Is. The errors this package returns wrap them
// with what happened and where: "zklock: lock /app/l: lock lost: our node
// was deleted by another client". Telemetry reports them by name, as
// error.type ("zklock.ErrLockLost").
var (
	// ErrLocked: TryLock, TryRLock: another contender holds the lock or
	// waits for it.
	ErrLocked = errors.New("locked by another contender")
	// ErrLockLost: a lease (or a contender's place in line) was lost: its
	// session is over, or its node was deleted or written by another client.
	ErrLockLost = errors.New("lock lost")
	// ErrReleased: Lease.Err after the lease was released.
	ErrReleased = errors.New("lease released")
	// ErrSettled: a release of another kind than the one that released
	// the lease, or is releasing it: Resign after Unlock, Unlock after
	// Resign. (Unlock after Unlock, and Resign after Resign, return nil.)
	ErrSettled = errors.New("lease already released another way")
	// ErrNoPermit: TryAcquire: every permit is held or waited for.
	ErrNoPermit = errors.New("no permit free")
	// ErrPermitsMismatch: the semaphore's directory records another number
	// of permits.
	ErrPermitsMismatch = errors.New("semaphore permits mismatch")
	// ErrNoLeader: Leader: the election has no contender.
	ErrNoLeader = errors.New("no leader")
	// ErrNotLeader: Proclaim after the leadership ended.
	ErrNotLeader = errors.New("not the leader")
	// ErrPathInUse: the path holds the contenders of another kind of recipe
	// (a Semaphore's on a Mutex's path, say). A Mutex and an RWMutex may
	// share a path: a Mutex contender is a writer.
	ErrPathInUse = errors.New("path in use by another kind of recipe")
)

// errorName is the name a sentinel of this package is reported by in
// telemetry, as error.type ("zklock.ErrLockLost"); "" for any other error.
func errorName(err error) string {
	switch err {
	case ErrLocked:
		return "zklock.ErrLocked"
	case ErrLockLost:
		return "zklock.ErrLockLost"
	case ErrReleased:
		return "zklock.ErrReleased"
	case ErrSettled:
		return "zklock.ErrSettled"
	case ErrNoPermit:
		return "zklock.ErrNoPermit"
	case ErrPermitsMismatch:
		return "zklock.ErrPermitsMismatch"
	case ErrNoLeader:
		return "zklock.ErrNoLeader"
	case ErrNotLeader:
		return "zklock.ErrNotLeader"
	case ErrPathInUse:
		return "zklock.ErrPathInUse"
	}
	return ""
}
