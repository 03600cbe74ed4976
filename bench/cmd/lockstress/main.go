// Command lockstress is a long stress of the zklock recipes, through their
// public API only, beside goroutines that burn CPU. For each recipe (Mutex,
// RWMutex, Semaphore) it runs two scenarios on a fresh, random lock path:
//
//   - 1 session uncontended: one goroutine on one session, acquire then
//     release in a loop (RWMutex: write and read lock alternately);
//   - N sessions contended (-sessions, default 8): one goroutine per session,
//     all on the same path (RWMutex: one acquire in 4 a write lock;
//     Semaphore: -permits permits, default 3).
//
// Each scenario runs until -cycles acquire/release cycles (default 100,000)
// have completed in all. Every Lock/RLock/Acquire and every Unlock gets its
// own context with the -timeout deadline (default 30s), so a hang shows as
// an error, not as a run that never ends. It counts, per scenario:
//
//	cycles       acquires that succeeded and were released
//	lock_err     errors from Lock, RLock or Acquire
//	unlock_err   errors from Unlock (also when its lease had already ended)
//	false_loss   leases that had ended (Err() != nil, Done closed) before
//	             their own Unlock, or that Unlock reports lost (ErrLockLost):
//	             nothing in the run deletes another's node or ends a session
//	             early, so every loss is a false one
//	violations   two writers inside, a writer with readers, more holders than
//	             permits, a Mutex token not above the previous holder's, or
//	             a lease whose state contradicts its Unlock, or a lease that
//	             says lost while its node still exists
//	leftover     nodes still in the lock path once every worker has stopped
//	             (its sessions still open), after a grace of a few seconds
//	max_in       the most holders seen inside at once (1 for a Mutex; up to
//	             the permits for a Semaphore; readers share an RWMutex)
//
// and prints one line per scenario with those counts and the cycles per
// second. At the end it prints the first few errors verbatim and exits with
// status 1 if any count other than cycles is not zero, or a scenario could
// not complete its cycles.
//
//	go run ./cmd/lockstress -zk 127.0.0.1:2181 -cycles 100000 -procs 8 -hogs 2
//	go run ./cmd/lockstress -cycles 2000    # a quick try
//
// It is the "long stress" of issue 7: `make stress` in the repository root.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/bench"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// config is what the flags say.
type config struct {
	servers    []string
	procs      int
	hogs       int
	recipes    []string
	cycles     int64
	sessions   int
	permits    int
	timeout    time.Duration
	maxErrors  int64
	showErrors int
	progress   time.Duration
}

func main() {
	servers := bench.ServersFlag()
	var c config
	flag.IntVar(&c.procs, "procs", 8, "GOMAXPROCS for the run")
	flag.IntVar(&c.hogs, "hogs", 2, "goroutines that burn CPU for the whole run")
	recipes := flag.String("recipes", "mutex,rwmutex,semaphore", "recipes to stress, comma-separated: mutex, rwmutex, semaphore")
	flag.Int64Var(&c.cycles, "cycles", 100000, "acquire/release cycles per scenario, all sessions together")
	flag.IntVar(&c.sessions, "sessions", 8, "sessions (one goroutine each) in the contended scenario")
	flag.IntVar(&c.permits, "permits", 3, "the semaphore's permits")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of each Lock/Acquire and each Unlock")
	flag.Int64Var(&c.maxErrors, "max-errors", 100, "stop a scenario after this many errors and violations")
	flag.IntVar(&c.showErrors, "show-errors", 10, "errors printed verbatim at the end")
	flag.DurationVar(&c.progress, "progress", 10*time.Second, "progress on stderr this often (0: never)")
	flag.Parse()

	c.servers = servers()
	var err error
	c.recipes, err = parseRecipes(*recipes)
	switch {
	case err != nil:
	case c.procs < 1 || c.hogs < 0 || c.cycles < 1 || c.sessions < 1 || c.permits < 1 || c.timeout <= 0 || c.maxErrors < 1:
		err = errors.New("-procs, -cycles, -sessions, -permits, -timeout and -max-errors must be positive, -hogs not negative")
	case flag.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var ok bool
	bench.Main("lockstress", err, func(ctx context.Context) (err error) {
		runtime.GOMAXPROCS(c.procs)
		ok, err = run(ctx, c)
		return err
	})
	if !ok {
		os.Exit(1)
	}
}

var allRecipes = []string{"mutex", "rwmutex", "semaphore"}

func parseRecipes(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if !slices.Contains(allRecipes, f) {
			return nil, fmt.Errorf("-recipes: unknown recipe %q (want %s)", f, strings.Join(allRecipes, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// run stresses every recipe in both scenarios and reports whether all
// counts came out clean. Its error is for trouble outside the recipes
// (no server, the root node).
func run(ctx context.Context, c config) (ok bool, err error) {
	var hogStop atomic.Bool
	var hogs sync.WaitGroup
	for range c.hogs {
		hogs.Go(func() { hog(&hogStop) })
	}
	defer func() {
		hogStop.Store(true)
		hogs.Wait()
	}()

	admin, err := zkrecipes.Connect(ctx, c.servers)
	if err != nil {
		return false, err
	}
	defer admin.Close()
	root, err := bench.CreateRoot(admin.Conn(), "/zkrecipes-stress-")
	if err != nil {
		return false, err
	}
	defer func() {
		if derr := bench.DeleteTree(admin.Conn(), root, 1); derr != nil {
			err = errors.Join(err, derr)
		}
	}()

	fmt.Printf("lockstress: ZooKeeper %s; GOMAXPROCS=%d on %d CPUs, %d CPU hogs; %d cycles per scenario; %d permits; per-operation timeout %v; %s\n",
		strings.Join(c.servers, ","), runtime.GOMAXPROCS(0), runtime.NumCPU(), c.hogs, c.cycles, c.permits, c.timeout, runtime.Version())
	fmt.Printf("%-10s %-24s %8s %8s %8s %10s %10s %10s %8s %6s %10s %9s\n",
		"recipe", "scenario", "cycles", "writes", "lock_err", "unlock_err", "false_loss", "violations", "leftover", "max_in", "cycles/s", "elapsed")

	log := &errorLog{max: c.showErrors}
	ok = true
	for _, recipe := range c.recipes {
		for _, sessions := range []int{1, c.sessions} {
			sc := &scenario{cfg: c, recipe: recipe, sessions: sessions, admin: admin, log: log}
			sc.name = fmt.Sprintf("%d session uncontended", sessions)
			if sessions > 1 {
				sc.name = fmt.Sprintf("%d sessions contended", sessions)
			}
			sc.label = recipe + ", " + sc.name
			sc.path = fmt.Sprintf("%s/%s-%d-%s", root, recipe, sessions, randomHex(4))
			res, err := sc.run(ctx)
			if err != nil {
				return false, fmt.Errorf("%s: %w", sc.label, err)
			}
			fmt.Println(res.line(recipe, sc.name))
			ok = ok && res.clean(c.cycles)
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
		}
	}
	if ok {
		fmt.Println("lockstress: PASS: no errors, no false losses, no violations, no leftover nodes")
		return true, nil
	}
	fmt.Printf("lockstress: FAIL: %d errors and violations in all; the first %d:\n", log.total.Load(), len(log.first))
	for _, e := range log.first {
		fmt.Println("  " + e)
	}
	return false, nil
}

// result is one scenario's counts.
type result struct {
	cycles, writes                  int64
	lockErr, unlockErr, falseLoss   int64
	violations, leftover, maxInside int64
	elapsed                         time.Duration
	incomplete                      bool
	recipeHasWrites                 bool
}

func (r result) line(recipe, name string) string {
	writes := "-"
	if r.recipeHasWrites {
		writes = fmt.Sprint(r.writes)
	}
	s := fmt.Sprintf("%-10s %-24s %8d %8s %8d %10d %10d %10d %8d %6d %10.0f %9s",
		recipe, name, r.cycles, writes, r.lockErr, r.unlockErr, r.falseLoss, r.violations, r.leftover, r.maxInside,
		float64(r.cycles)/r.elapsed.Seconds(), r.elapsed.Round(10*time.Millisecond))
	if r.incomplete {
		s += "  INCOMPLETE"
	}
	return s
}

func (r result) clean(want int64) bool {
	return !r.incomplete && r.cycles >= want && r.lockErr == 0 && r.unlockErr == 0 &&
		r.falseLoss == 0 && r.violations == 0 && r.leftover == 0
}

// errorLog keeps the first errors of the whole run, verbatim.
type errorLog struct {
	mu    sync.Mutex
	max   int
	first []string
	total atomic.Int64
}

func (l *errorLog) add(format string, args ...any) {
	l.total.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.first) < l.max {
		l.first = append(l.first, fmt.Sprintf(format, args...))
	}
}

// scenario is one recipe under one number of sessions.
type scenario struct {
	cfg      config
	recipe   string
	sessions int
	name     string
	label    string
	path     string
	admin    *zkrecipes.Session
	log      *errorLog

	stop    atomic.Bool
	claimed atomic.Int64 // cycles claimed by workers; a failed acquire gives its claim back
	errs    atomic.Int64 // errors and violations, for -max-errors

	cycles, writes                atomic.Int64
	lockErr, unlockErr, falseLoss atomic.Int64
	violations                    atomic.Int64

	// The exclusion check: who is inside, by our own count.
	writers, readers, holders atomic.Int64
	maxInside                 atomic.Int64
	lastToken                 atomic.Int64
}

// acquireFunc is one session's handle on the lock path: write says whether
// an RWMutex is locked for writing (the other recipes ignore it).
type acquireFunc func(ctx context.Context, write bool) (*zklock.Lease, error)

func (sc *scenario) open(s *zkrecipes.Session) (acquireFunc, error) {
	switch sc.recipe {
	case "mutex":
		m, err := zklock.NewMutex(s, sc.path)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, _ bool) (*zklock.Lease, error) { return m.Lock(ctx) }, nil
	case "rwmutex":
		rw, err := zklock.NewRWMutex(s, sc.path)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, write bool) (*zklock.Lease, error) {
			if write {
				return rw.Lock(ctx)
			}
			return rw.RLock(ctx)
		}, nil
	case "semaphore":
		sm, err := zklock.NewSemaphore(s, sc.path, sc.cfg.permits)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, _ bool) (*zklock.Lease, error) { return sm.Acquire(ctx) }, nil
	}
	return nil, fmt.Errorf("unknown recipe %q", sc.recipe)
}

// write says whether cycle k of worker w takes an RWMutex for writing:
// alternately when uncontended, one in 4 when contended.
func (sc *scenario) write(w int, k int64) bool {
	switch sc.recipe {
	case "mutex":
		return true
	case "rwmutex":
		if sc.sessions == 1 {
			return k%2 == 0
		}
		return (k+int64(w))%4 == 0
	}
	return false
}

func (sc *scenario) run(ctx context.Context) (result, error) {
	sessions := make([]*zkrecipes.Session, 0, sc.sessions)
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	acquires := make([]acquireFunc, 0, sc.sessions)
	for range sc.sessions {
		s, err := zkrecipes.Connect(ctx, sc.cfg.servers)
		if err != nil {
			return result{}, err
		}
		sessions = append(sessions, s)
		acq, err := sc.open(s)
		if err != nil {
			return result{}, err
		}
		acquires = append(acquires, acq)
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range sessions {
		wg.Go(func() {
			<-start
			sc.worker(ctx, i, sessions[i], acquires[i])
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	t0 := time.Now()
	close(start)
	var tick <-chan time.Time
	if sc.cfg.progress > 0 {
		t := time.NewTicker(sc.cfg.progress)
		defer t.Stop()
		tick = t.C
	}
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick:
			fmt.Fprintf(os.Stderr, "lockstress: %s: %d/%d cycles, %d errors and violations, %v\n",
				sc.label, sc.cycles.Load(), sc.cfg.cycles, sc.errs.Load(), time.Since(t0).Round(time.Second))
		}
	}
	elapsed := time.Since(t0)

	res := result{
		cycles: sc.cycles.Load(), writes: sc.writes.Load(),
		lockErr: sc.lockErr.Load(), unlockErr: sc.unlockErr.Load(), falseLoss: sc.falseLoss.Load(),
		violations: sc.violations.Load(), maxInside: sc.maxInside.Load(),
		elapsed: elapsed, recipeHasWrites: sc.recipe == "rwmutex",
	}
	res.incomplete = res.cycles < sc.cfg.cycles
	if res.incomplete && ctx.Err() == nil {
		sc.log.add("%s: stopped after %d of %d cycles", sc.label, res.cycles, sc.cfg.cycles)
	}
	// Every worker has stopped, every session is still open: nothing may be
	// left in the lock path. A clean-up the library queued may still be on
	// its way, hence the grace.
	left, err := sc.leftover(ctx, 5*time.Second)
	if err != nil {
		return res, err
	}
	if len(left) > 0 {
		res.leftover = int64(len(left))
		sc.log.add("%s: %d nodes left in %s: %s", sc.label, len(left), sc.path, strings.Join(left, ", "))
	}
	return res, nil
}

// worker is one session's loop: acquire, check, release, until the
// scenario's cycles are claimed or it is stopped.
func (sc *scenario) worker(ctx context.Context, w int, s *zkrecipes.Session, acquire acquireFunc) {
	for k := int64(0); ; k++ {
		if sc.stop.Load() || ctx.Err() != nil {
			return
		}
		if sc.claimed.Add(1) > sc.cfg.cycles {
			return
		}
		write := sc.write(w, k)
		actx, cancel := context.WithTimeout(ctx, sc.cfg.timeout)
		lease, err := acquire(actx, write)
		cancel()
		if err != nil {
			sc.claimed.Add(-1)
			if ctx.Err() != nil {
				return
			}
			sc.lockErr.Add(1)
			sc.fail("%s: session %d: cycle %d: %s: %v", sc.label, w, k, sc.verb(write), err)
			if s.Err() != nil {
				sc.fail("%s: session %d: session over, worker stops: %v", sc.label, w, s.Err())
				return
			}
			continue
		}

		violated := sc.enter(w, k, write, lease)
		ended := lease.Err()
		violated = sc.leave(w, k, write) || violated
		if ended != nil {
			sc.falseLoss.Add(1)
			sc.fail("%s: session %d: cycle %d: lease ended before its Unlock: %v", sc.label, w, k, ended)
		}

		if !sc.unlock(ctx, w, k, s, lease, ended != nil) {
			return
		}
		if violated {
			sc.violations.Add(1)
		}
		if write && sc.recipe == "rwmutex" {
			sc.writes.Add(1)
		}
		sc.cycles.Add(1)
	}
}

// unlock releases lease and reports whether the worker may go on: not if
// the release could not be confirmed (the worker then closes its session,
// so that its node cannot strand the others).
func (sc *scenario) unlock(ctx context.Context, w int, k int64, s *zkrecipes.Session, lease *zklock.Lease, endedBefore bool) bool {
	for try := 1; ; try++ {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sc.cfg.timeout)
		err := lease.Unlock(uctx)
		cancel()
		if err == nil {
			break
		}
		sc.unlockErr.Add(1)
		sc.fail("%s: session %d: cycle %d: unlock (try %d): %v", sc.label, w, k, try, err)
		if errors.Is(err, zklock.ErrLockLost) {
			// Lost, by its own account. Nothing in this run deletes another's
			// node or ends a session early, so every loss is a false one.
			if !endedBefore {
				sc.falseLoss.Add(1)
				if !errors.Is(lease.Err(), zklock.ErrLockLost) {
					sc.violations.Add(1)
					sc.fail("%s: session %d: cycle %d: Unlock says lost, Err says %v", sc.label, w, k, lease.Err())
				}
			}
			// A lease that says lost while its node lives on strands the
			// lock: close the session, so that the others can go on.
			if ok, _, xerr := s.Conn().Exists(lease.Path()); xerr == nil && ok {
				sc.violations.Add(1)
				sc.fail("%s: session %d: cycle %d: lease says lost, but its node %s still exists; closing the session", sc.label, w, k, lease.Path())
				s.Close()
				return false
			}
			return s.Err() == nil
		}
		if try == 3 || s.Err() != nil {
			sc.fail("%s: session %d: release not confirmed, closing the session", sc.label, w)
			s.Close()
			return false
		}
	}
	// Unlock returned nil: the lease must say released, and be done.
	switch err := lease.Err(); {
	case errors.Is(err, zklock.ErrReleased):
	case errors.Is(err, zklock.ErrLockLost):
		if !endedBefore {
			sc.falseLoss.Add(1)
			sc.fail("%s: session %d: cycle %d: Unlock returned nil, then Err says %v", sc.label, w, k, err)
		}
	default:
		sc.violations.Add(1)
		sc.fail("%s: session %d: cycle %d: Unlock returned nil, then Err says %v, want ErrReleased", sc.label, w, k, err)
	}
	select {
	case <-lease.Done():
	default:
		sc.violations.Add(1)
		sc.fail("%s: session %d: cycle %d: Unlock returned nil, but Done is not closed", sc.label, w, k)
	}
	return true
}

func (sc *scenario) verb(write bool) string {
	switch {
	case sc.recipe == "semaphore":
		return "acquire"
	case sc.recipe == "rwmutex" && !write:
		return "rlock"
	}
	return "lock"
}

// fail records an error or violation, and stops the scenario once there
// are too many.
func (sc *scenario) fail(format string, args ...any) {
	sc.log.add(format, args...)
	if sc.errs.Add(1) >= sc.cfg.maxErrors {
		sc.stop.Store(true)
	}
}

// enter counts a holder in and checks exclusion; it reports a violation.
// A writer increments writers then reads readers, a reader the reverse: with
// sequentially consistent atomics, of two that overlap, one sees the other.
func (sc *scenario) enter(w int, k int64, write bool, lease *zklock.Lease) bool {
	switch {
	case sc.recipe == "semaphore":
		h := sc.holders.Add(1)
		sc.noteInside(h)
		if h > int64(sc.cfg.permits) {
			sc.fail("%s: session %d: cycle %d: %d holders inside, %d permits", sc.label, w, k, h, sc.cfg.permits)
			return true
		}
	case write:
		n := sc.writers.Add(1)
		r := sc.readers.Load()
		sc.noteInside(n + r)
		bad := n != 1 || r != 0
		if bad {
			sc.fail("%s: session %d: cycle %d: exclusion violated on entry: %d writers and %d readers inside", sc.label, w, k, n, r)
		}
		if sc.recipe == "mutex" {
			// Successive holders of a Mutex: strictly increasing tokens.
			tok := lease.Token()
			if prev := sc.lastToken.Swap(tok); tok <= prev {
				sc.fail("%s: session %d: cycle %d: token %d not above the previous holder's, %d", sc.label, w, k, tok, prev)
				bad = true
			}
		}
		return bad
	default:
		r := sc.readers.Add(1)
		n := sc.writers.Load()
		sc.noteInside(n + r)
		if n != 0 {
			sc.fail("%s: session %d: cycle %d: exclusion violated on entry: reader with %d writers inside", sc.label, w, k, n)
			return true
		}
	}
	return false
}

// leave checks exclusion again and counts the holder out.
func (sc *scenario) leave(w int, k int64, write bool) bool {
	bad := false
	switch {
	case sc.recipe == "semaphore":
		if h := sc.holders.Load(); h > int64(sc.cfg.permits) {
			sc.fail("%s: session %d: cycle %d: %d holders inside, %d permits", sc.label, w, k, h, sc.cfg.permits)
			bad = true
		}
		sc.holders.Add(-1)
	case write:
		if n, r := sc.writers.Load(), sc.readers.Load(); n != 1 || r != 0 {
			sc.fail("%s: session %d: cycle %d: exclusion violated on exit: %d writers and %d readers inside", sc.label, w, k, n, r)
			bad = true
		}
		sc.writers.Add(-1)
	default:
		if n := sc.writers.Load(); n != 0 {
			sc.fail("%s: session %d: cycle %d: exclusion violated on exit: reader with %d writers inside", sc.label, w, k, n)
			bad = true
		}
		sc.readers.Add(-1)
	}
	return bad
}

func (sc *scenario) noteInside(n int64) {
	for {
		m := sc.maxInside.Load()
		if n <= m || sc.maxInside.CompareAndSwap(m, n) {
			return
		}
	}
}

// leftover lists what is in the lock path, waiting up to grace for it to
// empty. A path that is gone (the server reaps empty containers) is empty.
func (sc *scenario) leftover(ctx context.Context, grace time.Duration) ([]string, error) {
	deadline := time.Now().Add(grace)
	for {
		children, _, err := sc.admin.Conn().Children(sc.path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list %s: %w", sc.path, err)
		case len(children) == 0:
			return nil, nil
		case time.Now().After(deadline) || ctx.Err() != nil:
			slices.Sort(children)
			return children, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hog burns CPU until stop: a tight loop of arithmetic, never yielding of
// its own accord (the runtime preempts it).
func hog(stop *atomic.Bool) {
	x := uint64(88172645463325252)
	for !stop.Load() {
		for range 1 << 14 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	hogSink.Add(x)
}

var hogSink atomic.Uint64

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
