package zklock_test

// The fault suite of the CachedMutex and of Lease.Multi: each request they
// send on their own (a Lock's sync, the releases of a kept holding, a
// Multi) under a connection cut right after it is written (every Dropper
// mode), and each operation under its caller's ctx ending before, during
// and after it. After each case: no false loss, the lock not stranded (a
// Mutex of another session takes it), the CachedMutex usable, no node left.
// Joining the line and waiting in it are the engine's, covered by the
// Mutex's suite (faults_test.go).

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// cachedScenario is an operation on a CachedMutex m, on e's faulted
// session, under fault f.
type cachedScenario struct {
	name string
	ops  []int32 // the requests it sends, each aimed at by the drop faults
	// holder: the request is the holder's own, asked by no caller: no ctx
	// faults.
	holder bool
	run    func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault)
}

var cachedScenarios = []cachedScenario{
	{
		// A Lock of an idle holding whose latest sync is older than the
		// window: it sends one sync. Cut, the holding is let go (the
		// reconnect voids its watch) and the Lock joins the line.
		name: "lock-sync", ops: []int32{zktest.OpSync},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			time.Sleep(2 * zklock.DefaultFreshness)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			l, err := m.Lock(fctx)
			f.returned()
			f.settle(e)
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); err != nil {
				require.True(t, byCtx && isCtxErr(err), "Lock with a %v: %v", f, err)
			} else {
				requireHeld(t, holding{Lease: l}, fmt.Sprintf("Lock with a %v", f))
				require.NoError(t, l.Unlock(ctx))
			}
		},
	},
	{
		// A Lock whose create goes out after the listing sent with it
		// (forced: the create held back until that listing is sent): it
		// holds from a listing of its own, with no child watch, and lists
		// again with one, to be kept (watchAlone). That listing is the
		// request aimed at; cut, or with its ctx ended, the lease is a
		// Mutex's, held all the same.
		name: "lock-relist", ops: []int32{zktest.OpGetChildren2},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			cycle(t, ctx, m) // the directory
			require.NoError(t, m.Release(ctx))
			base := e.d.Fired()
			e.d.Hold(zktest.Match{Op: zktest.OpCreate, Path: e.path}, zktest.Match{Op: zktest.OpGetChildren2, Path: e.path, Watch: true})
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			got := start(fctx, m.Lock)
			if _, byCtx := f.(ctxFault); !byCtx {
				require.Eventually(t, func() bool { return e.d.Fired() > base }, liveWait, 50*time.Microsecond, "the create was held back behind the listing")
				f.arm(e) // the next listing with a watch: watchAlone's
			}
			r := <-got
			f.returned()
			f.settle(e)
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); r.err != nil {
				require.True(t, byCtx && isCtxErr(r.err), "Lock with a %v: %v", f, r.err)
				return
			}
			requireHeld(t, holding{Lease: r.l}, fmt.Sprintf("Lock with a %v", f))
			require.NoError(t, r.l.Unlock(ctx))
		},
	},
	{
		// A Lock waiting in process behind another goroutine's section.
		// Sends nothing; only its ctx faults.
		name: "lock-local",
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			first, err := m.Lock(ctx)
			require.NoError(t, err)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			got := start(fctx, m.Lock)
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, first.Unlock(ctx))
			r := <-got
			f.returned()
			if r.err != nil {
				require.True(t, isCtxErr(r.err), "Lock with a %v: %v", f, r.err)
			} else {
				requireHeld(t, holding{Lease: r.l}, fmt.Sprintf("Lock with a %v", f))
				require.Equal(t, first.Fence().Section+1, r.l.Fence().Section, "handed the holding")
				require.NoError(t, r.l.Unlock(ctx))
			}
		},
	},
	{
		// Release of an idle holding no one joined: a plain delete. It goes
		// on whatever becomes of its ctx.
		name: "release", ops: []int32{zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			err := m.Release(fctx)
			f.returned()
			f.settle(e)
			e.d.Disarm()
			if _, byCtx := f.(ctxFault); err != nil {
				require.True(t, byCtx && isCtxErr(err), "Release with a %v: %v", f, err)
			}
			require.Eventually(t, func() bool { return len(children(t, e.other, e.path)) == 0 }, liveWait, 2*time.Millisecond,
				"Release with a %v left the node", f)
		},
	},
	{
		// A contender joins an idle holding: the holder's release, the
		// mark and the delete in one multi.
		name: "revoke", ops: []int32{zktest.OpMulti}, holder: true,
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			f.arm(e)
			l, err := e.rival(t)(ctx)
			require.NoError(t, err, "the contender, with a %v on the holder's release", f)
			f.settle(e)
			e.d.Disarm()
			releaseAll(t, ctx, l, "the contender")
		},
	},
	{
		// The Unlock of a section with a contender waiting: the multi.
		name: "unlock-contended", ops: []int32{zktest.OpMulti},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			got := startHolding(ctx, e.rival(t))
			waitNodes(t, e.other, e.path, 2)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			f.arm(e)
			err = l.Unlock(fctx)
			f.returned()
			if err != nil {
				require.NotErrorIs(t, err, zklock.ErrLockLost, "Unlock with a %v", f)
			}
			awaitReleased(t, holding{Lease: l}, f.String())
			next := awaitHolding(t, got, fmt.Sprintf("the contender, after an Unlock with a %v", f))
			f.settle(e)
			e.d.Disarm()
			releaseAll(t, ctx, next, "the contender")
		},
	},
	{
		// The Unlock of a section with no one waiting: kept, nothing sent.
		name: "unlock-kept",
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			fctx, cancel := f.ctx(ctx)
			defer cancel()
			err = l.Unlock(fctx)
			f.returned()
			if err != nil {
				require.True(t, isCtxErr(err), "Unlock with a %v: %v", f, err)
			}
			awaitReleased(t, holding{Lease: l}, f.String())
			require.Len(t, children(t, e.other, e.path), 1, "kept")
			require.Equal(t, l.Fence().Section+1, cycle(t, ctx, m).Section, "granted from the kept holding")
		},
	},
	{
		// Multi inside a section: sent by the holding's owner behind the
		// Guard. Cut, its outcome is unknown; the lease is held either way.
		name: "multi", ops: []int32{zktest.OpMulti},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			keepIdle(t, ctx, m)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			multiCase(t, ctx, e, l, f)
		},
	},
	{
		// The same for a Mutex's lease.
		name: "multi-mutex", ops: []int32{zktest.OpMulti},
		run: func(t *testing.T, ctx context.Context, e faultEnv, m *zklock.CachedMutex, f fault) {
			mx, err := zklock.NewMutex(e.s, e.path)
			require.NoError(t, err)
			l, err := mx.Lock(ctx)
			require.NoError(t, err)
			multiCase(t, ctx, e, l, f)
		},
	},
}

// multiCase sends a Multi on l under f: it commits, or fails with ctx's
// cause or a connection error (outcome unknown); l is held after it
// either way, and unlocked.
func multiCase(t *testing.T, ctx context.Context, e faultEnv, l *zklock.Lease, f fault) {
	data := e.path + "-data"
	_, err := e.other.Conn().Create(data, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	defer e.other.Conn().Delete(data, -1)
	fctx, cancel := f.ctx(ctx)
	defer cancel()
	f.arm(e)
	_, err = l.Multi(fctx, &zk.SetDataRequest{Path: data, Data: []byte("x"), Version: -1})
	f.returned()
	f.settle(e)
	e.d.Disarm()
	if err != nil {
		_, byCtx := f.(ctxFault)
		require.True(t, isCtxErr(err) && byCtx || errors.Is(err, zk.ErrConnectionClosed) && !byCtx, "Multi with a %v: %v", f, err)
	}
	requireHeld(t, holding{Lease: l}, fmt.Sprintf("after a Multi with a %v", f))
	require.NoError(t, l.Unlock(ctx))
}

func runCachedFaults(t *testing.T, faults func(sc cachedScenario) []fault) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, sc := range cachedScenarios {
		fs := faults(sc)
		for _, f := range fs {
			t.Run(fmt.Sprintf("%s/%v", sc.name, f), func(t *testing.T) {
				t.Cleanup(func() { d.Disarm() })
				require.NoError(t, s.Err(), "the faulted session is over")
				require.Eventually(t, func() bool { return s.State() == zkrecipes.Connected }, liveWait, time.Millisecond, "the faulted session is back")
				ctx := bg(t)
				e := faultEnv{d: d, s: s, other: other, r: mutexRecipe, path: lockPath(t, other), addr: srv.Addrs()[0]}
				m, err := zklock.NewCachedMutex(s, e.path)
				require.NoError(t, err)
				sc.run(t, ctx, e, m, f)
				notStranded(t, ctx, e, f.String())
				cycle(t, ctx, m) // still usable
				require.NoError(t, m.Release(ctx))
				requireHit(t, f.hit(e), sc.name, f)
			})
		}
		requireCtxBothWays(t, "CachedMutex/"+sc.name, fs)
	}
}

// Fault (1) for the CachedMutex and Multi.
func TestFaultDropCachedMutex(t *testing.T) {
	runCachedFaults(t, func(sc cachedScenario) []fault { return dropFaults(sc.ops) })
}

// Fault (2) for the CachedMutex and Multi.
func TestFaultCtxCachedMutex(t *testing.T) {
	runCachedFaults(t, func(sc cachedScenario) []fault {
		if sc.holder {
			return nil
		}
		return ctxFaults()
	})
}
