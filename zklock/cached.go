package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/owner"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// CachedMutex is a Mutex whose holder keeps its place at the head of the
// line between critical sections while no one else waits, so that the next
// Lock, from any goroutine of this process, is granted without a request to
// ZooKeeper. Any contender that joins the line (this module's, Curator's,
// kazoo's or go-zookeeper's) is the request to let go: an idle holder
// deletes its node at once; a holder inside a critical section does so at
// that section's Unlock. Chubby called this lock caching; no ZooKeeper
// client had it.
//
// What it keeps, as a Mutex does: mutual exclusion with every contender on
// the path, ours and other clients'; each lease's loss is told (Done, Err,
// Context) before anyone else can be granted the lock, whichever server the
// holder is on (a section is granted only while the session's contact with
// the ensemble's leader is proven recent: at least half a session timeout
// before any leader could expire it); every lease's Fence is strictly
// greater than the Fence of every lease granted before it on the path, by
// any client; an Unlock always lets go, whatever its ctx.
//
// What it changes, compared with a Mutex:
//
//   - Token is the holding's: strictly increasing across holders, equal for
//     the critical sections of one kept holding. A resource that must
//     refuse a late request of an earlier section of this process checks
//     Fence, and writes to ZooKeeper go through Lease.Multi (Guard checks
//     the holding, not the section).
//   - A contender that joins waits for the section running when it joins,
//     and for the sections this holder begins within the freshness window
//     after its join (WithFreshness, 25ms by default; a section whose own
//     sync was in flight when it joined counts too), then for one write and
//     one notification. With WithFreshness(0) every Lock sends one sync,
//     and only a section whose sync was in flight when the contender joined
//     can pass it.
//   - An idle kept holding is a holder to everyone who reads the line:
//     another process's TryLock fails, tools list it (Contender.Cached,
//     `zklock holders` says "cached"), and a holder process that stops
//     responding while idle (a long pause, SIGSTOP) delays the next
//     contender up to the session timeout, as one stopped inside a critical
//     section does. WithIdleRelease bounds how long a holding is kept with
//     no section (500ms by default); Release drops it now.
//
// A holding is kept only when it was acquired without waiting and with no
// one behind it; one reached after waiting is released at its Unlock, as a
// Mutex's. After a holding is given up because a contender joined, the
// next holdings are not kept (one, then two, four... up to 32 as it
// happens again; back to one after a holding that was let go for idling),
// so two processes taking turns cost what two Mutexes cost. A reconnect of
// the client (which voids what the holder's watch proves) lets the holding
// go.
//
// A CachedMutex is safe for concurrent use: share one per path and Session
// (two on one path are two contenders, and make each other let go). A Lock
// while another goroutine's section runs waits for it, and is handed the
// holding at its Unlock unless a contender joined meanwhile; then it joins
// the line, behind that contender. It is not reentrant. It shares a path
// with a Mutex, an RWMutex and the other clients' locks as a Mutex does.
type CachedMutex struct {
	s           *session.Session
	dir         string
	spec        *line.Spec
	fresh, idle time.Duration

	// gate lets one goroutine at a time join the line while no holding is
	// kept, so that two of ours do not queue behind each other where one
	// kept holding would serve both.
	gate chan struct{}

	mu   sync.Mutex
	kept *kept // the holding kept now; nil when none
	skip int   // holdings not to keep before keeping one again
	next int   // skip after the next holding given up to a contender
}

// kept is a holding a CachedMutex keeps.
type kept struct {
	o     *owner.Owner // set once started
	path  string
	token int64
	ended bool // it grants no more
}

// The defaults of WithFreshness and WithIdleRelease.
const (
	DefaultFreshness   = 25 * time.Millisecond
	DefaultIdleRelease = 500 * time.Millisecond
)

// maxSkip bounds the back-off: the holdings not kept after repeated
// contention.
const maxSkip = 32

// cachedMarker is the marker of a CachedMutex's node names: a lock's
// ("-lock-" ends it, so every client orders it as one), told apart by
// tools.
const cachedMarker = "-cached-lock-"

// WithFreshness sets how old the latest answered sync may be for a
// CachedMutex to grant a critical section without a request (default
// DefaultFreshness): a contender that joins waits for the sections begun
// within d of its join. 0 makes every Lock send one sync (a round trip, no
// write). While the lock is in use, a sync is sent in the background every
// d/2 so that Lock never waits for one. CachedMutex only.
func WithFreshness(d time.Duration) Option {
	return func(o *options) {
		o.cachedOnly = append(o.cachedOnly, "WithFreshness")
		if d < 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: WithFreshness(%v): negative", zkrecipes.ErrInvalidArgument, d))
			return
		}
		o.fresh = d
	}
}

// WithIdleRelease sets how long a CachedMutex keeps a holding with no
// critical section before it releases it (default DefaultIdleRelease). It
// bounds how long an idle holder process that stops responding can delay
// another contender only in the likely case, not the worst: a pause that
// begins while the holding is kept delays a contender up to the session
// timeout. CachedMutex only.
func WithIdleRelease(d time.Duration) Option {
	return func(o *options) {
		o.cachedOnly = append(o.cachedOnly, "WithIdleRelease")
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: WithIdleRelease(%v): not positive", zkrecipes.ErrInvalidArgument, d))
			return
		}
		o.idle = d
	}
}

// NewCachedMutex returns a cached mutex on the lock directory path. Like
// NewMutex, it creates nothing until the first Lock.
func NewCachedMutex(s *zkrecipes.Session, path string, opts ...Option) (*CachedMutex, error) {
	o, err := newAnyOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &CachedMutex{
		s: o.s, dir: path, fresh: o.fresh, idle: o.idle, gate: make(chan struct{}, 1), next: 1,
		spec: o.lockSpec(line.Exclusive, cachedMarker, exclusive, telemetry.CachedMutex, "zklock.CachedMutex.Lock"),
	}, nil
}

// Lock waits until this process holds the lock and returns the lease of a
// critical section, or returns ctx's cause, or an error wrapping
// ErrLockLost once the session is over. It sends nothing when the holding
// kept from the last section may grant the next one; otherwise it sends
// one sync, or joins the line as Mutex.Lock does.
func (m *CachedMutex) Lock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, true) }

// TryLock takes the lock if it is free, or kept idle by this process, and
// returns ErrLocked otherwise (another critical section of this process
// runs or waits, or another contender holds or waits), leaving no node
// behind.
func (m *CachedMutex) TryLock(ctx context.Context) (*Lease, error) { return m.acquire(ctx, false) }

func (m *CachedMutex) acquire(ctx context.Context, wait bool) (*Lease, error) {
	for {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zklock: lock %s: %w", m.dir, context.Cause(ctx))
		}
		if k := m.current(); k != nil {
			sec, err := k.o.Grant(ctx, wait)
			switch {
			case err == nil:
				return &Lease{o: k.o, sec: sec, path: k.path, token: k.token}, nil
			case errors.Is(err, owner.ErrBusy):
				return nil, fmt.Errorf("zklock: lock %s: %w: a critical section of this process runs or waits", m.dir, ErrLocked)
			case !errors.Is(err, owner.ErrNoGrant):
				return nil, fmt.Errorf("zklock: lock %s: %w", m.dir, err)
			}
			m.forget(k)
		}
		l, again, err := m.join(ctx, wait)
		if !again {
			return l, err
		}
	}
}

// join takes the normal path, a Mutex's, through the gate; again: another
// goroutine kept a holding meanwhile, ask it instead.
func (m *CachedMutex) join(ctx context.Context, wait bool) (l *Lease, again bool, err error) {
	select {
	case m.gate <- struct{}{}:
	case <-ctx.Done():
		return nil, false, fmt.Errorf("zklock: lock %s: %w", m.dir, context.Cause(ctx))
	}
	var once sync.Once
	open := func() { once.Do(func() { <-m.gate }) }
	defer open()
	if m.current() != nil {
		return nil, true, nil
	}
	spec := *m.spec
	spec.Prepare = func(_ context.Context, e *line.Entry) error {
		if !e.Alone() {
			open() // it will not be kept: the next may join behind it now
		}
		return nil
	}
	h, err := line.Acquire(ctx, m.s, &spec, wait)
	if err != nil {
		return nil, false, fmt.Errorf("zklock: lock %s: %w", m.dir, err)
	}
	if h.DirEv == nil && !h.Behind && !h.Waited {
		m.watchAlone(ctx, h)
	}
	return m.hold(h), false, nil
}

// watchAlone sets the directory's child watch for h, a holding that the
// line's last listing showed alone but that has no such watch (the
// listing sent with the create went out ahead of it, or the client
// reconnected): a listing with the watch that shows it alone still lets
// it be kept. One round trip, on the Lock's ctx; on any failure h stays as
// it is, a holding that is not kept.
func (m *CachedMutex) watchAlone(ctx context.Context, h *line.Held) {
	gen := m.s.NextReconnect() // before the listing: its watch holds on that connection
	type listing struct {
		children []string
		ev       <-chan zk.Event
	}
	l, err := znode.Do(ctx, func() (listing, error) {
		children, _, ev, err := m.s.Conn().ChildrenW(m.dir)
		return listing{children, ev}, err
	})
	if err == nil && line.Alone(l.children, line.Exclusive, h.Path[len(m.dir)+1:]) {
		h.DirEv, h.Reconnect = l.ev, gen
	}
}

// hold makes the lease of a holding acquired on the normal path: the first
// section of a kept holding when it may be kept (acquired without waiting,
// with nobody behind it and the directory's watch unfired), else a Mutex's
// lease.
func (m *CachedMutex) hold(h *line.Held) *Lease {
	m.mu.Lock()
	keep := !h.Waited && h.DirEv != nil && !h.Behind && m.kept == nil
	if keep && m.skip > 0 {
		m.skip--
		keep = false
	}
	m.mu.Unlock()
	if !keep {
		return newLease(m.s, h)
	}
	k := &kept{path: h.Path, token: h.Token}
	o, sec := owner.StartCached(leaseConfig(m.s, h), owner.Cache{
		Dir: m.dir, Fresh: m.fresh, Idle: m.idle, Recipe: telemetry.CachedMutex,
		Ended: func(why string) { m.ended(k, why) },
	})
	m.mu.Lock()
	k.o = o
	if !k.ended {
		m.kept = k
	}
	m.mu.Unlock()
	return &Lease{o: o, sec: sec, path: h.Path, token: h.Token}
}

// current is the holding kept now, nil when none.
func (m *CachedMutex) current() *kept {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kept
}

// forget drops k, which grants no more.
func (m *CachedMutex) forget(k *kept) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kept == k {
		m.kept = nil
	}
}

// ended is told, by k's owner, that k grants no more, and why: the back-off
// grows when a contender made it let go, and starts again once a holding
// was let go for idling.
func (m *CachedMutex) ended(k *kept, why string) {
	m.s.Telemetry().HoldingReleased(telemetry.CachedMutex, why)
	m.mu.Lock()
	defer m.mu.Unlock()
	k.ended = true
	if m.kept == k {
		m.kept = nil
	}
	switch why {
	case owner.WhyJoin:
		m.skip = m.next
		m.next = min(2*m.next, maxSkip)
	case owner.WhyIdle:
		m.next = 1
	}
}

// Release lets the kept holding go: when idle, its node is deleted now,
// and Release returns once it is gone; when a critical section runs, at
// that section's Unlock. It returns nil when nothing is kept, and again if
// called again. Once called, the release goes on whatever becomes of ctx,
// which bounds only the wait. Call it before closing a Session that will
// live on, so that no other process waits for an idle holding; closing the
// Session ends it too.
func (m *CachedMutex) Release(ctx context.Context) error {
	k := m.current()
	if k == nil {
		return nil
	}
	if err := k.o.Drop(ctx); err != nil {
		return fmt.Errorf("zklock: release %s: %w", m.dir, err)
	}
	return nil
}

// Contenders lists the lock's holder, then its waiters in the order they
// will be served, as Mutex.Contenders does. A holder kept by a CachedMutex
// has Cached set: it may be idle between critical sections.
func (m *CachedMutex) Contenders(ctx context.Context) ([]Contender, error) {
	return contenders(ctx, m.s, m.dir, line.Exclusive, lockRule)
}
