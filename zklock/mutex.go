package zklock

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Mutex is a fair distributed mutex: ZooKeeper's lock recipe. Contenders
// are served first come, first served; each watches only the contender just
// ahead of it, so a release wakes exactly one waiter.
//
// A Mutex is safe for concurrent use: many goroutines may share one Mutex
// and one Session, and each Lock gets its own Lease. It is not reentrant: a
// goroutine that calls Lock while holding a lease waits for itself.
//
// Do not write to contenders' nodes: a change to the data of one of our
// nodes tells the contender behind it that it was released.
//
// It can share a lock path with Curator's InterProcessMutex, with kazoo's
// Lock (given extra_lock_patterns=["-lock-"]) or with go-zookeeper's zk.Lock:
// it orders their nodes and ours by sequence number, as they do. Curator and
// kazoo must not share a path with each other, with or without us: Curator
// does not order kazoo's node names, and takes the lock while kazoo holds it.
type Mutex struct {
	s    *zkrecipes.Session
	dir  string
	data []byte
	acl  []zk.ACL
}

// NewMutex returns a mutex on the lock directory path. It creates nothing
// until the first Lock: the directory is made then, as a container node that
// the server removes once empty.
func NewMutex(s *zkrecipes.Session, path string, opts ...Option) (*Mutex, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &Mutex{s: s, dir: path, data: o.data, acl: o.acl}, nil
}

// Lock waits until this contender holds the lock, ctx ends, or the session
// is over. On every error, its node is deleted before Lock returns (or, if
// the server cannot be reached, as soon as it can be while the session
// lives).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, true) }

// TryLock takes the lock if no one holds it or waits for it, and returns
// ErrLocked otherwise, leaving no node behind.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, false) }

func (m *Mutex) acquire(ctx context.Context, wait bool) (*Lease, error) {
	if err := m.s.Err(); err != nil {
		return nil, fmt.Errorf("zklock: lock %s: %w", m.dir, err)
	}
	e, err := enter(ctx, m.s, m.dir, lockMarker, m.data, m.acl, true)
	if err != nil {
		return nil, err
	}
	own := e.watchOwn()
	token, err := m.await(ctx, e, own, wait)
	if err != nil {
		e.discard()
		return nil, fmt.Errorf("zklock: lock %s: %w", m.dir, err)
	}
	return newLease(m.s, e.path, token, own), nil
}

// await is the lock recipe. It returns our node's Czxid once our node is the
// lowest in the directory.
func (m *Mutex) await(ctx context.Context, e *entry, own *ownWatch, wait bool) (int64, error) {
	for {
		children, err := e.list(ctx)
		if err != nil {
			return 0, err
		}
		line := contenders(children, lockName)
		i := indexOf(line, e.name)
		if i < 0 {
			return 0, fmt.Errorf("%w: our node %s vanished while waiting", ErrLockLost, e.path)
		}
		if i == 0 {
			return e.token(ctx, own)
		}
		if !wait {
			return 0, fmt.Errorf("%w: held by %s", ErrLocked, line[0].name)
		}

		// Wait for the contender just ahead of us, and for nothing else.
		pred := line[i-1]
		w, err := m.s.WatchNode(ctx, m.dir+"/"+pred.name)
		if err != nil {
			return 0, err
		}
		_, ev, err := waitAny(ctx, m.s, own, w)
		if err != nil {
			return 0, err
		}
		if err := own.fired(ctx); err != nil {
			return 0, err
		}
		// Nodes lower than ours can only go away, never appear: sequence
		// numbers grow. So when the one ahead of us goes and it had held the
		// lock, or it was the only one ahead of us, no one is ahead now.
		switch {
		case ev == zk.EventNodeDeleted && i == 1,
			ev == zk.EventNodeDataChanged && pred.ours():
			return e.token(ctx, own)
		}
		// Someone further ahead gave up, or a foreign node changed: list again.
	}
}

// Contender is one node in a lock's line.
type Contender struct {
	Path      string
	Data      []byte
	SessionID int64 // the node's ephemeralOwner
	Token     int64 // the node's Czxid
}

// Contenders lists the lock's holder, then its waiters in the order they
// will be served. Nodes that go away while being read are left out.
func (m *Mutex) Contenders(ctx context.Context) ([]Contender, error) {
	return listContenders(ctx, m.s, m.dir, lockName)
}

func listContenders(ctx context.Context, s *zkrecipes.Session, dir string, re *regexp.Regexp) ([]Contender, error) {
	var children []string
	err := zkrecipes.Call(ctx, func() (err error) {
		children, _, err = s.Conn().Children(dir)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: list %s: %w", dir, err)
	}
	var out []Contender
	for _, c := range contenders(children, re) {
		p := dir + "/" + c.name
		var data []byte
		var st *zk.Stat
		err := zkrecipes.Call(ctx, func() (err error) {
			data, st, err = s.Conn().Get(p)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("zklock: read %s: %w", p, err)
		}
		out = append(out, Contender{Path: p, Data: data, SessionID: st.EphemeralOwner, Token: st.Czxid})
	}
	return out, nil
}
