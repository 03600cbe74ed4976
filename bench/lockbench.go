// Package bench measures zklock.Mutex against go-zookeeper's zk.Lock, and
// zklock.CachedMutex against the Mutex, on the same ZooKeeper server,
// through the same loop: every session, in its own goroutine and on its own
// connection, acquires the lock, checks that no one else is inside, and
// releases it; the requests the sessions write are counted on the wire. It
// is a module of its own so that the library does not depend on it.
//
// The command cmd/lockbench alternates the two in rounds and prints their
// ratio; the benchmarks in lock_bench_test.go feed benchstat. The package
// also holds what the commands and package queue share: connecting, a
// run's root node, the -zk flag and main's exits, and the tables' formats.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Impl is a lock implementation under test.
type Impl string

const (
	Theirs Impl = "zk.Lock"      // github.com/go-zookeeper/zk
	Ours   Impl = "zklock.Mutex" // github.com/zkrecipes/zkrecipes/zklock
	// Cached is zklock.CachedMutex, its default freshness window; Strict
	// the same with WithFreshness(0): a sync for every Lock.
	Cached Impl = "CachedMutex"
	Strict Impl = "CachedMutex/F=0"
)

// Impls are the implementations lockbench compares, in table order.
var Impls = []Impl{Theirs, Ours, Cached, Strict}

const (
	// sessionTimeout is asked for by the sessions of both implementations.
	sessionTimeout = 10 * time.Second
	// lockTimeout bounds the context each worker creates once and passes to
	// every Lock and Unlock (zk.Lock takes none), like a real caller would.
	lockTimeout = 30 * time.Second
)

// Until says when a round stops: after Cycles cycles in all when Cycles > 0,
// else once Duration has passed (cycles under way then are completed).
type Until struct {
	Duration time.Duration
	Cycles   int64
}

// Result is what one round measured.
type Result struct {
	Cycles   int64
	Elapsed  time.Duration   // from the start signal until every worker stopped
	Acquire  []time.Duration // latency of every Lock call, unsorted
	Requests int64           // the sessions' requests meanwhile, pings left out, counted on the wire
}

// PerCycle is the requests per cycle.
func (r Result) PerCycle() float64 { return float64(r.Requests) / float64(r.Cycles) }

// PerSec is the throughput: lock/unlock cycles per second, all sessions together.
func (r Result) PerSec() float64 { return float64(r.Cycles) / r.Elapsed.Seconds() }

// Bench is one benchmark run: an admin connection, a root path that holds
// every round's lock path, and the last fencing token seen.
type Bench struct {
	servers []string
	admin   *zk.Conn
	root    string
	rounds  int
	// last is the highest fence any holder of ours has seen. Tokens are
	// zxids, increasing across the ensemble, so it spans all rounds.
	last fenceCheck
}

// fenceCheck keeps the highest fence seen; a lower or equal one is an
// error.
type fenceCheck struct {
	mu   sync.Mutex
	last zklock.Fence
}

func (c *fenceCheck) see(f zklock.Fence) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.Compare(c.last) <= 0 {
		return fmt.Errorf("fence %v is not above the last one seen, %v", f, c.last)
	}
	c.last = f
	return nil
}

// New connects to the servers and creates the run's root node.
func New(ctx context.Context, servers []string) (*Bench, error) {
	admin, err := Connect(ctx, servers, sessionTimeout)
	if err != nil {
		return nil, err
	}
	root, err := CreateRoot(admin, "/zkrecipes-bench-")
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &Bench{servers: servers, admin: admin, root: root}, nil
}

// Close deletes everything the run created and closes the admin connection.
func (b *Bench) Close() error {
	defer b.admin.Close()
	return DeleteTree(b.admin, b.root, 1)
}

// Round is one implementation's sessions, connected and ready, contending
// on a fresh lock path.
type Round struct {
	b       *Bench
	impl    Impl
	path    string
	lockers []locker
	wire    zktest.Counter // the sessions' requests
}

// Open connects sessions sessions of impl, each with its own connection.
func (b *Bench) Open(ctx context.Context, impl Impl, sessions int) (*Round, error) {
	b.rounds++
	r := &Round{b: b, impl: impl, path: fmt.Sprintf("%s/r%d-%d", b.root, b.rounds, sessions)}
	for range sessions {
		l, err := b.open(ctx, impl, r.path, r.wire.Dial)
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		r.lockers = append(r.lockers, l)
	}
	return r, nil
}

// Close closes the round's sessions and deletes its lock path.
func (r *Round) Close() error {
	for _, l := range r.lockers {
		l.close()
	}
	return DeleteTree(r.b.admin, r.path, 1)
}

// Run runs the loop in one goroutine per session until u says stop. A
// failed check, or any error, stops every worker and is returned.
func (r *Round) Run(ctx context.Context, u Until) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once     sync.Once
		firstErr error
		stop     atomic.Bool
		claimed  atomic.Int64
		inside   atomic.Int32
		wg       sync.WaitGroup
		start    = make(chan struct{})
		counts   = make([]int64, len(r.lockers))
		lat      = make([][]time.Duration, len(r.lockers))
	)
	// abort stops the round: closing the sessions also wakes zk.Lock, which
	// takes no context.
	abort := func(err error) {
		once.Do(func() {
			firstErr = err
			stop.Store(true)
			cancel()
			for _, l := range r.lockers {
				l.close()
			}
		})
	}
	next := func() bool {
		if u.Cycles > 0 {
			return claimed.Add(1) <= u.Cycles
		}
		return !stop.Load()
	}
	for i, l := range r.lockers {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(ctx, lockTimeout+u.Duration)
			defer cancel()
			for next() {
				t0 := time.Now()
				if err := l.lock(ctx); err != nil {
					abort(fmt.Errorf("%s: session %d: lock: %w", r.impl, i, err))
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
				if n := inside.Add(1); n != 1 {
					abort(fmt.Errorf("%s: session %d: mutual exclusion violated: %d holders inside", r.impl, i, n))
					return
				}
				err := l.check(&r.b.last)
				inside.Add(-1)
				if err != nil {
					abort(fmt.Errorf("%s: session %d: %w", r.impl, i, err))
					return
				}
				if err := l.unlock(ctx); err != nil {
					abort(fmt.Errorf("%s: session %d: unlock: %w", r.impl, i, err))
					return
				}
				counts[i]++
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	t0 := time.Now()
	sent := r.wire.Requests()
	close(start)
	if u.Cycles <= 0 {
		time.AfterFunc(u.Duration, func() { stop.Store(true) })
	}
	watchdog := time.NewTimer(u.Duration + lockTimeout + 10*time.Second)
	defer watchdog.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		abort(fmt.Errorf("%s: %w", r.impl, context.Cause(ctx)))
	case <-watchdog.C:
		abort(fmt.Errorf("%s: round still running after %v", r.impl, time.Since(t0).Round(time.Second)))
	}
	<-done
	res := Result{Elapsed: time.Since(t0), Acquire: slices.Concat(lat...), Requests: r.wire.Requests() - sent}
	for _, n := range counts {
		res.Cycles += n
	}
	return res, firstErr
}

// locker is one session's handle on the lock path, for one implementation.
type locker interface {
	lock(ctx context.Context) error
	check(last *fenceCheck) error // run while holding the lock
	unlock(ctx context.Context) error
	close()
}

// open connects one session of impl, through dial.
func (b *Bench) open(ctx context.Context, impl Impl, path string, dial zk.Dialer) (locker, error) {
	if impl == Theirs {
		c, err := ConnectDial(ctx, b.servers, sessionTimeout, dial)
		if err != nil {
			return nil, err
		}
		return &theirs{c: c, l: zk.NewLock(c, path, zk.WorldACL(zk.PermAll))}, nil
	}
	s, err := zkrecipes.Connect(ctx, b.servers, zkrecipes.WithSessionTimeout(sessionTimeout), zkrecipes.WithDialer(dial))
	if err != nil {
		return nil, err
	}
	o := &ours{s: s}
	switch impl {
	case Ours:
		var m *zklock.Mutex
		if m, err = zklock.NewMutex(s, path); err == nil {
			o.lockFn = m.Lock
		}
	case Cached, Strict:
		var opts []zklock.Option
		if impl == Strict {
			opts = append(opts, zklock.WithFreshness(0))
		}
		var m *zklock.CachedMutex
		if m, err = zklock.NewCachedMutex(s, path, opts...); err == nil {
			o.lockFn, o.release = m.Lock, m.Release
		}
	default:
		err = fmt.Errorf("unknown implementation %q", impl)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return o, nil
}

// ours is a Mutex's or a CachedMutex's session.
type ours struct {
	s       *zkrecipes.Session
	lockFn  func(context.Context) (*zklock.Lease, error)
	release func(context.Context) error // a CachedMutex's: let the kept holding go
	lease   *zklock.Lease
}

func (o *ours) lock(ctx context.Context) (err error) {
	o.lease, err = o.lockFn(ctx)
	return err
}

// check also verifies the fence, strictly increasing over every lease.
func (o *ours) check(last *fenceCheck) error {
	if err := o.lease.Err(); err != nil {
		return fmt.Errorf("lease ended while held: %w", err)
	}
	return last.see(o.lease.Fence())
}

func (o *ours) unlock(ctx context.Context) error { return o.lease.Unlock(ctx) }

func (o *ours) close() {
	if o.release != nil {
		ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
		_ = o.release(ctx)
		cancel()
	}
	o.s.Close()
}

type theirs struct {
	c *zk.Conn
	l *zk.Lock
}

func (t *theirs) lock(context.Context) error   { return t.l.Lock() }
func (t *theirs) check(*fenceCheck) error      { return nil } // zk.Lock has no token
func (t *theirs) unlock(context.Context) error { return t.l.Unlock() }
func (t *theirs) close()                       { t.c.Close() }

// Median of xs (NaN when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}
