package zklock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

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
// every holder, whatever order the holders leave in. (The naive rule, watch
// the node permits places ahead, is not live: a holder leaving from the
// middle of the holders wakes no one.)
//
// A Semaphore is safe for concurrent use: many goroutines may share one
// Semaphore and one Session, and each Acquire gets its own Lease. Tokens are
// unique and grow in order of arrival; unlike a Mutex's, the tokens of
// concurrent holders do not order their writes, since several hold at once.
type Semaphore struct {
	s       *session.Session
	dir     string
	permits int
	data    []byte
	spec    *line.Spec
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
		return nil, fmt.Errorf("zklock: %w: semaphore %s needs at least 1 permit, got %d", zkrecipes.ErrInvalidArgument, path, permits)
	}
	sm := &Semaphore{s: o.s, dir: path, permits: permits, data: o.data}
	// No listing with the create: it is taken in the next round trip, with
	// the read of the number of permits, which must come after the create
	// to be about the directory our node is in.
	sm.spec = &line.Spec{
		Dir: path, Kind: line.Permit, Marker: "-sem-", Data: o.data, ACL: o.acl, Rule: permitRule(permits),
		Busy: ErrNoPermit, Lost: ErrLockLost, Mixed: ErrPathInUse,
		Prepare: sm.prepare,
		Recipe:  telemetry.Semaphore, Span: "zklock.Semaphore.Acquire", Names: errorName,
	}
	return sm, nil
}

// permitRule is the semaphore's rule: the first n hold; the first waiter
// watches every holder, a later one its predecessor, whose writing its node
// says it became a holder. Every change means listing again: a new holder
// must learn from a fresh listing whether anyone behind it needs telling.
func permitRule(n int) line.Rule {
	return func(l []line.Node, me int) line.Decision {
		switch {
		case me < n:
			return line.Decision{Hold: true}
		case me == n:
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			return line.Decision{Watch: all}
		default:
			return line.Decision{Watch: []int{me - 1}, Written: true}
		}
	}
}

// Permits is the number of leases the semaphore allows at once.
func (sm *Semaphore) Permits() int { return sm.permits }

// Acquire waits until this contender holds a permit, ctx ends, or the session
// is over. It fails with an error wrapping ErrPermitsMismatch if the
// semaphore's directory records another number of permits. Errors as for
// Mutex.Lock otherwise.
func (sm *Semaphore) Acquire(ctx context.Context) (*Lease, error) { return sm.acquire(ctx, true) }

// TryAcquire takes a permit if one is free and no one waits for one, and
// returns ErrNoPermit otherwise, leaving no node behind.
func (sm *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	return sm.acquire(ctx, false)
}

// Contenders lists the semaphore's holders, then its waiters in the order
// they will be served. Holds is the semaphore's rule: the first n hold a
// permit (or are about to learn they do), n being the number of permits
// recorded in the semaphore's directory, the one its contenders agreed on,
// or Permits() when none is recorded. Nodes that go away while being read
// are left out.
func (sm *Semaphore) Contenders(ctx context.Context) ([]Contender, error) {
	cs, l, err := readLine(ctx, sm.s, sm.dir, line.Permit)
	if err != nil || len(cs) == 0 {
		return cs, err
	}
	// Read after the listing, so that it is the number of the directory
	// those contenders are in, checked by each before it holds.
	permits := sm.permits
	dir, err := znode.Get(ctx, sm.s, sm.dir)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		// Reaped since: everyone listed has gone. Judge them anyway.
	case err != nil:
		return nil, fmt.Errorf("zklock: read %s: %w", sm.dir, err)
	default:
		if n, err := strconv.Atoi(strings.TrimSpace(string(dir.Data))); err == nil && n >= 1 {
			permits = n
		}
	}
	judge(cs, l, func(line.Node) line.Rule { return permitRule(permits) })
	return cs, nil
}

func (sm *Semaphore) acquire(ctx context.Context, wait bool) (*Lease, error) {
	h, err := line.Acquire(ctx, sm.s, sm.spec, wait)
	if err != nil {
		return nil, fmt.Errorf("zklock: acquire %s: %w", sm.dir, err)
	}
	l := newLease(sm.s, h)
	if h.Behind {
		// The contender behind us may have listed while we still waited,
		// and be watching us as its predecessor: tell it we hold now, so
		// it takes our place as the first waiter. Writing the same data
		// changes nothing but the version, and fires its watch. The lease's
		// owner sends it, so it takes the change for its own.
		if err := l.o.Write(ctx, sm.data); err != nil {
			// Only a wake-up: at worst the waiter behind us is woken by
			// our release instead.
			sm.s.Log().Warn("zklock: semaphore wake-up not confirmed", "path", h.Path, "err", err)
		}
	}
	return l, nil
}

// prepare checks the number of permits and gives the wait its first
// listing, both read in one round trip after our create.
func (sm *Semaphore) prepare(ctx context.Context, e *line.Entry) error {
	children, err := sm.checkPermits(ctx)
	if err != nil {
		return err
	}
	e.UseListing(children)
	return nil
}

// checkPermits lists the directory and, in the same round trip, checks the
// number of permits it records against ours. Both requests are sent after
// our create was answered, so they see the directory our node is in: a
// container reaped and re-created since our last Acquire, possibly by a
// contender with another number, is checked afresh.
//
// A directory with no number (made by the engine after a reap, or by
// another recipe) is claimed with a write conditional on its version: when
// contenders that disagree race for it, one wins and the others see its
// number.
func (sm *Semaphore) checkPermits(ctx context.Context) ([]string, error) {
	var (
		children   []string
		dir        znode.Node
		lerr, gerr error
	)
	var wg sync.WaitGroup
	wg.Go(func() { children, lerr = znode.Children(ctx, sm.s, sm.dir) })
	dir, gerr = znode.Get(ctx, sm.s, sm.dir)
	wg.Wait()
	if err := errors.Join(lerr, gerr); err != nil {
		return nil, fmt.Errorf("read %s: %w", sm.dir, err)
	}
	want := strconv.Itoa(sm.permits)
	for attempt := 0; ; attempt++ {
		if len(dir.Data) > 0 {
			n, perr := strconv.Atoi(strings.TrimSpace(string(dir.Data)))
			switch {
			case perr != nil:
				return nil, fmt.Errorf("%w: %s holds %q, not a number of permits; this contender asked for %d",
					ErrPermitsMismatch, sm.dir, dir.Data, sm.permits)
			case n != sm.permits:
				return nil, fmt.Errorf("%w: %s has %d permits, this contender asked for %d",
					ErrPermitsMismatch, sm.dir, n, sm.permits)
			}
			return children, nil
		}
		if attempt >= 8 {
			return nil, fmt.Errorf("could not record the number of permits in %s", sm.dir)
		}
		// Safe to repeat: conditional on the version we read.
		_, err := znode.Retry(ctx, sm.s, func() (*zk.Stat, error) {
			return sm.s.Conn().Set(sm.dir, []byte(want), dir.Stat.Version)
		})
		switch {
		case err == nil:
			return children, nil
		case errors.Is(err, zk.ErrBadVersion):
			// Someone else wrote it first, or our own earlier try whose
			// answer was lost did: read it again.
			if dir, err = znode.Get(ctx, sm.s, sm.dir); err != nil {
				return nil, fmt.Errorf("read %s: %w", sm.dir, err)
			}
		default:
			return nil, fmt.Errorf("record the number of permits in %s: %w", sm.dir, err)
		}
	}
}
