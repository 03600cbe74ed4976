package zklock

import (
	"context"
	"fmt"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// RWMutex is a fair distributed read/write lock: ZooKeeper's shared-lock
// recipe. Readers share the lock; a writer holds it alone. Contenders of
// both kinds are served first come, first served, so a stream of readers
// never starves a waiting writer, and a writer's release lets in at once
// every reader queued directly behind it.
//
// Herd-free: a reader watches only the nearest writer ahead of it, a writer
// only the contender just ahead of it; only contenders ahead count. A lock
// held for reading cannot be upgraded to writing: a holder that asks waits
// for itself.
//
// A Mutex on the same path is a writer. Curator's InterProcessReadWriteLock
// ("__READ__", "__WRIT__") and kazoo's ReadLock and WriteLock ("__rlock__",
// "__lock__") are recognised too.
//
// Like Mutex, it is safe for concurrent use, and each acquire gets its own
// Lease with a fencing token.
type RWMutex struct {
	s      *session.Session
	dir    string
	reader *line.Spec
	writer *line.Spec
}

// NewRWMutex returns a read/write lock on the directory path. It creates
// nothing until the first acquire.
func NewRWMutex(s *zkrecipes.Session, path string, opts ...Option) (*RWMutex, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &RWMutex{s: o.s, dir: path,
		reader: o.lockSpec(line.Shared, "-read-", shared, telemetry.RWRead, "zklock.RWMutex.RLock"),
		writer: o.lockSpec(line.Exclusive, "-write-", exclusive, telemetry.RWWrite, "zklock.RWMutex.Lock"),
	}, nil
}

// shared is a reader's rule: hold when no writer is ahead, else wait for
// the nearest writer ahead. Its going means we hold when it was the only
// writer ahead; its release mark, always (it held, so everyone ahead of it
// was gone, and only readers are between it and us).
func shared(l []line.Node, me int) line.Decision {
	blocker, others := -1, false
	for j := me - 1; j >= 0; j-- {
		if l[j].Kind != line.Exclusive {
			continue
		}
		if blocker >= 0 {
			others = true
			break
		}
		blocker = j
	}
	if blocker < 0 {
		return line.Decision{Hold: true}
	}
	return line.Decision{Watch: []int{blocker}, GoneHolds: !others, ReleaseHolds: true}
}

// RLock waits until this contender holds the lock for reading: no writer is
// ahead of it. Errors as for Mutex.Lock.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, "read-lock", rw.reader, true)
}

// Lock waits until this contender holds the lock for writing: no one is
// ahead of it. Errors as for Mutex.Lock.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, "lock", rw.writer, true)
}

// TryRLock takes the lock for reading if no writer holds it or waits for it,
// and returns ErrLocked otherwise, leaving no node behind.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, "read-lock", rw.reader, false)
}

// TryLock takes the lock for writing if no one holds it or waits for it, and
// returns ErrLocked otherwise, leaving no node behind.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, "lock", rw.writer, false)
}

func (rw *RWMutex) acquire(ctx context.Context, op string, spec *line.Spec, wait bool) (*Lease, error) {
	h, err := line.Acquire(ctx, rw.s, spec, wait)
	if err != nil {
		return nil, fmt.Errorf("zklock: %s %s: %w", op, rw.dir, err)
	}
	return newLease(rw.s, h), nil
}

// Contenders lists the holders, then the waiters in the order they will be
// served. Readers' paths contain "-read-" (or Curator's "__READ__", kazoo's
// "__rlock__"). Holds is the rule a contender of its kind follows: every
// reader with no writer ahead of it holds; a writer holds when first in
// line. Nodes that go away while being read are left out.
func (rw *RWMutex) Contenders(ctx context.Context) ([]Contender, error) {
	return contenders(ctx, rw.s, rw.dir, line.Exclusive, lockRule)
}
