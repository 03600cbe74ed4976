package zklock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// semMarker names a semaphore contender's node: "_zkr_<guid>-sem-<seq>".
const semMarker = "-sem-"

var semName = regexp.MustCompile(`-sem-(-\d{9,10}|\d{10})$`)

// Semaphore is a fair distributed counting semaphore: at most its number of
// permits of leases are held at once. Contenders are served first come,
// first served: those at the first permits places of the line (by sequence
// number) hold a permit, the others wait in order.
//
// The number of permits is stored as the data of the semaphore's directory;
// a contender that asks with a different number is refused with
// ErrPermitsMismatch, so two programs that disagree cannot both believe
// their own limit.
//
// Waiting is herd-free: the first waiter watches every holder, and each later
// waiter watches only the waiter just ahead of it, so a release wakes one
// waiter, and becoming a holder wakes at most one more. Liveness: nodes
// lower than a waiter's can only go away, never appear, so the first waiter
// hears of every permit freed (each holder is watched by it). A waiter behind
// it hears of every change of its predecessor: its deletion, or its becoming
// a holder, which that new holder announces by writing its own node. So the
// first place in the waiting line is always taken by a waiter that watches
// every holder, whatever order the holders leave in.
//
// A Semaphore is safe for concurrent use: many goroutines may share one
// Semaphore and one Session, and each Acquire gets its own Lease. Tokens are
// unique and grow in order of arrival; unlike a Mutex's, the tokens of
// concurrent holders do not order their writes, since several hold at once.
type Semaphore struct {
	s       *zkrecipes.Session
	dir     string
	permits int
	data    []byte
	acl     []zk.ACL
}

// NewSemaphore returns a semaphore with the given number of permits (at
// least 1) on the directory path. It creates nothing until the first
// Acquire: the directory is made then, as a container node that the server
// removes once empty, and holds the number of permits.
func NewSemaphore(s *zkrecipes.Session, path string, permits int, opts ...Option) (*Semaphore, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	if permits < 1 {
		return nil, fmt.Errorf("%w: semaphore %s needs at least 1 permit, got %d", zkrecipes.ErrInvalidArgument, path, permits)
	}
	return &Semaphore{s: s, dir: path, permits: permits, data: o.data, acl: o.acl}, nil
}

// Permits is the number of leases the semaphore allows at once.
func (sm *Semaphore) Permits() int { return sm.permits }

// Acquire waits until this contender holds a permit, ctx ends, or the session
// is over. It fails with an error wrapping ErrPermitsMismatch if the
// semaphore's directory records another number of permits. On every error,
// its node is deleted before Acquire returns (or, if the server cannot be
// reached, as soon as it can be while the session lives).
func (sm *Semaphore) Acquire(ctx context.Context) (*Lease, error) { return sm.acquire(ctx, true) }

// TryAcquire takes a permit if one is free and no one waits for one, and
// returns ErrNoPermit otherwise, leaving no node behind.
func (sm *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	return sm.acquire(ctx, false)
}

// Contenders lists the semaphore's holders, then its waiters in the order
// they will be served: the first Permits() entries hold a permit, or are
// about to. Nodes that go away while being read are left out.
func (sm *Semaphore) Contenders(ctx context.Context) ([]Contender, error) {
	return listContenders(ctx, sm.s, sm.dir, semName)
}

func (sm *Semaphore) acquire(ctx context.Context, wait bool) (*Lease, error) {
	if err := sm.s.Err(); err != nil {
		return nil, fmt.Errorf("zklock: acquire %s: %w", sm.dir, err)
	}
	// No listing with the create: it is taken in the next round trip,
	// together with the read of the permit count, which must come after
	// the create to be about the directory our node is in.
	e, err := enter(ctx, sm.s, sm.dir, semMarker, sm.data, sm.acl, false)
	if err != nil {
		return nil, err
	}
	own := e.watchOwn()
	token, successor, err := sm.await(ctx, e, own, wait)
	if err != nil {
		e.discard()
		return nil, fmt.Errorf("zklock: acquire %s: %w", sm.dir, err)
	}
	l := newLease(sm.s, e.path, token, own)
	if successor {
		// The contender behind us may have listed while we still waited,
		// and be watching us as its predecessor: tell it we hold now, so
		// it takes our place as the first waiter. Writing the same data
		// changes nothing but the version, and fires its watch. setData
		// keeps the lease's watch and Guard in step with that version.
		if err := l.setData(ctx, sm.data); err != nil {
			// Only a wake-up: at worst the waiter behind us is woken by
			// our release instead.
			sm.s.Logger().Warn("zklock: semaphore wake-up not confirmed", "path", e.path, "err", err)
		}
	}
	return l, nil
}

// await is the semaphore recipe. It returns our node's Czxid once our node
// is among the first sm.permits in the directory, and whether a contender
// came after ours in the last listing.
func (sm *Semaphore) await(ctx context.Context, e *entry, own *ownWatch, wait bool) (int64, bool, error) {
	children, err := sm.checkPermits(ctx, e)
	if err != nil {
		return 0, false, err
	}
	// A predecessor whose data version we already relisted for: a second
	// listing showed it still waiting, so someone else wrote it. Waiting
	// on it, instead of listing again, keeps that from becoming a loop.
	var seen struct {
		name    string
		version int32
	}
	for {
		line := contenders(children, semName)
		i := indexOf(line, e.name)
		if i < 0 {
			return 0, false, fmt.Errorf("%w: our node %s vanished while waiting", ErrLockLost, e.path)
		}
		if i < sm.permits {
			token, err := e.token(ctx, own)
			return token, i+1 < len(line), err
		}
		if !wait {
			return 0, false, fmt.Errorf("%w: %d permits held, %d waiting", ErrNoPermit, sm.permits, i-sm.permits)
		}

		var ws []*zkrecipes.Watch
		if i == sm.permits {
			// First waiter: any holder's going frees a permit for us.
			if ws, err = sm.watchAll(ctx, line[:i]); err != nil {
				return 0, false, err
			}
		} else {
			pred := line[i-1]
			w, err := sm.s.WatchNode(ctx, sm.dir+"/"+pred.name)
			if err != nil {
				return 0, false, err
			}
			// A waiter's node is never written, but a new holder writes its
			// own once (see acquire). If that happened before our watch was
			// set, its event went by us: our predecessor holds, and we may
			// be first in line now.
			if w.Exists() && w.Stat.Version != 0 && (seen.name != pred.name || seen.version != w.Stat.Version) {
				seen.name, seen.version = pred.name, w.Stat.Version
				if children, err = e.list(ctx); err != nil {
					return 0, false, err
				}
				continue
			}
			ws = []*zkrecipes.Watch{w}
		}
		if _, _, err := waitAny(ctx, sm.s, own, ws...); err != nil {
			return 0, false, err
		}
		if err := own.fired(ctx); err != nil {
			return 0, false, err
		}
		// A holder left or wrote its node, or our predecessor left or
		// became a holder: our place may have changed.
		if children, err = e.list(ctx); err != nil {
			return 0, false, err
		}
	}
}

// watchAll watches each of the nodes, all requests in one round trip.
func (sm *Semaphore) watchAll(ctx context.Context, cs []contender) ([]*zkrecipes.Watch, error) {
	ws := make([]*zkrecipes.Watch, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { ws[i], errs[i] = sm.s.WatchNode(ctx, sm.dir+"/"+c.name) })
	}
	wg.Wait()
	return ws, errors.Join(errs...)
}

// checkPermits lists the directory and, in the same round trip, checks the
// number of permits it records against ours. Both requests are sent after
// our create was answered, so they see the directory our node is in: a
// container reaped and re-created since our last Acquire, possibly by a
// contender with another number, is checked afresh.
//
// A directory with no number (made by enter after a reap, or by another
// recipe) is claimed with a write conditional on its version: when
// contenders that disagree race for it, one wins and the others see its
// number.
func (sm *Semaphore) checkPermits(ctx context.Context, e *entry) ([]string, error) {
	conn := sm.s.Conn()
	var (
		children   []string
		data       []byte
		st         *zk.Stat
		lerr, gerr error
	)
	err := zkrecipes.Call(ctx, func() error {
		var wg sync.WaitGroup
		wg.Go(func() { children, _, lerr = conn.Children(e.dir) })
		data, st, gerr = conn.Get(e.dir)
		wg.Wait()
		return errors.Join(lerr, gerr)
	})
	if err != nil {
		return nil, fmt.Errorf("zklock: read %s: %w", e.dir, err)
	}
	want := strconv.Itoa(sm.permits)
	for attempt := 0; ; attempt++ {
		if len(data) > 0 {
			n, perr := strconv.Atoi(strings.TrimSpace(string(data)))
			switch {
			case perr != nil:
				return nil, fmt.Errorf("%w: %s holds %q, not a number of permits; this contender asked for %d",
					ErrPermitsMismatch, e.dir, data, sm.permits)
			case n != sm.permits:
				return nil, fmt.Errorf("%w: %s has %d permits, this contender asked for %d",
					ErrPermitsMismatch, e.dir, n, sm.permits)
			}
			return children, nil
		}
		if attempt >= 8 {
			return nil, fmt.Errorf("zklock: could not record the number of permits in %s", e.dir)
		}
		version := st.Version
		err := zkrecipes.Call(ctx, func() error {
			_, err := conn.Set(e.dir, []byte(want), version)
			return err
		})
		switch {
		case err == nil:
			return children, nil
		case errors.Is(err, zk.ErrBadVersion), zkrecipes.IsAmbiguous(err) && ctx.Err() == nil && sm.s.Err() == nil:
			// Someone else wrote it first, or we cannot tell: read it again.
			err = zkrecipes.Call(ctx, func() (err error) {
				data, st, err = conn.Get(e.dir)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("zklock: read %s: %w", e.dir, err)
			}
		default:
			return nil, fmt.Errorf("zklock: record the number of permits in %s: %w", e.dir, err)
		}
	}
}
