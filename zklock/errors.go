// Package zklock holds ZooKeeper's lock recipes done right: a fair mutex, a
// read/write lock, a semaphore and leader election. Every acquire returns a
// Lease that carries a fencing token and says when it is lost.
package zklock

import "errors"

// Sentinel errors, for errors.Is.
var (
	ErrLocked          = errors.New("zklock: locked by another contender")
	ErrLockLost        = errors.New("zklock: lock lost")
	ErrReleased        = errors.New("zklock: lease released")
	ErrNoPermit        = errors.New("zklock: no permit free")
	ErrPermitsMismatch = errors.New("zklock: semaphore permits mismatch")
	ErrNoLeader        = errors.New("zklock: no leader")
	ErrNotLeader       = errors.New("zklock: not the leader")
)
