package zklock

import "github.com/zkrecipes/zkrecipes/internal/telemetry"

// Sentinel errors, for errors.Is. The errors this package returns wrap them
// with what happened and where: "zklock: lock /app/l: lock lost: our node
// was deleted by another client". Telemetry reports them by name, as
// error.type ("zklock.ErrLockLost").
var (
	// ErrLocked: TryLock, TryRLock: another contender holds the lock or
	// waits for it.
	ErrLocked = telemetry.Sentinel("locked by another contender", "zklock.ErrLocked")
	// ErrLockLost: a lease (or a contender's place in line) was lost: its
	// session is over, or its node was deleted or written by another client.
	ErrLockLost = telemetry.Sentinel("lock lost", "zklock.ErrLockLost")
	// ErrReleased: Lease.Err after the lease was released.
	ErrReleased = telemetry.Sentinel("lease released", "zklock.ErrReleased")
	// ErrSettled: a release of another kind than the one that released
	// the lease, or is releasing it: Resign after Unlock, Unlock after
	// Resign. (Unlock after Unlock, and Resign after Resign, return nil.)
	ErrSettled = telemetry.Sentinel("lease already released another way", "zklock.ErrSettled")
	// ErrNoPermit: TryAcquire: every permit is held or waited for.
	ErrNoPermit = telemetry.Sentinel("no permit free", "zklock.ErrNoPermit")
	// ErrPermitsMismatch: the semaphore's directory records another number
	// of permits.
	ErrPermitsMismatch = telemetry.Sentinel("semaphore permits mismatch", "zklock.ErrPermitsMismatch")
	// ErrNoLeader: Leader: the election has no contender.
	ErrNoLeader = telemetry.Sentinel("no leader", "zklock.ErrNoLeader")
	// ErrNotLeader: Proclaim after the leadership ended.
	ErrNotLeader = telemetry.Sentinel("not the leader", "zklock.ErrNotLeader")
	// ErrPathInUse: the path holds the contenders of another kind of recipe
	// (a Semaphore's on a Mutex's path, say). A Mutex and an RWMutex may
	// share a path: a Mutex contender is a writer.
	ErrPathInUse = telemetry.Sentinel("path in use by another kind of recipe", "zklock.ErrPathInUse")
)
