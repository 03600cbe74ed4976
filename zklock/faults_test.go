package zklock_test

// The fault suite: every request a recipe sends is tested under two
// faults. (1) The connection drops right after the request is written
// (zktest.Dropper, every mode: the request may or may not have been
// applied, or it was and its reply is lost, or it was lost on the way);
// the session survives. (2) The caller's ctx ends before, during or after
// the call (zktest.CtxEnds). After each case: no false loss (a lease that was returned is held
// until released), no stranded lock (another session acquires afterwards),
// no node left behind, no lost leadership.
//
// The table recipeScenarios is the inventory of what each operation sends:
// for each recipe and operation, the requests the current design sends,
// each aimed at by a Dropper fault. A Dropper fault that does not fire
// fails its case: the operation no longer sends that request, and the
// table must be brought up to date (a request it sends and the table
// leaves out is a gap of the same kind).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// holding is what a recipe's acquire returns: a lease, and for an election
// its leadership.
type holding struct {
	*zklock.Lease
	lead *zklock.Leadership
}

func (h holding) release(ctx context.Context) error {
	if h.lead != nil {
		return h.lead.Resign(ctx)
	}
	return h.Unlock(ctx)
}

// recipe is one kind of lock under test: ours is what the faulted session
// does, rival one that excludes it (used to prove nothing is stranded);
// contenders reads the line as the recipe does. try is ours without
// waiting (nil for an Election, which has none), and busy the error it
// returns when it would have to wait.
type recipe struct {
	name        string
	ours, rival opener
	contenders  func(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) ([]zklock.Contender, error)
	try         opener
	busy        error
}

func lockWith(lock func(ctx context.Context) (*zklock.Lease, error)) func(context.Context) (holding, error) {
	return func(ctx context.Context) (holding, error) {
		l, err := lock(ctx)
		return holding{Lease: l}, err
	}
}

// opener makes, on a session and path, one way to take a lock.
type opener = func(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) (holding, error)

type lockFunc = func(context.Context) (*zklock.Lease, error)

// onMutex, onRWMutex and onSemaphore make openers from a recipe's way of
// taking (Lock, TryLock...).
func onMutex(take func(*zklock.Mutex) lockFunc) opener {
	return func(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) (holding, error) {
		m, err := zklock.NewMutex(s, path)
		require.NoError(t, err)
		return lockWith(take(m))
	}
}

func onRWMutex(take func(*zklock.RWMutex) lockFunc) opener {
	return func(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) (holding, error) {
		rw, err := zklock.NewRWMutex(s, path)
		require.NoError(t, err)
		return lockWith(take(rw))
	}
}

func onSemaphore(take func(*zklock.Semaphore) lockFunc) opener {
	return func(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) (holding, error) {
		sm, err := zklock.NewSemaphore(s, path, 1)
		require.NoError(t, err)
		return lockWith(take(sm))
	}
}

var (
	mutexLock  = onMutex(func(m *zklock.Mutex) lockFunc { return m.Lock })
	mutexTry   = onMutex(func(m *zklock.Mutex) lockFunc { return m.TryLock })
	rwRLock    = onRWMutex(func(rw *zklock.RWMutex) lockFunc { return rw.RLock })
	rwLock     = onRWMutex(func(rw *zklock.RWMutex) lockFunc { return rw.Lock })
	rwTryRLock = onRWMutex(func(rw *zklock.RWMutex) lockFunc { return rw.TryRLock })
	rwTryLock  = onRWMutex(func(rw *zklock.RWMutex) lockFunc { return rw.TryLock })
	semAcquire = onSemaphore(func(sm *zklock.Semaphore) lockFunc { return sm.Acquire })
	semTry     = onSemaphore(func(sm *zklock.Semaphore) lockFunc { return sm.TryAcquire })
)

func campaign(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) (holding, error) {
	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	return func(ctx context.Context) (holding, error) {
		l, err := el.Campaign(ctx, []byte(fmt.Sprintf("0x%x", s.ID())))
		if err != nil {
			return holding{}, err
		}
		return holding{Lease: l.Lease, lead: l}, nil
	}
}

func mutexContenders(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) ([]zklock.Contender, error) {
	m, err := zklock.NewMutex(s, path)
	require.NoError(t, err)
	return m.Contenders
}

func rwContenders(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) ([]zklock.Contender, error) {
	rw, err := zklock.NewRWMutex(s, path)
	require.NoError(t, err)
	return rw.Contenders
}

func semContenders(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) ([]zklock.Contender, error) {
	sm, err := zklock.NewSemaphore(s, path, 1)
	require.NoError(t, err)
	return sm.Contenders
}

func electionContenders(t *testing.T, s *zkrecipes.Session, path string) func(context.Context) ([]zklock.Contender, error) {
	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	return el.Contenders
}

var (
	mutexRecipe    = recipe{"Mutex", mutexLock, mutexLock, mutexContenders, mutexTry, zklock.ErrLocked}
	rlockRecipe    = recipe{"RLock", rwRLock, rwLock, rwContenders, rwTryRLock, zklock.ErrLocked}
	wlockRecipe    = recipe{"RWLock", rwLock, rwLock, rwContenders, rwTryLock, zklock.ErrLocked}
	semRecipe      = recipe{"Semaphore", semAcquire, semAcquire, semContenders, semTry, zklock.ErrNoPermit}
	electionRecipe = recipe{"Election", campaign, campaign, electionContenders, nil, nil}
)

// faultEnv is what a fault case works with.
type faultEnv struct {
	d     *zktest.Dropper
	s     *zkrecipes.Session // through d
	other *zkrecipes.Session
	r     recipe
	path  string
	addr  string // the server's, for its four-letter words
}

func (e faultEnv) ours(t *testing.T) func(context.Context) (holding, error) {
	return e.r.ours(t, e.s, e.path)
}

func (e faultEnv) rival(t *testing.T) func(context.Context) (holding, error) {
	return e.r.rival(t, e.other, e.path)
}

func (e faultEnv) try(t *testing.T) func(context.Context) (holding, error) {
	require.NotNil(t, e.r.try, "%s has no try", e.r.name)
	return e.r.try(t, e.s, e.path)
}

// startHolding runs acquire in the background.
func startHolding(ctx context.Context, acquire func(context.Context) (holding, error)) <-chan holdResult {
	ch := make(chan holdResult, 1)
	go func() {
		h, err := acquire(ctx)
		ch <- holdResult{h, err}
	}()
	return ch
}

type holdResult struct {
	h   holding
	err error
}

func awaitHolding(t *testing.T, ch <-chan holdResult, what string) holding {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err, what)
		return r.h
	case <-time.After(liveWait):
		t.Fatalf("%s: not granted within %v", what, liveWait)
		return holding{}
	}
}

// requireHeld fails if the lease has ended, or ends within a moment.
func requireHeld(t *testing.T, h holding, what string) {
	t.Helper()
	select {
	case <-h.Done():
		t.Fatalf("%s: false loss: %v", what, h.Err())
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, h.Err(), what)
}

// releaseAll releases h, again and again while the outcome is unknown; a
// release must never find the lease lost.
func releaseAll(t *testing.T, ctx context.Context, h holding, what string) {
	t.Helper()
	err := h.release(ctx)
	for tries := 0; err != nil && tries < 5; tries++ {
		require.NotErrorIs(t, err, zklock.ErrLockLost, "%s: release", what)
		err = h.release(ctx)
	}
	require.NoError(t, err, "%s: release", what)
	require.ErrorIs(t, h.Err(), zklock.ErrReleased, what)
}

// awaitReleased waits for a release that was asked for, whatever became of
// its ctx, to happen without being asked again.
func awaitReleased(t *testing.T, h holding, what string) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(liveWait):
		t.Fatalf("%s: the release asked for never happened", what)
	}
	require.ErrorIs(t, h.Err(), zklock.ErrReleased, what)
}

// notStranded proves the lock is free: the rival gets it.
func notStranded(t *testing.T, ctx context.Context, e faultEnv, what string) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, liveWait)
	defer cancel()
	h, err := e.rival(t)(rctx)
	require.NoError(t, err, "%s: the lock is stranded (nodes: %v)", what, children(t, e.other, e.path))
	require.NoError(t, h.release(ctx))
}

// opNames names the opcodes in test names.
var opNames = map[int32]string{
	zktest.OpCreate: "create", zktest.OpDelete: "delete", zktest.OpExists: "exists",
	zktest.OpGetData: "getData", zktest.OpSetData: "setData", zktest.OpGetChildren: "getChildren",
	zktest.OpGetChildren2: "getChildren2", zktest.OpCheck: "check", zktest.OpMulti: "multi",
	zktest.OpCreateContainer: "createContainer", zktest.OpSync: "sync",
}

// A scenario is an operation of a recipe, run under a fault. The requests
// it sends depend on the recipe: recipeScenarios lists them.
type scenario struct {
	name string
	run  func(t *testing.T, ctx context.Context, e faultEnv, fault fault)
}

// fault is one fault, around the operation under test: arm sets it up
// just before, and ctx gives the operation's context.
type fault interface {
	arm(e faultEnv)
	ctx(parent context.Context) (context.Context, context.CancelFunc)
	settle(e faultEnv) // gives a fault in the background its chance to hit
	hit(e faultEnv) bool
	returned() // the operation returned: called right after, where it returns at all
	String() string
}

// dropFault is a connection cut at the first request matching op.
type dropFault struct {
	op   int32
	mode zktest.Mode
	base *int
}

func (f dropFault) arm(e faultEnv) {
	*f.base = e.d.Fired()
	e.d.Arm(zktest.Match{Op: f.op, Path: e.path}, f.mode)
}

func (f dropFault) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}

func (f dropFault) settle(e faultEnv) { fired(e.d, *f.base+1, time.Second) }

func (f dropFault) hit(e faultEnv) bool { return e.d.Fired() > *f.base }

func (f dropFault) returned() {}

func (f dropFault) String() string { return fmt.Sprintf("%v on %s", f.mode, opNames[f.op]) }

// ctxFault is the operation's ctx ending after a while (0: ended already).
// Its probe says whether the operation returned before the ctx ended.
type ctxFault struct {
	end   time.Duration
	probe *ctxProbe
}

type ctxProbe struct {
	ctx            context.Context
	seen, returned bool
}

func (f ctxFault) arm(faultEnv) {}

func (f ctxFault) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, f.end)
	if f.end == 0 {
		cancel()
	}
	f.probe.ctx = ctx
	return ctx, cancel
}

func (f ctxFault) returned() {
	if p := f.probe; p.ctx != nil {
		p.seen, p.returned = true, p.ctx.Err() == nil
	}
}

func (f ctxFault) settle(faultEnv) {}

func (f ctxFault) hit(faultEnv) bool { return true }

func (f ctxFault) String() string { return fmt.Sprintf("ctx ending at %v", f.end) }

// isCtxErr reports an error that says the operation's ctx ended.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// acquireCase: our acquire, uncontended, under the fault. It must succeed
// through a blip; with an ending ctx it may give up, leaving nothing
// behind.
func acquireCase(t *testing.T, ctx context.Context, e faultEnv, f fault) {
	takeCase(t, ctx, e, f, e.ours(t), "acquire")
}

// takeCase is acquireCase with acquire, named what: an uncontended try
// takes the lock as an acquire does (never its busy error).
func takeCase(t *testing.T, ctx context.Context, e faultEnv, f fault, acquire func(context.Context) (holding, error), what string) {
	fctx, cancel := f.ctx(ctx)
	defer cancel()
	f.arm(e)
	h, err := acquire(fctx)
	f.returned()
	e.d.Disarm()
	_, byCtx := f.(ctxFault)
	switch {
	case err != nil && byCtx:
		require.True(t, isCtxErr(err), "%s with a %v: %v", what, f, err)
		require.Eventually(t, func() bool { return len(children(t, e.other, e.path)) == 0 }, 10*time.Second, 2*time.Millisecond,
			"an abandoned %s left its node: %v", what, children(t, e.other, e.path))
	default:
		require.NoError(t, err, "%s with a %v", what, f)
		requireHeld(t, h, fmt.Sprintf("%s with a %v", what, f))
		releaseAll(t, ctx, h, f.String())
	}
	notStranded(t, ctx, e, f.String())
	// Still usable by the faulted session.
	h, err = acquire(ctx)
	require.NoError(t, err, "%s after one with a %v", what, f)
	releaseAll(t, ctx, h, what+" again")
	requireHit(t, f.hit(e), what, f)
}

// requireHit fails a case whose fault never fired: the operation did not
// send the request the table says it sends.
func requireHit(t *testing.T, hit bool, what string, f fault) {
	t.Helper()
	if !hit {
		t.Fatalf("the %s sent no request for the %v to hit: the fault did not fire; bring recipeScenarios up to date with the requests it sends", what, f)
	}
}

var lockScenarios = []scenario{
	{
		// The first acquire on a lock path, uncontended: it makes the
		// directory (and a Semaphore records its permits there).
		name: "acquire-first",
		run:  acquireCase,
	},
	{
		// Our acquire, uncontended, on a lock path used before.
		name: "acquire",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			h, err := e.rival(t)(ctx) // the directory exists from now on
			require.NoError(t, err)
			releaseAll(t, ctx, h, "the rival")
			acquireCase(t, ctx, e, f)
		},
	},
	{
		// Our acquire waits behind the rival: the fault hits while it sets
		// up its wait. It must be granted once the rival releases (with an
		// ending ctx, it gives up, leaving nothing behind).
		name: "wait",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			acquire := e.ours(t)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			got := startHolding(fctx, acquire)
			if _, byCtx := f.(ctxFault); byCtx {
				r := <-got
				if r.err == nil {
					r.h.release(ctx)
					t.Fatalf("acquired with a %v while the rival holds", f)
				}
				require.True(t, isCtxErr(r.err), "acquire with a %v: %v", f, r.err)
				require.Eventually(t, func() bool { return len(children(t, e.other, e.path)) == 1 }, liveWait, 2*time.Millisecond,
					"an abandoned acquire left its node: %v", children(t, e.other, e.path))
				releaseAll(t, ctx, holder, "the rival")
				notStranded(t, ctx, e, f.String())
				return
			}
			waitNodes(t, e.other, e.path, 2)
			f.settle(e)
			hit := f.hit(e)
			e.d.Disarm()
			select {
			case r := <-got:
				t.Fatalf("the waiter returned while the rival holds (err: %v)", r.err)
			default:
			}
			releaseAll(t, ctx, holder, "the rival")
			h := awaitHolding(t, got, fmt.Sprintf("the waiter, after a %v", f))
			requireHeld(t, h, fmt.Sprintf("granted after a %v", f))
			releaseAll(t, ctx, h, f.String())
			notStranded(t, ctx, e, f.String())
			requireHit(t, hit, "waiter", f)
		},
	},
	{
		// Our release, with no one waiting: it may report an unknown
		// outcome, never a loss; released again, the lock is free.
		name: "release",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			h, err := e.ours(t)(ctx)
			require.NoError(t, err)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			err = h.release(fctx)
			f.returned()
			e.d.Disarm()
			if err != nil {
				require.NotErrorIs(t, err, zklock.ErrLockLost, "release with a %v", f)
				if err := h.Err(); err != nil {
					require.ErrorIs(t, err, zklock.ErrReleased, "release with a %v", f)
				}
			}
			// Not asked again: the release asked for happens by itself.
			awaitReleased(t, h, f.String())
			notStranded(t, ctx, e, f.String())
			requireHit(t, f.hit(e), "release", f)
		},
	},
	{
		// Our release, with the rival waiting behind: the lock must pass
		// to it.
		name: "handoff",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			h, err := e.ours(t)(ctx)
			require.NoError(t, err)
			got := startHolding(ctx, e.rival(t))
			waitNodes(t, e.other, e.path, 2)
			settling()
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			err = h.release(fctx)
			f.returned()
			e.d.Disarm()
			if err != nil {
				require.NotErrorIs(t, err, zklock.ErrLockLost, "release with a %v", f)
			}
			awaitReleased(t, h, f.String())
			next := awaitHolding(t, got, fmt.Sprintf("the waiter, after a release with a %v", f))
			releaseAll(t, ctx, next, "the waiter")
			requireHit(t, f.hit(e), "release", f)
		},
	},
	{
		// Our Contenders, while the rival holds and another rival waits:
		// through a blip it reads the line, and who holds; with an ending
		// ctx it may give up. Reading changes nothing.
		name: "contenders",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			got := startHolding(ctx, e.rival(t))
			waitNodes(t, e.other, e.path, 2)
			list := e.r.contenders(t, e.s, e.path)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			cs, err := list(fctx)
			f.returned()
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); err != nil {
				require.True(t, byCtx && isCtxErr(err), "Contenders with a %v: %v", f, err)
			} else {
				require.Len(t, cs, 2, "Contenders with a %v", f)
				require.Equal(t, holder.Path(), cs[0].Path, "Contenders with a %v", f)
				require.Equal(t, []bool{true, false}, []bool{cs[0].Holds, cs[1].Holds}, "who holds, read with a %v", f)
			}
			requireHeld(t, holder, fmt.Sprintf("the rival, after a Contenders with a %v", f))
			releaseAll(t, ctx, holder, "the rival")
			next := awaitHolding(t, got, "the waiting rival")
			releaseAll(t, ctx, next, "the waiting rival")
			requireHit(t, f.hit(e), "Contenders", f)
		},
	},
	{
		// A leader proclaims (with a campaigner in line): the leadership
		// must survive, and a Proclaim retried with a live ctx succeed.
		name: "proclaim",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			h, err := e.ours(t)(ctx)
			require.NoError(t, err)
			got := startHolding(ctx, e.rival(t))
			waitNodes(t, e.other, e.path, 2)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			perr := h.lead.Proclaim(fctx, []byte("proclaimed"))
			f.returned()
			require.NotErrorIs(t, perr, zklock.ErrNotLeader, "Proclaim with a %v", f)
			f.settle(e) // the monitor's read comes after the write
			hit := f.hit(e)
			e.d.Disarm()
			requireHeld(t, h, fmt.Sprintf("after a Proclaim with a %v", f))
			el, err := zklock.NewElection(e.other, e.path)
			require.NoError(t, err)
			if _, byCtx := f.(ctxFault); !byCtx {
				// Its ctx lives on: a write cut off is looked at once the
				// client is back, and sent again if it did not land.
				require.NoError(t, perr, "Proclaim with a %v", f)
				ld, err := el.Leader(ctx)
				require.NoError(t, err)
				require.Equal(t, "proclaimed", string(ld.Value), "the value after a Proclaim with a %v", f)
			}
			require.NoError(t, h.lead.Proclaim(ctx, []byte("again")), "Proclaim after one with a %v", f)
			ld, err := el.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, h.Path(), ld.Path)
			require.Equal(t, "again", string(ld.Value))
			requireHeld(t, h, "after a Proclaim")
			select {
			case r := <-got:
				t.Fatalf("the other campaigner returned while we lead (err: %v)", r.err)
			default:
			}
			releaseAll(t, ctx, h, f.String())
			next := awaitHolding(t, got, "the other campaigner")
			releaseAll(t, ctx, next, "the other campaigner")
			requireHit(t, hit, "Proclaim", f)
		},
	},
	{
		// Our try (TryLock, TryRLock, TryAcquire), uncontended, on a lock
		// path used before: it takes the lock as an acquire does, never
		// with its busy error.
		name: "try",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			h, err := e.rival(t)(ctx) // the directory exists from now on
			require.NoError(t, err)
			releaseAll(t, ctx, h, "the rival")
			takeCase(t, ctx, e, f, e.try(t), "try")
		},
	},
	{
		// Our try while the rival holds: it returns the recipe's busy
		// error (or, with an ending ctx, ctx's cause) and leaves no node;
		// the rival's lease is untouched, and once it is released our try
		// takes the lock.
		name: "try-busy",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			try := e.try(t)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			h, err := try(fctx)
			f.returned()
			e.d.Disarm()
			if err == nil {
				releaseAll(t, ctx, h, "a try that took a held lock")
				t.Fatalf("try with a %v took the lock while the rival holds", f)
			}
			if _, byCtx := f.(ctxFault); !byCtx || !isCtxErr(err) {
				require.ErrorIs(t, err, e.r.busy, "try with a %v", f)
			}
			only := []string{holder.Path()[len(e.path)+1:]}
			require.Eventually(t, func() bool { return slices.Equal(children(t, e.other, e.path), only) }, liveWait, 2*time.Millisecond,
				"a refused try left its node: %v", children(t, e.other, e.path))
			requireHeld(t, holder, fmt.Sprintf("the rival, after a try with a %v", f))
			releaseAll(t, ctx, holder, "the rival")
			h, err = try(ctx)
			require.NoError(t, err, "try on a free lock after one with a %v", f)
			requireHeld(t, h, fmt.Sprintf("a try after one with a %v", f))
			releaseAll(t, ctx, h, "the try")
			notStranded(t, ctx, e, f.String())
			requireHit(t, f.hit(e), "try", f)
		},
	},
	{
		// A Semaphore's acquire waits behind the rival, with another rival
		// waiting behind it. Granted, it writes its node (the same data)
		// to wake the one behind, which may be watching it as its
		// predecessor: the fault hits that write. The lease must be held
		// (its owner must not take its own write for a stranger's), and
		// the one behind granted once it is released. (With an ending ctx
		// the acquire gives up while it waits, leaving nothing behind.)
		name: "wait-behind",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			acquire := e.ours(t)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			got := startHolding(fctx, acquire)
			_, byCtx := f.(ctxFault)
			if !byCtx {
				waitNodes(t, e.other, e.path, 2)
			}
			behind := startHolding(ctx, e.rival(t))
			if byCtx {
				r := <-got
				if r.err == nil {
					releaseAll(t, ctx, r.h, "an acquire granted while the rival holds")
					t.Fatalf("acquired with a %v while the rival holds", f)
				}
				require.True(t, isCtxErr(r.err), "acquire with a %v: %v", f, r.err)
				require.Eventually(t, func() bool { return len(children(t, e.other, e.path)) == 2 }, liveWait, 2*time.Millisecond,
					"an abandoned acquire left its node: %v", children(t, e.other, e.path))
				releaseAll(t, ctx, holder, "the rival")
				next := awaitHolding(t, behind, "the rival behind")
				releaseAll(t, ctx, next, "the rival behind")
				notStranded(t, ctx, e, f.String())
				return
			}
			waitNodes(t, e.other, e.path, 3) // in our last listing, once the rival has gone
			releaseAll(t, ctx, holder, "the rival")
			h := awaitHolding(t, got, fmt.Sprintf("the waiter, with a %v", f))
			f.settle(e)
			hit := f.hit(e)
			e.d.Disarm()
			requireHeld(t, h, fmt.Sprintf("granted with a %v", f))
			select {
			case r := <-behind:
				t.Fatalf("the rival behind returned while we hold the only permit (err: %v)", r.err)
			default:
			}
			releaseAll(t, ctx, h, f.String())
			next := awaitHolding(t, behind, fmt.Sprintf("the rival behind, after a %v", f))
			releaseAll(t, ctx, next, "the rival behind")
			notStranded(t, ctx, e, f.String())
			requireHit(t, hit, "wake-up write", f)
		},
	},
	{
		// Our Election.Leader, while the rival leads and another rival
		// campaigns behind it: through a blip it reads who leads; with an
		// ending ctx it may give up. Reading changes nothing, and once no
		// one campaigns it says so (ErrNoLeader).
		name: "leader",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			got := startHolding(ctx, e.rival(t))
			waitNodes(t, e.other, e.path, 2)
			el, err := zklock.NewElection(e.s, e.path)
			require.NoError(t, err)
			want := zklock.Leader{Path: holder.Path(), Value: []byte(fmt.Sprintf("0x%x", e.other.ID())),
				Token: holder.Token(), SessionID: e.other.ID()}
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			ld, err := el.Leader(fctx)
			f.returned()
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); err != nil {
				require.True(t, byCtx && isCtxErr(err), "Leader with a %v: %v", f, err)
			} else {
				require.Equal(t, want, ld, "Leader with a %v", f)
			}
			requireHeld(t, holder, fmt.Sprintf("the leader, after a Leader with a %v", f))
			ld, err = el.Leader(ctx)
			require.NoError(t, err, "Leader after one with a %v", f)
			require.Equal(t, want, ld, "Leader after one with a %v", f)
			releaseAll(t, ctx, holder, "the leader")
			next := awaitHolding(t, got, "the next campaigner")
			releaseAll(t, ctx, next, "the next campaigner")
			_, err = el.Leader(ctx)
			require.ErrorIs(t, err, zklock.ErrNoLeader, "Leader with no one campaigning")
			requireHit(t, f.hit(e), "Leader", f)
		},
	},
	{
		// Our Election.Observe, while the rival leads: through a blip it
		// reports the leader, then the leader's Proclaim, then the
		// election left without a leader (leaving no watch on the past
		// leader's node), and its channel closes when its ctx ends. With an ending ctx the channel closes, having
		// reported nothing but the leader. (goleak checks, at the end of
		// the test, that no Observe goroutine is left.)
		name: "observe",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			holder, err := e.rival(t)(ctx)
			require.NoError(t, err)
			el, err := zklock.NewElection(e.s, e.path)
			require.NoError(t, err)
			want := zklock.Leader{Path: holder.Path(), Value: []byte(fmt.Sprintf("0x%x", e.other.ID())),
				Token: holder.Token(), SessionID: e.other.ID()}
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			ch := el.Observe(fctx)
			hit := true
			if _, byCtx := f.(ctxFault); byCtx {
				for _, ld := range drain(t, ch, f) {
					require.Equal(t, want, ld, "observed with a %v", f)
				}
				requireHeld(t, holder, fmt.Sprintf("the leader, observed with a %v", f))
				// Still usable: a new Observe reports the leader.
				octx, stop := context.WithCancel(ctx)
				again := el.Observe(octx)
				require.Equal(t, want, recv(t, again), "observed after a %v", f)
				stop()
				drain(t, again, f)
				releaseAll(t, ctx, holder, "the leader")
			} else {
				require.Equal(t, want, recv(t, ch), "observed with a %v", f)
				f.settle(e)
				hit = f.hit(e)
				e.d.Disarm()
				require.NoError(t, holder.lead.Proclaim(ctx, []byte("proclaimed")))
				ld := recv(t, ch)
				require.Equal(t, holder.Path(), ld.Path, "observed after a %v", f)
				require.Equal(t, "proclaimed", string(ld.Value), "observed after a %v", f)
				requireHeld(t, holder, fmt.Sprintf("the leader, observed with a %v", f))
				releaseAll(t, ctx, holder, "the leader")
				require.Equal(t, zklock.Leader{}, recv(t, ch), "no leader, observed after a %v", f)
				out, err := zktest.FourLetter(e.addr, "wchp")
				require.NoError(t, err)
				require.NotContains(t, parseWchp(out)[holder.Path()], e.s.ID(),
					"the observer still watches the past leader's node, after a %v", f)
				cancel()
				require.Empty(t, drain(t, ch, f), "observed after the ctx's end")
			}
			notStranded(t, ctx, e, f.String())
			requireHit(t, hit, "Observe", f)
		},
	},
	{
		// Our Election.Run, alone in the election: it campaigns, leads
		// once (lead checks that ZooKeeper has our node lead, and returns
		// an error of its own), and resigns before it returns that error.
		// Through a blip it must lead, exactly once; with an ending ctx it
		// may return ctx's cause without leading. Either way it leaves no
		// node and the election free.
		name: "run",
		run: func(t *testing.T, ctx context.Context, e faultEnv, f fault) {
			el, err := zklock.NewElection(e.s, e.path)
			require.NoError(t, err)
			watcher, err := zklock.NewElection(e.other, e.path)
			require.NoError(t, err)
			errDone := errors.New("lead done")
			led := 0
			lead := func(context.Context) error {
				led++
				ld, err := watcher.Leader(ctx)
				if err != nil {
					return err
				}
				if ld.SessionID != e.s.ID() {
					return fmt.Errorf("lead called while %s (session 0x%x) leads", ld.Path, ld.SessionID)
				}
				return errDone
			}
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			err = el.Run(fctx, []byte("runner"), lead)
			f.returned()
			f.settle(e) // a release cut off goes on after Run's wait
			hit := f.hit(e)
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); byCtx && isCtxErr(err) {
				require.Zero(t, led, "Run with a %v led, then returned %v", f, err)
			} else {
				require.ErrorIs(t, err, errDone, "Run with a %v", f)
				require.Equal(t, 1, led, "Run with a %v", f)
			}
			require.Eventually(t, func() bool { return len(children(t, e.other, e.path)) == 0 }, liveWait, 2*time.Millisecond,
				"Run with a %v left its node: %v", f, children(t, e.other, e.path))
			notStranded(t, ctx, e, f.String())
			led = 0
			require.ErrorIs(t, el.Run(ctx, []byte("runner"), lead), errDone, "Run after one with a %v", f)
			require.Equal(t, 1, led, "Run after one with a %v", f)
			requireHit(t, hit, "Run", f)
		},
	},
}

// drain returns what ch delivers until it is closed, failing if it is not
// closed within liveWait.
func drain(t *testing.T, ch <-chan zklock.Leader, f fault) []zklock.Leader {
	t.Helper()
	var got []zklock.Leader
	deadline := time.After(liveWait)
	for {
		select {
		case ld, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, ld)
		case <-deadline:
			t.Fatalf("the Observe channel was not closed within %v of its ctx's end (%v)", liveWait, f)
		}
	}
}

// use is a scenario run on a recipe, with the requests the operation sends
// there: the Dropper faults aim at each of them.
type use struct {
	scenario string
	ops      []int32
}

// recipeScenarios is the inventory: each recipe, the scenarios run on it,
// and the requests each sends in the current design (internal/line joins
// and waits, internal/owner's one goroutine per lease reads, writes and
// releases). The release paths are one Lease's, so the RWMutex runs only
// its acquires.
//
//   - A Mutex's or an RWMutex's acquire creates its node and lists the line
//     in the same round trip (getChildren2); that listing's child watch
//     stands in for a watch on its node, so an uncontended acquire reads
//     nothing (no getData), and the first one makes the directory first
//     (createContainer). Waiting, it watches the contender ahead with
//     getData.
//   - A Semaphore's acquire creates its node, then lists the line and reads
//     the directory's number of permits (getData) in one round trip; the
//     first one records that number (setData on the directory). Its lease's
//     owner reads its node at once (getData).
//   - An Election's Campaign creates and lists like a Mutex, and reads its
//     own node (getData) to check its owner before it leads. It never
//     writes the directory (no setData).
//   - A release is a delete. A Mutex's, when no one joined or left the line
//     since it listed it, is a plain delete (no multi); otherwise, and
//     always for a Semaphore and an Election (their owners watch the node,
//     not the directory), a multi that writes the release mark (setData)
//     and deletes. A delete fault hits that multi too. "handoff" has a
//     waiter behind, so its release is the multi.
//   - Proclaim is the owner's setData; the owner then reads its node again
//     (getData) when the write's data change fires its watch.
//   - Contenders lists the directory (getChildren2) and reads every node in
//     it (getData); a Semaphore's then reads the directory's number of
//     permits (getData, after the nodes: the fault hits a node's read).
//   - A try (Mutex.TryLock, RWMutex.TryRLock and TryLock,
//     Semaphore.TryAcquire) sends what its recipe's acquire sends up to
//     the first look at the line; refused (busy), it deletes its node (a
//     plain delete) before it returns. A Semaphore's acquire, granted with
//     a contender behind it in its last listing, writes its node (setData,
//     sent by the lease's owner) to wake it: "wait-behind" aims at that
//     write alone, the rest of its wait is "wait"'s.
//   - Election.Leader lists the directory (getChildren2) and reads the
//     lowest node (getData). Observe follows the directory's children
//     (getChildren2, with a watch) until there is a leader, then the
//     leader's node (getData, with a watch; once it has gone, no exists
//     watch for a creation that never comes). Run sends what Campaign sends,
//     then, when lead returns, what Resign sends (the multi: a delete
//     fault hits it).
//   - Nothing else exported in zklock sends a request: the constructors
//     and options send none (the directory is made by the first acquire),
//     nor Permits or a Lease's Token, Path, Done, Context, Err and Guard
//     (Guard's check is sent by its caller, in its own multi), nor KindOf,
//     which reads the names it is given.
var recipeScenarios = []struct {
	r    recipe
	uses []use
}{
	{mutexRecipe, []use{
		{"acquire-first", []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2}},
		{"acquire", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"wait", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"release", []int32{zktest.OpDelete}},
		{"handoff", []int32{zktest.OpDelete, zktest.OpSetData}},
		{"contenders", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"try", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"try-busy", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpDelete}},
	}},
	{rlockRecipe, []use{
		{"acquire-first", []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2}},
		{"acquire", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"wait", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"contenders", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"try", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"try-busy", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpDelete}},
	}},
	{wlockRecipe, []use{
		{"acquire-first", []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2}},
		{"acquire", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"wait", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"try", []int32{zktest.OpCreate, zktest.OpGetChildren2}},
		{"try-busy", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpDelete}},
	}},
	{semRecipe, []use{
		{"acquire-first", []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpSetData}},
		{"acquire", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"wait", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"release", []int32{zktest.OpDelete, zktest.OpMulti}},
		{"handoff", []int32{zktest.OpDelete, zktest.OpSetData}},
		{"contenders", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"try", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"try-busy", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpDelete}},
		{"wait-behind", []int32{zktest.OpSetData}},
	}},
	{electionRecipe, []use{
		{"acquire-first", []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"acquire", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"wait", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData}},
		{"release", []int32{zktest.OpDelete, zktest.OpMulti}},
		{"handoff", []int32{zktest.OpDelete, zktest.OpSetData}},
		{"proclaim", []int32{zktest.OpSetData, zktest.OpGetData}},
		{"contenders", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"leader", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"observe", []int32{zktest.OpGetChildren2, zktest.OpGetData}},
		{"run", []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpDelete}},
	}},
}

func runFaults(t *testing.T, faults func(u use) []fault) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, rs := range recipeScenarios {
		for _, u := range rs.uses {
			i := slices.IndexFunc(lockScenarios, func(sc scenario) bool { return sc.name == u.scenario })
			require.GreaterOrEqual(t, i, 0, "no scenario %q", u.scenario)
			sc := lockScenarios[i]
			fs := faults(u)
			for _, f := range fs {
				t.Run(fmt.Sprintf("%s/%s/%v", rs.r.name, sc.name, f), func(t *testing.T) {
					t.Cleanup(func() { d.Disarm() })
					require.NoError(t, s.Err(), "the faulted session is over")
					e := faultEnv{d: d, s: s, other: other, r: rs.r, path: lockPath(t, other), addr: srv.Addrs()[0]}
					sc.run(t, bg(t), e, f)
				})
			}
			requireCtxBothWays(t, rs.r.name+"/"+sc.name, fs)
		}
	}
}

// requireCtxBothWays checks that the ctx faults among fs, those that ran,
// ended the operation's ctx both before it returned and after.
func requireCtxBothWays(t *testing.T, what string, fs []fault) {
	t.Helper()
	var ended, returned []time.Duration
	for _, f := range fs {
		if cf, ok := f.(ctxFault); ok && cf.probe.seen {
			if cf.probe.returned {
				returned = append(returned, cf.end)
			} else {
				ended = append(ended, cf.end)
			}
		}
	}
	zktest.RequireCtxBothWays(t, what, ended, returned, false)
}

// dropFaults are the connection drops right after each of ops, in every
// mode.
func dropFaults(ops []int32) []fault {
	var fs []fault
	for _, op := range ops {
		for _, mode := range []zktest.Mode{zktest.AfterWrite, zktest.LoseReply, zktest.BeforeWrite} {
			fs = append(fs, dropFault{op: op, mode: mode, base: new(int)})
		}
	}
	return fs
}

// ctxFaults are the operation's ctx ending at each of zktest.CtxEnds.
func ctxFaults() []fault {
	var fs []fault
	for _, end := range zktest.CtxEnds() {
		fs = append(fs, ctxFault{end: end, probe: &ctxProbe{}})
	}
	return fs
}

// Fault (1): the connection drops right after each kind of request the
// recipes send.
func TestFaultDropZklock(t *testing.T) {
	runFaults(t, func(u use) []fault { return dropFaults(u.ops) })
}

// Fault (2): the caller's ctx ends before, during or after each operation;
// each operation's ctx faults are checked to have ended its ctx both
// before it returned and after (but for one that waits on another
// holder, or runs until ctx ends).
func TestFaultCtxZklock(t *testing.T) {
	runFaults(t, func(use) []fault { return ctxFaults() })
}

// Both faults at once, on a release: its ctx ends (here before the call)
// while its connection is cut and the client is kept from reconnecting.
// While it is in flight, the release of the other kind is refused at once
// with ErrSettled ("or is releasing it"), and the node is still there; once
// the client is back, the release asked for happens by itself, never asked
// again ("released in the background, across disconnects too").
func TestFaultReleaseInFlight(t *testing.T) {
	srv := setup(t)
	ctx := bg(t)
	d := &zktest.Dropper{}
	// Long enough for the session to outlive the outage below.
	s := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(30*time.Second))
	other := connect(t, srv.Addrs())
	path := lockPath(t, other)
	el, err := zklock.NewElection(s, path)
	require.NoError(t, err)
	l, err := el.Campaign(ctx, nil)
	require.NoError(t, err)

	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpDelete, Path: path}, zktest.BeforeWrite)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, l.Unlock(ended), context.Canceled, "Unlock with an ended ctx returns at once")
	require.True(t, fired(d, 1, liveWait), "the release was sent, and cut off")
	require.Len(t, children(t, other, path), 1, "the release cut off did not land")

	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	require.ErrorIs(t, l.Resign(rctx), zklock.ErrSettled, "Resign while the Unlock is in flight")

	d.Resume()
	select {
	case <-l.Done():
	case <-time.After(liveWait):
		t.Fatalf("the Unlock asked for never happened (nodes: %v)", children(t, other, path))
	}
	require.ErrorIs(t, l.Err(), zklock.ErrReleased)
	require.Empty(t, children(t, other, path))
	require.NoError(t, l.Unlock(ctx), "Unlock after Unlock")
	require.ErrorIs(t, l.Resign(ctx), zklock.ErrSettled, "Resign after Unlock")
	require.NoError(t, s.Err(), "the session lived through the outage")
}
