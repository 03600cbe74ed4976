package zklock

import (
	"context"
	"fmt"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// Mutex is a fair distributed mutex: ZooKeeper's lock recipe. Contenders
// are served first come, first served; each watches only the contender just
// ahead of it, so a release wakes exactly one waiter.
//
// A Mutex is safe for concurrent use: many goroutines may share one Mutex
// and one Session, and each Lock gets its own Lease. It is not reentrant: a
// goroutine that calls Lock while holding a lease waits for itself.
//
// A Mutex is an RWMutex's writer: the two may share a path, and exclude each
// other as a writer excludes everyone. It can also share a lock path with
// Curator's InterProcessMutex, with kazoo's Lock (given
// extra_lock_patterns=["-lock-"]) or with go-zookeeper's zk.Lock: it orders
// their nodes and ours by sequence number, as they do. Curator and kazoo
// must not share a path with each other, with or without us: Curator does
// not order kazoo's node names, and takes the lock while kazoo holds it. A
// Semaphore's or an Election's contenders on the same path make Lock fail
// with ErrPathInUse.
type Mutex struct {
	s    *session.Session
	dir  string
	spec *line.Spec
}

// NewMutex returns a mutex on the lock directory path. It creates nothing
// until the first Lock: the directory is made then, as a container node that
// the server removes once empty.
func NewMutex(s *zkrecipes.Session, path string, opts ...Option) (*Mutex, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &Mutex{s: o.s, dir: path, spec: o.lockSpec(line.Exclusive, "-lock-", exclusive, telemetry.Mutex, "zklock.Mutex.Lock")}, nil
}

// exclusive is the rule of a Mutex, and of an RWMutex's writer: hold when
// first in line, else wait for the contender just ahead. Its going means we
// hold when it was the only one ahead; its release mark, when it was an
// exclusive holder (everyone ahead of it was gone).
func exclusive(l []line.Node, me int) line.Decision {
	if me == 0 {
		return line.Decision{Hold: true}
	}
	return line.Decision{
		Watch:        []int{me - 1},
		GoneHolds:    me == 1,
		ReleaseHolds: l[me-1].Kind == line.Exclusive,
	}
}

// Lock waits until this contender holds the lock, ctx ends, or the session
// is over (then the error wraps ErrLockLost and the session's error). It
// rides out disconnects the session survives. On every error, its node is
// deleted before Lock returns (or, if the server cannot be reached, as soon
// as it can be while the session lives).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, true) }

// TryLock takes the lock if no one holds it or waits for it, and returns
// ErrLocked otherwise, leaving no node behind.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, false) }

func (m *Mutex) acquire(ctx context.Context, wait bool) (*Lease, error) {
	h, err := line.Acquire(ctx, m.s, m.spec, wait)
	if err != nil {
		return nil, fmt.Errorf("zklock: lock %s: %w", m.dir, err)
	}
	return newLease(m.s, h), nil
}

// Contenders lists the lock's holder, then its waiters in the order they
// will be served (an RWMutex's readers and writers on the same path among
// them, readers that share the lock all holders). Nodes that go away while
// being read are left out. Holds is the rule a contender of its kind
// follows: a writer holds when first in line, a reader when no writer is
// ahead of it.
func (m *Mutex) Contenders(ctx context.Context) ([]Contender, error) {
	return contenders(ctx, m.s, m.dir, line.Exclusive, lockRule)
}
