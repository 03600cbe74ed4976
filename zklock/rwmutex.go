package zklock

import (
	"context"
	"fmt"
	"regexp"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Node names of a read/write lock: ours, Curator's InterProcessReadWriteLock
// ("__READ__", "__WRIT__") and kazoo's ReadLock and WriteLock ("__rlock__",
// "__lock__"). A Mutex's nodes on the same path count as writers.
const (
	readMarker  = "-read-"
	writeMarker = "-write-"
)

var (
	rwName     = regexp.MustCompile(`(-read-|__rlock__|__READ__|-write-|__WRIT__|-lock-|__lock__)(-\d{9,10}|\d{10})$`)
	readerName = regexp.MustCompile(`(-read-|__rlock__|__READ__)(-\d{9,10}|\d{10})$`)
)

func isReader(name string) bool { return readerName.MatchString(name) }

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
// Like Mutex, it is safe for concurrent use, and each acquire gets its own
// Lease with a fencing token.
type RWMutex struct {
	s    *zkrecipes.Session
	dir  string
	data []byte
	acl  []zk.ACL
}

// NewRWMutex returns a read/write lock on the directory path. It creates
// nothing until the first acquire.
func NewRWMutex(s *zkrecipes.Session, path string, opts ...Option) (*RWMutex, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &RWMutex{s: s, dir: path, data: o.data, acl: o.acl}, nil
}

// RLock waits until this contender holds the lock for reading: no writer is
// ahead of it. On every error its node is deleted.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, readMarker, true)
}

// Lock waits until this contender holds the lock for writing: no one is
// ahead of it. On every error its node is deleted.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, writeMarker, true)
}

// TryRLock takes the lock for reading if no writer holds it or waits for it,
// and returns ErrLocked otherwise, leaving no node behind.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, readMarker, false)
}

// TryLock takes the lock for writing if no one holds it or waits for it, and
// returns ErrLocked otherwise, leaving no node behind.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.acquire(ctx, writeMarker, false)
}

// Contenders lists the holders, then the waiters in the order they will be
// served. Readers' paths contain "read" (or Curator's "__READ__", kazoo's
// "__rlock__").
func (rw *RWMutex) Contenders(ctx context.Context) ([]Contender, error) {
	return listContenders(ctx, rw.s, rw.dir, rwName)
}

func (rw *RWMutex) acquire(ctx context.Context, marker string, wait bool) (*Lease, error) {
	op := map[string]string{readMarker: "read-lock", writeMarker: "lock"}[marker]
	if err := rw.s.Err(); err != nil {
		return nil, fmt.Errorf("zklock: %s %s: %w", op, rw.dir, err)
	}
	e, err := enter(ctx, rw.s, rw.dir, marker, rw.data, rw.acl, true)
	if err != nil {
		return nil, err
	}
	own := e.watchOwn()
	token, err := rw.await(ctx, e, own, marker == readMarker, wait)
	if err != nil {
		e.discard()
		return nil, fmt.Errorf("zklock: %s %s: %w", op, rw.dir, err)
	}
	return newLease(rw.s, e.path, token, own), nil
}

// await returns our node's Czxid once no contender ahead of it blocks it:
// for a reader no writer, for a writer no one.
func (rw *RWMutex) await(ctx context.Context, e *entry, own *ownWatch, reader, wait bool) (int64, error) {
	for {
		children, err := e.list(ctx)
		if err != nil {
			return 0, err
		}
		line := contenders(children, rwName)
		i := indexOf(line, e.name)
		if i < 0 {
			return 0, fmt.Errorf("%w: our node %s vanished while waiting", ErrLockLost, e.path)
		}
		// blocker: the contender to wait for; last: whether it is the only
		// one ahead that blocks us.
		blocker, last := -1, true
		for j := i - 1; j >= 0; j-- {
			if reader && isReader(line[j].name) {
				continue
			}
			if blocker < 0 {
				blocker = j
			} else {
				last = false
				break
			}
		}
		if blocker < 0 {
			return e.token(ctx, own)
		}
		if !wait {
			return 0, fmt.Errorf("%w: %s is ahead", ErrLocked, line[blocker].name)
		}
		b := line[blocker]
		w, err := rw.s.WatchNode(ctx, rw.dir+"/"+b.name)
		if err != nil {
			return 0, err
		}
		_, ev, err := waitAny(ctx, rw.s, own, w)
		if err != nil {
			return 0, err
		}
		if err := own.fired(ctx); err != nil {
			return 0, err
		}
		// Contenders ahead of us only ever go away. When the one blocking
		// us goes and it was the only one that could, or it was one of our
		// writers releasing a lock it held (everyone ahead of it was gone),
		// nothing blocks us now. A reader's release says nothing of the
		// readers ahead of it, so a writer lists again.
		switch {
		case ev == zk.EventNodeDeleted && last,
			ev == zk.EventNodeDataChanged && b.ours() && !isReader(b.name):
			return e.token(ctx, own)
		}
	}
}
