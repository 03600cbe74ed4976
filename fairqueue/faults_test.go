package fairqueue_test

// The fault suite: every request the queue sends is tested under two
// faults. (1) The connection drops right after the request is written
// (zktest.Dropper, every mode: the request may or may not have been
// applied, or it was and its reply is lost, or it was lost on the way);
// the session survives. (2) The caller's ctx ends before, during or after
// the call (zktest.CtxEnds). After each case: an item put is there once (or, after an unknown
// outcome, at most once), a Job taken is not lost, Ack and Nack settle the
// item, no consumer is stranded in line/, no claim or other node is left.
//
// The table queueScenarios is the inventory of what each operation sends:
// for each operation, the requests the current design sends, each aimed at
// by a Dropper fault. A Dropper fault that does not fire fails its case:
// the operation no longer sends that request, and the table must be
// brought up to date (a request it sends and the table leaves out is a gap
// of the same kind).

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// queueEnv is what a fault case works with.
type queueEnv struct {
	d     *zktest.Dropper
	s     *zkrecipes.Session // through d
	other *zkrecipes.Session
	p     string
}

// fault is one fault around the operation under test.
type fault struct {
	op   int32       // for a Dropper fault
	mode zktest.Mode // 0: a ctx fault
	end  time.Duration
	base int
	// For a ctx fault: its ctx, and whether the operation returned before
	// ctx ended (set by done).
	ctx      context.Context
	returned bool
}

func (f *fault) String() string {
	if f.mode == 0 {
		return fmt.Sprintf("ctx ending at %v", f.end)
	}
	return fmt.Sprintf("%v on %s", f.mode, opNames[f.op])
}

// arm sets the fault up right before the operation, and returns its ctx.
func (f *fault) arm(e queueEnv, parent context.Context) (context.Context, context.CancelFunc) {
	if f.mode == 0 {
		ctx, cancel := context.WithTimeout(parent, f.end)
		if f.end == 0 {
			cancel()
		}
		f.ctx = ctx
		return ctx, cancel
	}
	f.base = e.d.Fired()
	e.d.Arm(zktest.Match{Op: f.op, Path: e.p}, f.mode)
	return context.WithCancel(parent)
}

// done disarms the Dropper (giving a fault in the background a moment to
// hit first) and reports whether the fault hit.
func (f *fault) done(e queueEnv, wait time.Duration) bool {
	if f.mode == 0 {
		f.returned = f.ctx != nil && f.ctx.Err() == nil
		return true
	}
	hit := fired(e.d, f.base+1, wait)
	e.d.Disarm()
	return hit
}

func (f *fault) byCtx() bool { return f.mode == 0 }

// requireHit fails a case whose fault never fired: the operation did not
// send the request the table says it sends.
func requireHit(t *testing.T, hit bool, what string, f *fault) {
	t.Helper()
	if !hit {
		t.Fatalf("the %s sent no request for the %v to hit: the fault did not fire; bring queueScenarios up to date with the requests it sends", what, f)
	}
}

var opNames = map[int32]string{
	zktest.OpCreate: "create", zktest.OpDelete: "delete", zktest.OpExists: "exists",
	zktest.OpGetData: "getData", zktest.OpSetData: "setData", zktest.OpGetChildren: "getChildren",
	zktest.OpGetChildren2: "getChildren2", zktest.OpCheck: "check", zktest.OpMulti: "multi",
	zktest.OpCreateContainer: "createContainer",
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// settle calls op (Ack or Nack) until it returns nil: an unknown outcome
// may be retried, a lost claim is a failure.
func settle(t *testing.T, ctx context.Context, what string, err error, op func(context.Context) error) {
	t.Helper()
	for tries := 0; err != nil && tries < 5; tries++ {
		require.NotErrorIs(t, err, fairqueue.ErrClaimLost, what)
		err = op(ctx)
	}
	require.NoError(t, err, what)
}

// settledAlone accepts what an Ack or Nack under a fault said: nil, or an
// outcome not known yet (its ctx ended first); never a lost claim. It is
// not asked again: a settlement asked for must happen by itself, which the
// caller's checks of the queue then prove.
func settledAlone(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown, what)
		require.NotErrorIs(t, err, fairqueue.ErrClaimLost, what)
	}
}

// requireKept fails if the job is lost, or is lost within a moment.
func requireKept(t *testing.T, j *fairqueue.Job, what string) {
	t.Helper()
	select {
	case <-j.Done():
		t.Fatalf("%s: the job was lost", what)
	case <-time.After(100 * time.Millisecond):
	}
}

// requireClean waits until the queue has no consumer in line and no claim.
func requireClean(t *testing.T, e queueEnv, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(names(t, e.other, e.p+"/line")) == 0 && len(names(t, e.other, e.p+"/claims")) == 0
	}, 10*time.Second, 5*time.Millisecond, "%s: left line/ %v, claims/ %v", what,
		names(t, e.other, e.p+"/line"), names(t, e.other, e.p+"/claims"))
}

// drainAll takes and acks every pending item (through other) and returns
// their data.
func drainAll(t *testing.T, ctx context.Context, e queueEnv) []string {
	t.Helper()
	q := fq(t, e.other, e.p)
	var out []string
	for {
		j, err := q.TryTake(ctx)
		if errors.Is(err, fairqueue.ErrEmpty) {
			return out
		}
		require.NoError(t, err)
		out = append(out, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
}

// usable proves the queue still works for consumers on both sessions: an
// item put is taken, by a Take on the faulted session.
func usable(t *testing.T, ctx context.Context, e queueEnv, what string) {
	t.Helper()
	_, err := fq(t, e.other, e.p).Put(ctx, []byte("after"))
	require.NoError(t, err)
	j := takeWithin(t, fq(t, e.s, e.p), e.other, e.p, what+": a later Take")
	require.Equal(t, "after", string(j.Data()))
	require.NoError(t, j.Ack(ctx))
}

// queueScenario is an operation run under a fault, with the requests it
// sends in the current design (ops): the Dropper faults aim at each.
type queueScenario struct {
	name string
	ops  []int32
	run  func(t *testing.T, ctx context.Context, e queueEnv, f *fault)
	// waits: the operation waits until something happens that no ctx
	// fault's ctx outlasts (an item put later), so ctx always ends first.
	waits bool
}

// putCase puts under the fault: the item is there once if Put said so,
// at most once if it said the outcome is unknown.
func putCase(t *testing.T, ctx context.Context, e queueEnv, f *fault, q *fairqueue.Queue, before []string) {
	fctx, cancel := f.arm(e, ctx)
	defer cancel()
	id, err := q.Put(fctx, []byte("x"))
	hit := f.done(e, 0)
	requireWriteOutcome(t, "Put", f, err)
	got := drainAll(t, ctx, e)
	want := append(before, "x")
	if err != nil && len(got) == len(before) {
		want = before
	}
	require.Equal(t, want, got, "items after a Put (id %q, err %v) with a %v", id, err, f)
	usable(t, ctx, e, f.String())
	requireClean(t, e, f.String())
	requireHit(t, hit, "Put", f)
}

// takeCase takes the pending item "x" under the fault: Take must get it
// (with a ctx fault it may give up, and the item stays deliverable), the
// Job must not be lost, and Ack must settle it.
func takeCase(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
	q := fq(t, e.s, e.p)
	fctx, cancel := f.arm(e, ctx)
	defer cancel()
	j, err := q.Take(fctx)
	hit := f.done(e, 200*time.Millisecond) // the Job's watch is set after Take returns
	switch {
	case err != nil && f.byCtx():
		require.True(t, isCtxErr(err), "Take with a %v: %v", f, err)
		j = takeWithin(t, fq(t, e.other, e.p), e.other, e.p, "the item, after a Take with a "+f.String())
	default:
		require.NoError(t, err, "Take with a %v", f)
		requireKept(t, j, "taken with a "+f.String())
	}
	require.Equal(t, "x", string(j.Data()))
	settle(t, ctx, "Ack", j.Ack(ctx), j.Ack)
	require.Empty(t, drainAll(t, ctx, e), "the acked item came back")
	requireClean(t, e, f.String())
	usable(t, ctx, e, f.String())
	requireHit(t, hit, "Take", f)
}

// lineCase is two Takes in line, one on each session, and two items put:
// the head hands one to itself and one to the consumer behind it. With
// faultedHead, the faulted session's Take is the head; else it waits
// behind the head. The fault is set once both stand in line; a ctx fault
// ends the faulted Take's ctx that long after the items are put. Every
// item is delivered once, to a Take or later.
func lineCase(t *testing.T, ctx context.Context, e queueEnv, f *fault, faultedHead bool) {
	warm(t, ctx, e)
	mine, theirs := fq(t, e.s, e.p), fq(t, e.other, e.p)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	qs, ctxs := []*fairqueue.Queue{theirs, mine}, []context.Context{ctx, tctx}
	if faultedHead {
		qs, ctxs = []*fairqueue.Queue{mine, theirs}, []context.Context{tctx, ctx}
	}
	got := make([]chan taken, 2)
	for i, q := range qs {
		got[i] = make(chan taken, 1)
		go func() {
			j, err := q.Take(ctxs[i])
			got[i] <- taken{j, err}
		}()
		require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/line")) == i+1 }, liveWait, time.Millisecond)
	}
	if f.byCtx() {
		f.base = e.d.Fired()
	} else {
		f.arm(e, ctx)
	}
	ids, err := theirs.PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
	require.NoError(t, err)
	if f.byCtx() {
		time.Sleep(f.end)
		cancel()
	}
	hit := f.done(e, time.Second)
	acked := map[string]int{}
	for i, c := range got {
		r := <-c
		if r.err != nil {
			require.True(t, f.byCtx() && isCtxErr(r.err), "Take %d with a %v: %v", i, f, r.err)
			continue
		}
		requireKept(t, r.j, "taken with a "+f.String())
		settle(t, ctx, "Ack", r.j.Ack(ctx), r.j.Ack)
		acked[r.j.ID()]++
	}
	if !f.byCtx() {
		require.Equal(t, map[string]int{ids[0]: 1, ids[1]: 1}, acked, "the items, one to each Take, with a %v", f)
	}
	for len(acked) < 2 {
		j := takeWithin(t, theirs, e.other, e.p, "an item left by a Take that gave up")
		require.NoError(t, j.Ack(ctx))
		acked[j.ID()]++
	}
	require.Equal(t, map[string]int{ids[0]: 1, ids[1]: 1}, acked, "each item once, with a %v", f)
	require.Empty(t, drainAll(t, ctx, e), "an acked item came back")
	requireClean(t, e, f.String())
	usable(t, ctx, e, f.String())
	requireHit(t, hit, "Take", f)
}

// workCase runs Work with one handler on the faulted session: it does a
// job, and its ack puts it back in line in the same multi, under the fault
// (set as the handler runs); then a second job, put later, is done too. A ctx fault ends
// Work's ctx that long after the first job's handler returns. Each job is
// done once, and nothing of Work's stays in line.
func workCase(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
	warm(t, ctx, e)
	q := fq(t, e.s, e.p)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan string, 2)
	stopped := make(chan error, 1)
	go func() {
		stopped <- q.Work(wctx, func(_ context.Context, j *fairqueue.Job) error {
			if string(j.Data()) == "first" && !f.byCtx() {
				f.arm(e, ctx) // for the ack that follows, and the join with it
			}
			done <- string(j.Data())
			return nil
		})
	}()
	_, err := fq(t, e.other, e.p).Put(ctx, []byte("first"))
	require.NoError(t, err)
	require.Equal(t, "first", <-done)
	if f.byCtx() {
		time.Sleep(f.end)
		cancel()
		require.ErrorIs(t, <-stopped, context.Canceled)
		requireClean(t, e, f.String())
		require.Empty(t, drainAll(t, ctx, e), "the job done came back")
		usable(t, ctx, e, f.String())
		return
	}
	hit := f.done(e, time.Second)
	_, err = fq(t, e.other, e.p).Put(ctx, []byte("second"))
	require.NoError(t, err)
	select {
	case d := <-done:
		require.Equal(t, "second", d)
	case <-time.After(liveWait):
		t.Fatalf("Work did not do the second job after a %v (line/ %v)", f, names(t, e.other, e.p+"/line"))
	}
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
	requireClean(t, e, f.String())
	require.Empty(t, drainAll(t, ctx, e), "a job done came back")
	usable(t, ctx, e, f.String())
	requireHit(t, hit, "Work", f)
}

// warm uses the queue once (line/ and claims/ exist from then on).
func warm(t *testing.T, ctx context.Context, e queueEnv) {
	t.Helper()
	q := fq(t, e.other, e.p)
	_, err := q.Put(ctx, []byte("warm"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Ack(ctx))
}

var queueScenarios = []queueScenario{
	{
		// The first Put on a queue: it reads the queue directory's high mark
		// (getData) and lists the buckets (getChildren2), finds neither,
		// makes the directories (createContainer), reads again, and puts
		// with one multi that moves the mark, makes the bucket and creates
		// the item (create).
		name: "put-first",
		ops:  []int32{zktest.OpCreateContainer, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpMulti, zktest.OpCreate},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			putCase(t, ctx, e, f, fq(t, e.s, e.p), nil)
		},
	},
	{
		// A Put into a known bucket: one multi, checking the bucket's
		// version (check) and creating the item (create).
		name: "put",
		ops:  []int32{zktest.OpMulti, zktest.OpCheck, zktest.OpCreate},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			q := fq(t, e.s, e.p)
			_, err := q.Put(ctx, []byte("first"))
			require.NoError(t, err)
			putCase(t, ctx, e, f, q, []string{"first"})
		},
	},
	{
		// The first Take on a queue, with an item pending: it makes line/
		// and claims/ (createContainer), joins the line (create, with a
		// getChildren2 of line/), finds no one ahead: the head. It reads
		// the offers standing (getData of line/), lists claims/, items/
		// and the bucket (getChildren2), reads the item (getData) and hands
		// it to itself with a multi: its claim, the offers standing
		// written back (setData), its node deleted (delete).
		name: "take-first",
		ops: []int32{zktest.OpCreateContainer, zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpMulti,
			zktest.OpSetData, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"))
			require.NoError(t, err)
			takeCase(t, ctx, e, f)
		},
	},
	{
		// Take with an item pending, on a queue used before: as take-first,
		// the directories there already.
		name: "take",
		ops:  []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData, zktest.OpMulti, zktest.OpSetData, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"))
			require.NoError(t, err)
			takeCase(t, ctx, e, f)
		},
	},
	{
		// Take waits on an empty queue used before; the fault hits while
		// it sets up its wait (create, the offers standing: getData, and
		// the listings that leave watches: getChildren2); then an item is
		// put.
		name:  "take-wait",
		ops:   []int32{zktest.OpCreate, zktest.OpGetChildren2, zktest.OpGetData},
		waits: true,
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			q := fq(t, e.s, e.p)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			type result struct {
				j   *fairqueue.Job
				err error
			}
			got := make(chan result, 1)
			go func() {
				j, err := q.Take(fctx)
				got <- result{j, err}
			}()
			if f.byCtx() {
				r := <-got
				require.Error(t, r.err, "a Take on an empty queue")
				require.True(t, isCtxErr(r.err), "Take with a %v: %v", f, r.err)
				requireClean(t, e, f.String())
				usable(t, ctx, e, f.String())
				return
			}
			hit := f.done(e, time.Second)
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"))
			require.NoError(t, err)
			var r result
			select {
			case r = <-got:
			case <-time.After(liveWait):
				t.Fatalf("the waiting Take never got the item put (line/ %v)", names(t, e.other, e.p+"/line"))
			}
			require.NoError(t, r.err, "the waiting Take, after a %v", f)
			require.Equal(t, "x", string(r.j.Data()))
			requireKept(t, r.j, "taken after a "+f.String())
			settle(t, ctx, "Ack", r.j.Ack(ctx), r.j.Ack)
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Take", f)
		},
	},
	{
		// A Take waiting behind the head of the line (a consumer on the
		// other session) is handed an item: it reads its node (getData)
		// and claims the item with a multi (create, and a check of the
		// version the offer set) that deletes its node (delete).
		name: "take-offered",
		ops:  []int32{zktest.OpGetData, zktest.OpMulti, zktest.OpCreate, zktest.OpCheck, zktest.OpDelete},
		run:  func(t *testing.T, ctx context.Context, e queueEnv, f *fault) { lineCase(t, ctx, e, f, false) },
	},
	{
		// A Take at the head of the line, with a consumer on the other
		// session waiting behind it, hands out two items: it reads the
		// offers standing (getData) and lists the queue (getChildren2),
		// reads the items (getData), and sends one multi: its claim
		// (create, setData), the offer to the other (create and delete of
		// its claim, setData of its node), the offers standing (setData),
		// its node's delete (delete).
		name: "take-hands-out",
		ops:  []int32{zktest.OpGetChildren2, zktest.OpGetData, zktest.OpMulti, zktest.OpCreate, zktest.OpSetData, zktest.OpDelete},
		run:  func(t *testing.T, ctx context.Context, e queueEnv, f *fault) { lineCase(t, ctx, e, f, true) },
	},
	{
		// Work, with one handler, does a job and acks it, and stands in
		// line again in the same multi (delete of the item and the claim,
		// create of its node); then it does a second job, from that node.
		name: "work",
		ops:  []int32{zktest.OpMulti, zktest.OpDelete, zktest.OpCreate},
		run:  workCase,
	},
	{
		// Ack: one multi that deletes the item and the claim.
		name: "ack",
		ops:  []int32{zktest.OpMulti, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			q := fq(t, e.s, e.p)
			_, err := q.Put(ctx, []byte("x"))
			require.NoError(t, err)
			j, err := q.Take(ctx)
			require.NoError(t, err)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			err = j.Ack(fctx)
			hit := f.done(e, 0)
			settledAlone(t, "Ack with a "+f.String(), err)
			requireClean(t, e, f.String()) // the claim went with the ack
			require.Empty(t, drainAll(t, ctx, e), "the acked item came back")
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Ack", f)
		},
	},
	{
		// Nack: one multi that checks the item's version and deletes the
		// claim.
		name: "nack",
		ops:  []int32{zktest.OpMulti, zktest.OpCheck, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			nackCase(t, ctx, e, f, "Nack", (*fairqueue.Job).Nack)
		},
	},
	{
		// Nack at max attempts: the item moves to the dead letters, in one
		// multi that creates the dead letter and deletes the item and the
		// claim; the first finds no dead/ and makes it (createContainer).
		name: "bury",
		ops:  []int32{zktest.OpMulti, zktest.OpCreateContainer, zktest.OpCreate},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			q := fq(t, e.s, e.p, fairqueue.WithMaxAttempts(1))
			id, err := q.Put(ctx, []byte("x"))
			require.NoError(t, err)
			j, err := q.Take(ctx)
			require.NoError(t, err)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			err = j.Nack(fctx)
			hit := f.done(e, 0)
			settledAlone(t, "Nack at max attempts with a "+f.String(), err)
			var dead []fairqueue.DeadLetter
			require.Eventually(t, func() bool {
				dead, err = q.DeadLetters(ctx)
				return err == nil && len(dead) == 1
			}, 10*time.Second, 5*time.Millisecond, "dead letters after a Nack at max attempts with a %v: %v, %v", f, dead, err)
			require.Equal(t, id, dead[0].ID)
			require.Empty(t, drainAll(t, ctx, e), "a dead letter was delivered")
			requireClean(t, e, f.String())
			_, err = q.Requeue(ctx, id)
			require.NoError(t, err)
			require.Equal(t, []string{"x"}, drainAll(t, ctx, e))
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Nack", f)
		},
	},

	{
		// TryTake with an item pending, on a queue used before: it reads
		// the offers standing (getData of line/), lists the queue
		// (getChildren2), reads the item (getData) and claims it with a
		// multi (create, setData).
		name: "try-take",
		ops:  []int32{zktest.OpGetChildren2, zktest.OpGetData, zktest.OpMulti, zktest.OpCreate, zktest.OpSetData},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"))
			require.NoError(t, err)
			tryTakeCase(t, ctx, e, f, "the item")
		},
	},
	{
		// PutMany into a known bucket: one multi, checking the bucket's
		// version (check) and creating the items (create); all or none.
		name: "put-many",
		ops:  []int32{zktest.OpMulti, zktest.OpCheck, zktest.OpCreate},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			ids, err := fq(t, e.s, e.p).PutMany(fctx, [][]byte{[]byte("a"), []byte("b")})
			hit := f.done(e, 0)
			requireWriteOutcome(t, "PutMany", f, err)
			got := drainAll(t, ctx, e)
			if err == nil || len(got) > 0 {
				require.Equal(t, []string{"a", "b"}, got, "items after a PutMany (ids %v, err %v) with a %v", ids, err, f)
			}
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "PutMany", f)
		},
	},
	{
		// Put WithDelay: one multi creating the entry in delayed/ (create).
		// Once due, a consumer moves it into the queue and takes it.
		name: "put-delayed",
		ops:  []int32{zktest.OpMulti, zktest.OpCreate},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			const delay = 30 * time.Millisecond
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			id, err := fq(t, e.s, e.p).Put(fctx, []byte("x"), fairqueue.WithDelay(delay))
			hit := f.done(e, 0)
			requireWriteOutcome(t, "Put WithDelay", f, err)
			time.Sleep(delay) // due
			got := drainAll(t, ctx, e)
			if err == nil || len(got) > 0 {
				require.Equal(t, []string{"x"}, got, "items after a Put WithDelay (id %q, err %v) with a %v", id, err, f)
			}
			require.Empty(t, names(t, e.other, e.p+"/delayed"), "a delayed entry left after a %v", f)
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Put WithDelay", f)
		},
	},
	{
		// A delayed item has come due: TryTake moves it into the queue (it
		// reads the entry, getData, and puts it with a multi that deletes
		// the entry: create, delete), then takes it.
		name: "promote",
		ops:  []int32{zktest.OpGetData, zktest.OpMulti, zktest.OpCreate, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			const delay = 20 * time.Millisecond
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"), fairqueue.WithDelay(delay))
			require.NoError(t, err)
			time.Sleep(2 * delay)
			tryTakeCase(t, ctx, e, f, "the due item, moved")
			require.Empty(t, names(t, e.other, e.p+"/delayed"), "a delayed entry left after a %v", f)
		},
	},
	{
		// NackAfter: one multi that creates the item's node in held/
		// (create) and deletes the claim (delete). The item comes back
		// once the hold is over, and its claim deletes the held node.
		name: "nack-after",
		ops:  []int32{zktest.OpMulti, zktest.OpCreate, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			nackCase(t, ctx, e, f, "NackAfter", func(j *fairqueue.Job, ctx context.Context) error {
				return j.NackAfter(ctx, 50*time.Millisecond)
			})
			require.Empty(t, names(t, e.other, e.p+"/held"), "a held node left after a %v", f)
		},
	},
	{
		// Requeue: it reads the dead letter (getData) and puts it back
		// with a multi that deletes it (check, create, delete): the item
		// is back and the dead letter gone, or neither.
		name: "requeue",
		ops:  []int32{zktest.OpGetData, zktest.OpMulti, zktest.OpCheck, zktest.OpCreate, zktest.OpDelete},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			id := deadLetter(t, ctx, e)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			_, err := fq(t, e.s, e.p).Requeue(fctx, id)
			hit := f.done(e, 0)
			requireWriteOutcome(t, "Requeue", f, err)
			dead, derr := fq(t, e.other, e.p).DeadLetters(ctx)
			require.NoError(t, derr)
			got := drainAll(t, ctx, e)
			switch {
			case err == nil || len(dead) == 0:
				require.Empty(t, dead, "the dead letter left after a Requeue (err %v) with a %v", err, f)
				require.Equal(t, []string{"x"}, got, "the item requeued once with a %v", f)
			default:
				require.Empty(t, got, "an item requeued while its dead letter stays, with a %v", f)
				_, err = fq(t, e.other, e.p).Requeue(ctx, id)
				require.NoError(t, err)
				require.Equal(t, []string{"x"}, drainAll(t, ctx, e))
			}
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Requeue", f)
		},
	},
	{
		// DeadLetters: it lists dead/ (getChildren2) and reads each
		// (getData). Reads change nothing; a dropped one is asked again.
		name: "dead-letters",
		ops:  []int32{zktest.OpGetChildren2, zktest.OpGetData},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			id := deadLetter(t, ctx, e)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			dead, err := fq(t, e.s, e.p).DeadLetters(fctx)
			hit := f.done(e, 0)
			if readAnswered(t, "DeadLetters", f, err) {
				require.Len(t, dead, 1, "DeadLetters with a %v", f)
				require.Equal(t, id, dead[0].ID)
				require.Equal(t, "x", string(dead[0].Data))
			}
			_, err = fq(t, e.other, e.p).Requeue(ctx, id)
			require.NoError(t, err, "the dead letter, after DeadLetters with a %v", f)
			require.Equal(t, []string{"x"}, drainAll(t, ctx, e))
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "DeadLetters", f)
		},
	},
	{
		// Len: it lists items/ and claims/ (getChildren2) and asks each
		// bucket's size (exists). Reads change nothing.
		name: "len",
		ops:  []int32{zktest.OpGetChildren2, zktest.OpExists},
		run: func(t *testing.T, ctx context.Context, e queueEnv, f *fault) {
			warm(t, ctx, e)
			_, err := fq(t, e.other, e.p).PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
			require.NoError(t, err)
			fctx, cancel := f.arm(e, ctx)
			defer cancel()
			n, err := fq(t, e.s, e.p).Len(fctx)
			hit := f.done(e, 0)
			if readAnswered(t, "Len", f, err) {
				require.Equal(t, 2, n, "Len with a %v", f)
			}
			require.Equal(t, []string{"a", "b"}, drainAll(t, ctx, e))
			requireClean(t, e, f.String())
			usable(t, ctx, e, f.String())
			requireHit(t, hit, "Len", f)
		},
	},
}

// requireWriteOutcome accepts what a write under the fault f said: nil, an
// outcome not known (ErrOutcomeUnknown), or, with a ctx fault, ctx's error;
// after an error it gives an abandoned write a moment to land.
func requireWriteOutcome(t *testing.T, what string, f *fault, err error) {
	t.Helper()
	if err != nil {
		require.True(t, errors.Is(err, fairqueue.ErrOutcomeUnknown) || f.byCtx() && isCtxErr(err),
			"%s with a %v: %v (want nil, or an error wrapping ErrOutcomeUnknown)", what, f, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// readAnswered accepts what a read under the fault f said: an answer, or,
// with a ctx fault only, ctx's error (a dropped read is asked again); it
// reports whether there is an answer to check.
func readAnswered(t *testing.T, what string, f *fault, err error) bool {
	t.Helper()
	if err != nil {
		require.True(t, f.byCtx() && isCtxErr(err), "%s with a %v: %v", what, f, err)
	}
	return err == nil
}

// tryTakeCase takes the one pending item "x" with TryTake under the fault:
// TryTake gets it (with a ctx fault it may give up), the Job is not lost,
// and the item is delivered once in all, to it or later.
func tryTakeCase(t *testing.T, ctx context.Context, e queueEnv, f *fault, what string) {
	t.Helper()
	fctx, cancel := f.arm(e, ctx)
	defer cancel()
	j, err := fq(t, e.s, e.p).TryTake(fctx)
	hit := f.done(e, 200*time.Millisecond)
	var got []string
	if !readAnswered(t, "TryTake", f, err) {
		time.Sleep(100 * time.Millisecond) // let an abandoned claim land (it is deleted then)
	} else {
		requireKept(t, j, "taken with a "+f.String())
		got = append(got, string(j.Data()))
		settle(t, ctx, "Ack", j.Ack(ctx), j.Ack)
	}
	requireClean(t, e, f.String()) // a claim that landed for a TryTake that gave up is gone
	got = append(got, drainAll(t, ctx, e)...)
	require.Equal(t, []string{"x"}, got, "%s, delivered once, after a TryTake with a %v", what, f)
	usable(t, ctx, e, f.String())
	requireHit(t, hit, "TryTake", f)
}

// nackCase takes the item "x" on the faulted session and gives it back
// with nack under the fault: the item comes back (its second delivery),
// whatever the call said, and nothing of the first claim stays.
func nackCase(t *testing.T, ctx context.Context, e queueEnv, f *fault, what string, nack func(*fairqueue.Job, context.Context) error) {
	t.Helper()
	q := fq(t, e.s, e.p)
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	fctx, cancel := f.arm(e, ctx)
	defer cancel()
	err = nack(j, fctx)
	hit := f.done(e, 0)
	settledAlone(t, what+" with a "+f.String(), err)
	j = takeWithin(t, fq(t, e.other, e.p), e.other, e.p, "the item given back with a "+f.String())
	require.Equal(t, id, j.ID())
	require.Equal(t, 2, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	requireClean(t, e, f.String())
	usable(t, ctx, e, f.String())
	requireHit(t, hit, what, f)
}

// deadLetter makes a dead letter "x" (delivered once, at most once) through
// the other session, and returns its id.
func deadLetter(t *testing.T, ctx context.Context, e queueEnv) string {
	t.Helper()
	q := fq(t, e.other, e.p, fairqueue.WithMaxAttempts(1))
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	return id
}

func runQueueFaults(t *testing.T, faults func(sc queueScenario) []*fault) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, sc := range queueScenarios {
		fs := faults(sc)
		for _, f := range fs {
			t.Run(fmt.Sprintf("%s/%v", sc.name, f), func(t *testing.T) {
				t.Cleanup(func() { d.Disarm() })
				require.NoError(t, s.Err(), "the faulted session is over")
				e := queueEnv{d: d, s: s, other: other, p: queuePath(t, srv.Addrs())}
				sc.run(t, bg(t, 60*time.Second), e, f)
			})
		}
		var ended, returned []time.Duration
		for _, f := range fs {
			switch {
			case f.ctx == nil:
			case f.returned:
				returned = append(returned, f.end)
			default:
				ended = append(ended, f.end)
			}
		}
		zktest.RequireCtxBothWays(t, sc.name, ended, returned, sc.waits)
	}
}

// Fault (1): the connection drops right after each kind of request the
// queue sends.
func TestFaultDropFairqueue(t *testing.T) {
	runQueueFaults(t, func(sc queueScenario) []*fault {
		var fs []*fault
		for _, op := range sc.ops {
			for _, mode := range []zktest.Mode{zktest.AfterWrite, zktest.LoseReply, zktest.BeforeWrite} {
				fs = append(fs, &fault{op: op, mode: mode})
			}
		}
		return fs
	})
}

// Fault (2): the caller's ctx ends before, during or after each operation;
// each operation's ctx faults are checked to have ended its ctx both
// before it returned and after (but for one that waits).
func TestFaultCtxFairqueue(t *testing.T) {
	runQueueFaults(t, func(queueScenario) []*fault {
		var fs []*fault
		for _, end := range zktest.CtxEnds() {
			fs = append(fs, &fault{end: end})
		}
		return fs
	})
}

// The ctx of a Take ends while the request that claims its items is in
// flight (held back by the Dropper until then), or before it is sent (the
// read of its node held): as the consumer behind the head claiming its
// offer, and as the head handing out. A claim that lands after its Take
// gave up is deleted, and its item delivered again (a claim held past the
// Take's leaving the line fails instead). The item of an offer counts that
// hand-out whether it was claimed or not (its next delivery is Attempt 2);
// a head's hand-out never sent counts none. Every item is delivered once
// in the end.
func TestFaultClaimCtxInLine(t *testing.T) {
	cases := []struct {
		name string
		head bool  // the faulted Take is the head
		held int32 // the request held back while its ctx ends
	}{
		{"offer claim in flight", false, zktest.OpMulti},
		{"before the offer claim", false, zktest.OpGetData},
		{"hand-out in flight", true, zktest.OpMulti},
	}
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { d.Disarm() })
			e := queueEnv{d: d, s: s, other: other, p: queuePath(t, srv.Addrs())}
			ctx := bg(t, 60*time.Second)
			warm(t, ctx, e)
			mine, theirs := fq(t, s, e.p), fq(t, other, e.p)
			tctx, cancel := context.WithCancel(ctx)
			defer cancel()
			qs, ctxs := []*fairqueue.Queue{theirs, mine}, []context.Context{ctx, tctx}
			if tc.head {
				qs, ctxs = []*fairqueue.Queue{mine, theirs}, []context.Context{tctx, ctx}
			}
			got := make([]chan taken, 2)
			for i, q := range qs {
				got[i] = make(chan taken, 1)
				go func() {
					j, err := q.Take(ctxs[i])
					got[i] <- taken{j, err}
				}()
				require.Eventually(t, func() bool { return len(names(t, other, e.p+"/line")) == i+1 }, liveWait, time.Millisecond)
			}
			never := zktest.Match{Op: zktest.OpMulti, Path: "/no such path"}
			d.HoldFor(zktest.Match{Op: tc.held, Path: e.p}, never, 300*time.Millisecond)
			ids, err := theirs.PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return d.Armed() == 0 }, liveWait, time.Millisecond, "the request is held")
			cancel()
			attempts := map[string]int{}
			for _, c := range got {
				r := <-c
				if r.err != nil {
					require.True(t, isCtxErr(r.err), "%v", r.err)
					continue
				}
				attempts[r.j.ID()] = r.j.Attempt()
				require.NoError(t, r.j.Ack(ctx))
			}
			for len(attempts) < 2 {
				j := takeWithin(t, theirs, other, e.p, "the item of the Take that gave up")
				attempts[j.ID()] = j.Attempt()
				require.NoError(t, j.Ack(ctx))
			}
			mineID := ids[1]
			if tc.head {
				mineID = ids[0]
			}
			if tc.head {
				require.Contains(t, []int{1, 2}, attempts[mineID], "the faulted head's item: %v", attempts)
			} else {
				require.Equal(t, 2, attempts[mineID], "the faulted Take's item, offered to it: %v", attempts)
			}
			require.Equal(t, 1, attempts[other0(ids, mineID)], "the other item")
			require.Empty(t, drainAll(t, ctx, e))
			requireClean(t, e, tc.name)
			usable(t, ctx, e, tc.name)
		})
	}
}

// other0 is the id of ids other than id.
func other0(ids []string, id string) string {
	if ids[0] == id {
		return ids[1]
	}
	return ids[0]
}

// Both faults at once, on an Ack: its ctx ends (here before the call) while
// its connection is cut and the client is kept from reconnecting. While it
// is in flight, a Nack is refused at once with ErrSettled ("or is being
// settled"), and the item and its claim are still there; once the client is
// back, the ack goes on by itself until it is applied, never asked again:
// the item is gone, not delivered again.
func TestFaultSettleInFlight(t *testing.T) {
	srv := setup(t)
	ctx := bg(t, 60*time.Second)
	d := &zktest.Dropper{}
	// Long enough for the session to outlive the outage below.
	s := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(30*time.Second))
	other := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := fq(t, s, p)
	_, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)

	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(zktest.Match{Op: zktest.OpMulti, Path: p + "/claims/"}, zktest.BeforeWrite)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = j.Ack(ended)
	require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown, "Ack with an ended ctx returns at once")
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, fired(d, 1, liveWait), "the ack was sent, and cut off")
	require.Len(t, names(t, other, p+"/claims"), 1, "the ack cut off did not land")

	nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
	defer ncancel()
	require.ErrorIs(t, j.Nack(nctx), fairqueue.ErrSettled, "Nack while the Ack is in flight")

	d.Resume()
	require.Eventually(t, func() bool { return len(names(t, other, p+"/claims")) == 0 }, liveWait, 5*time.Millisecond,
		"the Ack asked for never happened")
	_, err = fq(t, other, p).TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "the acked item is gone")
	require.NoError(t, j.Ack(ctx), "Ack after Ack")
	require.ErrorIs(t, j.Nack(ctx), fairqueue.ErrSettled, "Nack after Ack")
	require.NoError(t, s.Err(), "the session lived through the outage")
}
