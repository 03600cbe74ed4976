package fairqueue_test

// The fault suites: every request the queue sends, the consumer's and the
// dispatcher's, is tested under two faults. (1) The connection drops right
// after the request is written (zktest.Dropper), the session surviving: for
// a write in every way a client cannot tell apart (AfterWrite: it usually
// lands; LoseReply: it landed; BeforeWrite: it did not), for a read
// AfterWrite (the others give a read the same outcome: no answer, and a
// watch that went with its connection). (2) The caller's ctx ends before,
// during or after the call (zktest.CtxEnds). The dispatcher's requests are
// faulted on the dispatcher's own session (the Queue that was elected); the
// dispatcher's ctx is its Queue's, which ends with Close, so its ctx faults
// close it before, during or after a hand-out, and a rebuild.
//
// After each case, whatever the faulted call returned: every item put is
// delivered until it is acked, never to two consumers, and its Attempt is
// exact (1 + the hand-outs before it: the high mark in items/ says whether
// an item was handed out, as the dispatcher writes it in the very multi
// that hands out); a Job held across a drop is not lost, nor the
// dispatcher's leadership; once the queue is drained no ticket, held node,
// delayed entry, key, item or bucket is left (and no node at all once the
// case's Queues are closed: see queuePath); and a Take on a fresh consumer
// gets the next item put.
//
// scenarios is the inventory of the requests each operation sends, each
// named and aimed at by a Dropper fault. A fault that does not fire fails
// its case: the operation no longer sends that request (or not first), and
// the table must be brought up to date.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Bounds of the waits for things that happen in the background. They are
// liveness bounds, generous for a loaded machine, never a measure of speed.
const (
	// dropWait: a fault aimed at a request sent in the background (a job's
	// look at its ticket, a clean-up) fires within it once its trigger is
	// done.
	dropWait = 5 * time.Second
	// cleanWait: the nodes a settled queue no longer needs are gone.
	cleanWait = 10 * time.Second
)

// env is what a fault case works with.
type env struct {
	d     *zktest.Dropper
	w     *wire              // the faulted session's multis
	s     *zkrecipes.Session // through w and d: the faulted session
	other *zkrecipes.Session
	addrs []string
	p     string
}

// aim is a request an operation sends, as the Dropper finds it: the first
// request after the fault is armed (past skip of them) whose opcode is op,
// or that is a multi holding such an op, on a path that contains the
// queue's path + under (and that sets a watch, with watch).
type aim struct {
	name  string
	op    int32
	under string
	watch bool
	skip  int
	// after: the fault follows the loss of this request's reply (a ticket
	// create's), aimed at what the operation then does to learn its
	// outcome.
	after *aim
}

func (a aim) match(p string) zktest.Match {
	return zktest.Match{Op: a.op, Path: p + a.under, Watch: a.watch}
}

func (a aim) read() bool {
	return a.op == zktest.OpGetData || a.op == zktest.OpGetChildren2 || a.op == zktest.OpExists
}

// never matches no request the queue sends.
var never = zktest.Match{Op: zktest.OpMulti, Path: "/no such path"}

// fault is one fault around the operation under test: a drop aimed at a
// request, or a ctx that ends after end.
type fault struct {
	aim  aim
	mode zktest.Mode // 0: a ctx fault
	end  time.Duration
	base int
	want int // cuts expected
	// For a ctx fault: whether the operation returned before its ctx
	// ended, once known.
	ctx      context.Context
	recorded bool
	returned bool
	// multis: the faulted session's multis on the queue when the call
	// under test began.
	multis int
}

func (f *fault) String() string {
	if f.byCtx() {
		return fmt.Sprintf("ctx ending at %v", f.end)
	}
	return fmt.Sprintf("%v on %s", f.mode, f.aim.name)
}

func (f *fault) byCtx() bool { return f.mode == 0 }

// armDrop arms the Dropper for the fault (a drop fault only).
func (f *fault) armDrop(e env) {
	if f.byCtx() {
		return
	}
	f.base, f.want = e.d.Fired(), 1
	m := f.aim.match(e.p)
	if f.aim.after != nil {
		e.d.Arm(f.aim.after.match(e.p), zktest.LoseReply)
		f.want++
	}
	for range f.aim.skip {
		// Held back a moment and sent: uses up one match, cuts nothing.
		e.d.HoldFor(m, never, time.Millisecond)
	}
	e.d.Arm(m, f.mode)
}

// opCtx returns the ctx of the call under test, made right before it: for
// a ctx fault one that ends f.end from now (at once for 0); else a ctx no
// fault ends, with the drop armed.
func (f *fault) opCtx(e env, parent context.Context) (context.Context, context.CancelFunc) {
	f.multis, _ = e.multis()
	if !f.byCtx() {
		f.armDrop(e)
		return context.WithCancel(parent)
	}
	ctx, cancel := context.WithTimeout(parent, f.end)
	if f.end == 0 {
		cancel()
	}
	f.ctx = ctx
	return ctx, cancel
}

// callReturned records, for a ctx fault made by opCtx, whether the call
// returned before its ctx ended.
func (f *fault) callReturned() {
	if f.byCtx() && f.ctx != nil {
		f.record(f.ctx.Err() == nil)
	}
}

func (f *fault) record(returnedFirst bool) { f.recorded, f.returned = true, returnedFirst }

// done waits up to wait for a drop fault to fire, disarms the Dropper and
// reports whether it fired (a ctx fault: true).
func (f *fault) done(e env, wait time.Duration) bool {
	if f.byCtx() {
		return true
	}
	hit := fired(e.d, f.base+f.want, wait)
	e.d.Disarm()
	return hit
}

// requireHit fails a case whose drop never fired: the operation did not
// send the request the table says it sends.
func requireHit(t *testing.T, hit bool, what string, f *fault) {
	t.Helper()
	if !hit {
		t.Fatalf("%s sent no request for the %v to hit: the fault did not fire; bring scenarios up to date with the requests it sends", what, f)
	}
}

// endAfter ends a ctx fault's ctx (cancel) f.end after now, recording
// whether got had delivered first; it returns what got delivered, waiting
// for it up to liveWait.
func endAfter[T any](t *testing.T, f *fault, cancel context.CancelFunc, got <-chan T) T {
	t.Helper()
	var v T
	time.Sleep(f.end)
	select {
	case v = <-got:
		f.record(true)
		cancel()
		return v
	default:
	}
	cancel()
	f.record(false)
	return recv(t, got, "the call whose ctx ended")
}

// closeAfter, for a ctx fault on the dispatcher's requests, closes the
// dispatcher's Queue d f.end from now (the dispatcher's ctx ends with it,
// and the next Queue in the election takes over), recording whether
// finished said the work under test was done by then. The function it
// returns waits for the close.
func closeAfter(t *testing.T, ctx context.Context, f *fault, d *fairqueue.Queue, finished func() bool) func() {
	if !f.byCtx() {
		return func() {}
	}
	closed := make(chan error, 1)
	go func() {
		time.Sleep(f.end)
		f.record(finished())
		closed <- d.Close(ctx)
	}()
	return func() {
		t.Helper()
		require.NoError(t, recv(t, closed, "the dispatcher's Close"))
	}
}

// recv waits up to liveWait for what ch delivers.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(liveWait):
		t.Fatalf("%s did not return within %v", what, liveWait)
	}
	panic("unreachable")
}

type taken struct {
	j   *fairqueue.Job
	err error
}

func goTake(ctx context.Context, q *fairqueue.Queue) <-chan taken {
	ch := make(chan taken, 1)
	go func() {
		j, err := q.Take(ctx)
		ch <- taken{j, err}
	}()
	return ch
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// settle calls op (Ack or Nack) until it returns nil: an unknown outcome
// may be asked again; a lost job is a failure.
func settle(t *testing.T, ctx context.Context, what string, err error, op func(context.Context) error) {
	t.Helper()
	for tries := 0; err != nil && tries < 5; tries++ {
		require.NotErrorIs(t, err, fairqueue.ErrClaimLost, what)
		err = op(ctx)
	}
	require.NoError(t, err, what)
}

// settledAlone accepts what an Ack or Nack under a fault said: nil, or an
// outcome not known yet (its ctx ended first); never a lost job. It is not
// asked again: a settlement asked for must happen by itself, which the
// checks of the queue that follow prove.
func settledAlone(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown, what)
		require.NotErrorIs(t, err, fairqueue.ErrClaimLost, what)
	}
}

// requireKept fails if the job is lost, or is lost within a moment (its
// first look at its ticket comes 100 ms after it is taken).
func requireKept(t *testing.T, j *fairqueue.Job, what string) {
	t.Helper()
	select {
	case <-j.Done():
		t.Fatalf("%s: the job was lost", what)
	case <-time.After(300 * time.Millisecond):
	}
}

// requireWriteOutcome accepts what a write under the fault f said: nil, an
// outcome not known (ErrOutcomeUnknown), or, with a ctx fault, ctx's error
// (then nothing was sent). With an unknown outcome, it waits until the
// write has landed or never will: after a drop, until a sync of the
// faulted session is answered (sent on its new connection, it is answered
// after whatever the old one carried); after ctx ended, until every multi
// the session sent is answered, one at least since the call began (a
// goroutine of the call sends it, if it has not yet). A call whose ctx
// ended sends no further multi; but a Put's batch goes on for the Puts it
// carries (it tries again in a newer bucket): the Put that follows it on
// that Queue waits for it, and the caller puts one before it looks. A call
// whose ctx ended right before its multi went sent none: that is known
// once none came within liveWait.
func requireWriteOutcome(t *testing.T, e env, what string, f *fault, err error) {
	t.Helper()
	switch {
	case err == nil:
	case !errors.Is(err, fairqueue.ErrOutcomeUnknown):
		require.True(t, f.byCtx() && isCtxErr(err), "%s with a %v: %v (want nil, or an error wrapping ErrOutcomeUnknown)", what, f, err)
	case !f.byCtx():
		require.Eventually(t, func() bool {
			_, err := e.s.Conn().Sync(e.p)
			return err == nil || errors.Is(err, zk.ErrNoNode)
		}, liveWait, 5*time.Millisecond, "a sync after a %v", f)
	default:
		deadline := time.Now().Add(liveWait)
		for {
			sent, answered := e.multis()
			if answered == sent && (sent > f.multis || time.Now().After(deadline)) {
				return
			}
			require.True(t, time.Now().Before(deadline), "the multi of a %s whose ctx ended (%v) was never answered", what, err)
			time.Sleep(time.Millisecond)
		}
	}
}

// multis counts the multis on the queue the faulted session sent, and
// those answered.
func (e env) multis() (sent, answered int) {
	on := func(m *sentMulti) bool {
		return slices.ContainsFunc(m.ops, func(o wireOp) bool { return strings.HasPrefix(o.path, e.p+"/") })
	}
	return e.w.countSent(on), e.w.count(on)
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

// put puts items through a Queue of the other session that takes nothing
// (it stands for no election), and returns their ids.
func (e env) put(t *testing.T, ctx context.Context, data ...string) []string {
	t.Helper()
	items := make([][]byte, len(data))
	for i, d := range data {
		items[i] = []byte(d)
	}
	ids, err := fq(t, e.other, e.p).PutMany(ctx, items)
	require.NoError(t, err)
	return ids
}

// elect makes a Queue on s the queue's dispatcher: the first on the queue
// to take, it stands first, and its TryTake of the empty queue is answered
// by itself.
func (e env) elect(t *testing.T, ctx context.Context, s *zkrecipes.Session, opts ...fairqueue.Option) *fairqueue.Queue {
	t.Helper()
	q := fq(t, s, e.p, opts...)
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	_, who := e.leader(t)
	require.Equal(t, fairqueue.Name(q), who, "the dispatcher")
	return q
}

// leader returns the node that leads the dispatcher's election, and its
// data: the name of the Queue that dispatches.
func (e env) leader(t *testing.T) (node, name string) {
	t.Helper()
	ns := names(t, e.other, e.p+"/dispatch")
	if len(ns) == 0 {
		return "", ""
	}
	seq := func(n string) string { return n[strings.LastIndex(n, "-")+1:] }
	slices.SortFunc(ns, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	data, _, err := e.other.Conn().Get(e.p + "/dispatch/" + ns[0])
	if errors.Is(err, zk.ErrNoNode) {
		return e.leader(t) // resigned meanwhile
	}
	require.NoError(t, err)
	return ns[0], string(data)
}

// requireLeads fails unless q still dispatches from node: a dropped
// connection deposes no dispatcher.
func (e env) requireLeads(t *testing.T, q *fairqueue.Queue, node string, f *fault) {
	t.Helper()
	n, who := e.leader(t)
	require.Equal(t, fairqueue.Name(q), who, "the dispatcher after a %v", f)
	require.Equal(t, node, n, "the dispatcher stood again after a %v: its leadership ended", f)
}

// waitTicket waits until q has n tickets in ready/.
func (e env) waitTicket(t *testing.T, q *fairqueue.Queue, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(e.tickets(t, q)) == n }, liveWait, time.Millisecond,
		"%d tickets of the consumer in line (ready/: %v)", n, names(t, e.other, e.p+"/ready"))
}

func (e env) tickets(t *testing.T, q *fairqueue.Queue) []string {
	var out []string
	for _, n := range names(t, e.other, e.p+"/ready") {
		if strings.Contains(n, fairqueue.Name(q)) {
			out = append(out, n)
		}
	}
	return out
}

// warm has q take an item once (TryTake: no spare follows its Ack), so
// that its inbox exists and its reader waits on it: the next read of the
// inbox is the one that an offer's write fires.
func (e env) warm(t *testing.T, ctx context.Context, q *fairqueue.Queue) {
	t.Helper()
	e.put(t, ctx, "warm")
	j, err := q.TryTake(ctx)
	require.NoError(t, err)
	require.Equal(t, "warm", string(j.Data()))
	require.NoError(t, j.Ack(ctx))
}

// highMark is the highest id the queue's dispatchers handed out.
func (e env) highMark(t *testing.T) string {
	t.Helper()
	_, err := e.other.Conn().Sync(e.p + "/items")
	if errors.Is(err, zk.ErrNoNode) {
		return ""
	}
	require.NoError(t, err)
	data, _, err := e.other.Conn().Get(e.p + "/items")
	if errors.Is(err, zk.ErrNoNode) {
		return ""
	}
	require.NoError(t, err)
	return string(data)
}

// delivery is an item as a consumer got it.
type delivery struct {
	id, data string
	attempt  int
}

// drainAll takes and acks every pending item through a fresh consumer of
// the other session, waiting for the items held back (held/, delayed/).
func drainAll(t *testing.T, ctx context.Context, e env) []delivery {
	t.Helper()
	q := fq(t, e.other, e.p)
	deadline := time.Now().Add(liveWait)
	var out []delivery
	for {
		j, err := q.TryTake(ctx)
		if errors.Is(err, fairqueue.ErrEmpty) {
			held, delayed := names(t, e.other, e.p+"/held"), names(t, e.other, e.p+"/delayed")
			if len(held)+len(delayed) == 0 {
				return out
			}
			require.True(t, time.Now().Before(deadline), "items held back never came: held/ %v, delayed/ %v", held, delayed)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		require.NoError(t, err)
		out = append(out, delivery{j.ID(), string(j.Data()), j.Attempt()})
		require.NoError(t, j.Ack(ctx))
	}
}

// requireDrain waits until no ticket stands (no consumer waits, and every
// offer is settled), then drains the queue and checks it held exactly
// want, each item once, with its Attempt exact: want's, or, given as 0, 2
// for an item the high mark says was handed out, else 1.
func requireDrain(t *testing.T, ctx context.Context, e env, what string, want ...delivery) {
	t.Helper()
	require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/ready")) == 0 }, cleanWait, 5*time.Millisecond,
		"%s: tickets left in line: %v", what, names(t, e.other, e.p+"/ready"))
	mark := e.highMark(t)
	for i, w := range want {
		if w.attempt == 0 {
			want[i].attempt = 1
			if mark != "" && w.id <= mark {
				want[i].attempt = 2
			}
		}
	}
	got := drainAll(t, ctx, e)
	byID := func(a, b delivery) int { return strings.Compare(a.id, b.id) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if want == nil {
		want = []delivery{}
	}
	if got == nil {
		got = []delivery{}
	}
	require.Equal(t, want, got, "%s: the items left in the queue (high mark %q)", what, mark)
}

// requireClean waits until nothing of a drained queue is left: no ticket,
// held node, delayed entry, key or dead letter, no item and no bucket (the
// dispatcher deletes drained buckets).
func requireClean(t *testing.T, e env, what string) {
	t.Helper()
	left := func() []string {
		var out []string
		for _, dir := range []string{"ready", "held", "delayed", "keys", "dead", "items"} {
			for _, n := range names(t, e.other, e.p+"/"+dir) {
				out = append(out, dir+"/"+n)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(left()) == 0 }, cleanWait, 5*time.Millisecond, "%s: left %v", what, left())
}

// usable proves the queue still serves: an item put is taken by a Take of
// a fresh consumer on the faulted session, within liveWait, as a first
// delivery.
func usable(t *testing.T, ctx context.Context, e env, what string) {
	t.Helper()
	ids := e.put(t, ctx, "after")
	q := fq(t, e.s, e.p)
	tctx, cancel := context.WithTimeout(ctx, liveWait)
	defer cancel()
	j, err := q.Take(tctx)
	require.NoError(t, err, "%s: a later Take on a fresh consumer (ready/: %v)", what, names(t, e.other, e.p+"/ready"))
	require.Equal(t, delivery{ids[0], "after", 1}, delivery{j.ID(), string(j.Data()), j.Attempt()}, what)
	require.NoError(t, j.Ack(ctx))
}

// finish is every case's end: the queue drained of want, left clean, and
// usable; the fault fired.
func finish(t *testing.T, ctx context.Context, e env, f *fault, what string, hit bool, want ...delivery) {
	t.Helper()
	requireDrain(t, ctx, e, f.String(), want...)
	requireClean(t, e, f.String())
	usable(t, ctx, e, f.String())
	requireClean(t, e, f.String())
	requireHit(t, hit, what, f)
}

// scenario is an operation run under a fault, with the requests it sends
// (aims): each drop fault aims at one of them.
type scenario struct {
	name string
	aims []aim
	run  func(t *testing.T, ctx context.Context, e env, f *fault)
	// waits: the operation waits until something happens that no ctx
	// fault's ctx outlasts, so its ctx always ends first.
	waits bool
	// noCtx: the operation runs on no caller's ctx (a clean-up, the
	// dispatcher's reads): its ctx faults are those of the scenario
	// that starts it.
	noCtx bool
}

// Aims shared by scenarios.
var (
	aimInboxCreate = aim{name: "inbox create", op: zktest.OpCreate, under: "/consumers/"}
	aimTicket      = aim{name: "ticket create (multi)", op: zktest.OpCreate, under: "/ready/t-"}
	aimInboxRead   = aim{name: "inbox read", op: zktest.OpGetData, under: "/consumers/", watch: true}
	aimJobLook     = aim{name: "the job's look at its ticket", op: zktest.OpGetData, under: "/ready/", watch: true}
	aimAck         = aim{name: "ack multi", op: zktest.OpDelete, under: "/items/b"}
	aimHeldDir     = aim{name: "held/ container create", op: zktest.OpCreateContainer, under: "/held"}
	aimItemRead    = aim{name: "item read", op: zktest.OpGetData, under: "/items/b"}
	aimPut         = aim{name: "put multi", op: zktest.OpCheck, under: "/items/b"}
	aimBlobRead    = aim{name: "blob read", op: zktest.OpGetData, under: "/items/p"}

	// The dispatcher's.
	aimListReady     = aim{name: "ready/ listing", op: zktest.OpGetChildren2, under: "/ready", watch: true}
	aimListConsumers = aim{name: "consumers/ listing", op: zktest.OpGetChildren2, under: "/consumers", watch: true}
	aimListHeld      = aim{name: "held/ listing", op: zktest.OpGetChildren2, under: "/held", watch: true}
	aimListDelayed   = aim{name: "delayed/ listing", op: zktest.OpGetChildren2, under: "/delayed", watch: true}
	aimListItems     = aim{name: "items/ listing", op: zktest.OpGetChildren2, under: "/items", watch: true}
	aimListBucket    = aim{name: "bucket listing", op: zktest.OpGetChildren2, under: "/items/b", watch: true}
	aimHandOut       = aim{name: "hand-out multi", op: zktest.OpSetData, under: "/ready/"}
	aimBump          = aim{name: "hand-out multi offering an item again (its bump)", op: zktest.OpSetData, under: "/items/b"}
)

var scenarios = []scenario{
	// The consumer's requests. The dispatcher is a Queue of the other
	// session, elected first, unless said otherwise.
	{
		// A Take on a new consumer, an item pending: it makes its inbox,
		// puts its ticket in line (a multi, shared with the acks of the
		// moment), reads its inbox when the offer is written into it (the
		// offer carries the payload: no item read), and its Job looks at
		// its ticket a moment later.
		name: "take",
		aims: []aim{aimInboxCreate, aimTicket, aimInboxRead, aimJobLook},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			ids := e.put(t, ctx, "x")
			takeCase(t, ctx, e, f, fq(t, e.s, e.p), delivery{ids[0], "x", 0})
		},
	},
	{
		// The first Take on a queue that no consumer used: it makes
		// consumers/ and ready/ too (containers); the faulted Queue is the
		// dispatcher too (no other stands).
		name: "take-first",
		aims: []aim{
			{name: "consumers/ container create", op: zktest.OpCreateContainer, under: "/consumers"},
			{name: "ready/ container create", op: zktest.OpCreateContainer, under: "/ready"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			ids := e.put(t, ctx, "x")
			takeCase(t, ctx, e, f, fq(t, e.s, e.p), delivery{ids[0], "x", 0})
		},
	},
	{
		// A Take of an item too large for its offer to carry: the consumer
		// reads it.
		name: "take-large",
		aims: []aim{aimItemRead},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			big := strings.Repeat("x", 8<<10)
			ids := e.put(t, ctx, big)
			takeCase(t, ctx, e, f, fq(t, e.s, e.p), delivery{ids[0], big, 0})
		},
	},
	{
		// A Take of an item of a PutMany, too large for its offer to
		// carry: the consumer reads the batch's blob.
		name: "take-blob",
		aims: []aim{aimBlobRead},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			a, b := strings.Repeat("a", 8<<10), strings.Repeat("b", 8<<10)
			ids := e.put(t, ctx, a, b)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			j, err := fq(t, e.s, e.p).Take(fctx)
			f.callReturned()
			hit := f.done(e, dropWait)
			want, rest := delivery{ids[0], a, 0}, delivery{ids[1], b, 0}
			if tookOrGaveUp(t, ctx, f, taken{j, err}, want, "Take") {
				finish(t, ctx, e, f, "Take", hit, rest)
				return
			}
			finish(t, ctx, e, f, "Take", hit, want, rest)
		},
	},
	{
		// A Take whose ticket create's reply is lost looks for its ticket
		// by its tag (a listing of ready/).
		name:  "take-lookup",
		aims:  []aim{{name: "ready/ listing after a ticket create's reply was lost", op: zktest.OpGetChildren2, under: "/ready", after: &aimTicket}},
		noCtx: true, // its ctx is the Take's: see take
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			ids := e.put(t, ctx, "x")
			takeCase(t, ctx, e, f, fq(t, e.s, e.p), delivery{ids[0], "x", 0})
		},
	},
	{
		// A Take waits on an empty queue, its consumer's reader idle on its
		// inbox; an item is put once its ticket stands. The drop hits its
		// ticket create or its read of the offer. Its ctx ends that long
		// after the item is put: before the hand-out (its ticket is
		// deleted), after the offer was written but before the Take saw it
		// (the item is given back, and counts that hand-out), or after the
		// Take returned.
		name: "take-wait",
		aims: []aim{aimTicket, aimInboxRead},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			e.warm(t, ctx, q)
			tctx, cancel := context.WithCancel(ctx)
			defer cancel()
			f.armDrop(e)
			got := goTake(tctx, q)
			e.waitTicket(t, q, 1)
			ids := e.put(t, ctx, "x")
			var r taken
			if f.byCtx() {
				r = endAfter(t, f, cancel, got)
			} else {
				r = recv(t, got, "the waiting Take")
			}
			hit := f.done(e, dropWait)
			want := []delivery{{ids[0], "x", 0}}
			if tookOrGaveUp(t, ctx, f, r, want[0], "Take") {
				want = nil
			}
			finish(t, ctx, e, f, "Take", hit, want...)
		},
	},
	{
		// A Take that gives up after its offer was written, but before it
		// read it (its reader's read held back): the clean-up deletes the
		// ticket if still waiting (version 0), which fails as it was
		// served; reads the inbox for the offers; and gives the item back
		// with a multi that makes its node in held/ (held/ made first on a
		// queue that never had one) and deletes the ticket.
		name: "give-back",
		aims: []aim{
			{name: "ticket delete (version 0)", op: zktest.OpDelete, under: "/ready/t-"},
			{name: "inbox read of the clean-up", op: zktest.OpGetData, under: "/consumers/"},
			aimHeldDir,
			{name: "give-back multi (held/ create)", op: zktest.OpCreate, under: "/held/", skip: 1},
		},
		noCtx: true, // a clean-up: the Take's ctx ending starts it (see take-wait)
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			e.warm(t, ctx, q)
			e.d.HoldFor(zktest.Match{Op: zktest.OpGetData, Path: e.p + "/consumers/" + fairqueue.Name(q), Watch: true}, never, 3*time.Second)
			tctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := goTake(tctx, q)
			e.waitTicket(t, q, 1)
			ids := e.put(t, ctx, "x")
			require.Eventually(t, func() bool { return e.d.Armed() == 0 }, liveWait, time.Millisecond, "the read of the offer is held")
			f.armDrop(e)
			cancel()
			r := recv(t, got, "the Take that gave up")
			require.Error(t, r.err, "the Take saw its offer, though its read was held back")
			require.True(t, isCtxErr(r.err), "%v", r.err)
			hit := f.done(e, dropWait)
			// Handed out once, to the Take that gave up.
			finish(t, ctx, e, f, "the give-back", hit, delivery{ids[0], "x", 2})
		},
	},
	{
		// A loop of Takes: the Ack of a Take's job puts the next Take's
		// ticket (a spare) in line in its own multi, and the next Take
		// claims it. The drop hits that multi (the ack's with the spare's
		// create), or, after its reply was lost, the look for the spare by
		// its tag; a ctx fault is the Ack's.
		name: "spare",
		aims: []aim{
			{name: "ack multi with the spare's create", op: zktest.OpCreate, under: "/ready/t-"},
			{name: "ready/ listing after the ack's reply was lost", op: zktest.OpGetChildren2, under: "/ready",
				after: &aim{op: zktest.OpCreate, under: "/ready/t-"}},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			j := spareLoop(t, ctx, e, q)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			err := j.Ack(fctx)
			f.callReturned()
			settledAlone(t, "Ack with a "+f.String(), err)
			// The next Take claims the spare, if one was made and it comes
			// in time; else it puts its own ticket in line.
			got := goTake(ctx, q)
			ids := e.put(t, ctx, "y")
			r := recv(t, got, "the Take after the Ack")
			require.NoError(t, r.err)
			require.Equal(t, delivery{ids[0], "y", 1}, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()})
			requireKept(t, r.j, "taken after a "+f.String())
			require.NoError(t, r.j.Ack(ctx))
			hit := f.done(e, dropWait)
			finish(t, ctx, e, f, "the Ack", hit)
		},
	},
	{
		// A spare no Take claims within its linger is withdrawn: deleted
		// while not served (version 0).
		name:  "spare-withdraw",
		aims:  []aim{{name: "spare delete (version 0)", op: zktest.OpDelete, under: "/ready/t-"}},
		noCtx: true, // a clean-up on a timer
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			j := spareLoop(t, ctx, e, q)
			f.armDrop(e)
			require.NoError(t, j.Ack(ctx))
			hit := f.done(e, dropWait)
			finish(t, ctx, e, f, "the spare's withdrawal", hit)
		},
	},
	{
		// Ack: one multi that deletes the item (version-checked) and the
		// ticket (version 1: served).
		name: "ack",
		aims: []aim{aimAck},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			ackCase(t, ctx, e, f, "")
		},
	},
	{
		// Ack of an item put WithKey: the same multi deletes the key.
		name: "ack-key",
		aims: []aim{{name: "ack multi (the key's delete)", op: zktest.OpDelete, under: "/keys/"}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			ackCase(t, ctx, e, f, "k")
		},
	},
	{
		// Nack: one multi that checks the item's version, makes its node in
		// held/ and deletes the ticket; the first on a queue makes held/.
		name: "nack",
		aims: []aim{aimHeldDir, {name: "nack multi (held/ create)", op: zktest.OpCreate, under: "/held/", skip: 1}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			nackCase(t, ctx, e, f, "Nack", (*fairqueue.Job).Nack)
		},
	},
	{
		// NackAfter: as Nack, the node in held/ naming when the item is
		// free again.
		name: "nack-after",
		aims: []aim{{name: "nack multi (held/ create)", op: zktest.OpCreate, under: "/held/", skip: 1}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			nackCase(t, ctx, e, f, "NackAfter", func(j *fairqueue.Job, ctx context.Context) error {
				return j.NackAfter(ctx, 50*time.Millisecond)
			})
		},
	},
	{
		// Nack at max attempts: the item moves to the dead letters, in one
		// multi that deletes the ticket, makes the dead letter and deletes
		// the item; the first on a queue makes dead/.
		name: "bury",
		aims: []aim{
			{name: "dead/ container create", op: zktest.OpCreateContainer, under: "/dead"},
			{name: "bury multi", op: zktest.OpCreate, under: "/dead/", skip: 1},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p, fairqueue.WithMaxAttempts(1))
			ids := e.put(t, ctx, "x")
			j, err := q.Take(ctx)
			require.NoError(t, err)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			err = j.Nack(fctx)
			f.callReturned()
			settledAlone(t, "Nack at max attempts with a "+f.String(), err)
			hit := f.done(e, dropWait)
			requireBuried(t, ctx, e, f, ids[0], "x", 1)
			finish(t, ctx, e, f, "Nack at max attempts", hit)
		},
	},
	{
		// TryTake with an item pending: its ticket (kind y), its inbox's
		// read.
		name: "try-take",
		aims: []aim{
			{name: "ticket create (multi)", op: zktest.OpCreate, under: "/ready/y-"},
			aimInboxRead,
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			ids := e.put(t, ctx, "x")
			q := fq(t, e.s, e.p)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			j, err := q.TryTake(fctx)
			f.callReturned()
			hit := f.done(e, dropWait)
			want := []delivery{{ids[0], "x", 0}}
			if tookOrGaveUp(t, ctx, f, taken{j, err}, want[0], "TryTake") {
				want = nil
			}
			finish(t, ctx, e, f, "TryTake", hit, want...)
		},
	},
	{
		// TryTake on an empty queue, its reader idle: its ticket, the read
		// of the answer (nothing pending), then the ticket's delete
		// (version 0, which fails: it was served), the inbox read, and the
		// ticket's delete.
		name: "try-take-empty",
		aims: []aim{
			{name: "ticket create (multi)", op: zktest.OpCreate, under: "/ready/y-"},
			aimInboxRead,
			{name: "ticket delete (version 0)", op: zktest.OpDelete, under: "/ready/y-"},
			{name: "inbox read of the clean-up", op: zktest.OpGetData, under: "/consumers/", skip: 1},
			{name: "ticket delete", op: zktest.OpDelete, under: "/ready/y-", skip: 1},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			e.warm(t, ctx, q)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			j, err := q.TryTake(fctx)
			f.callReturned()
			require.Nil(t, j)
			if !errors.Is(err, fairqueue.ErrEmpty) {
				require.True(t, f.byCtx() && isCtxErr(err), "TryTake of an empty queue with a %v: %v", f, err)
			}
			hit := f.done(e, dropWait)
			finish(t, ctx, e, f, "TryTake", hit)
		},
	},
	{
		// A Job lost while its session lives (another client deleted its
		// ticket) gives its item back: one multi that checks the item's
		// version and makes its node in held/ (held/ exists: a lone
		// give-back that finds none makes it as the give-back scenario's
		// clean-up does).
		name:  "lost",
		aims:  []aim{{name: "give-back multi of a lost job (held/ create)", op: zktest.OpCreate, under: "/held/"}},
		noCtx: true, // a clean-up, started by the loss: no caller's ctx
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			warm := e.put(t, ctx, "warm")
			j, err := fq(t, e.other, e.p).TryTake(ctx)
			require.NoError(t, err)
			require.NoError(t, j.Nack(ctx))
			requireDrain(t, ctx, e, "warm", delivery{warm[0], "warm", 2})
			ids := e.put(t, ctx, "x")
			j, err = fq(t, e.s, e.p).Take(ctx)
			require.NoError(t, err)
			f.armDrop(e)
			require.NoError(t, deleteTicket(t, e.other, e.p, j))
			select {
			case <-j.Done():
			case <-time.After(liveWait):
				t.Fatalf("a job whose ticket was deleted is not lost")
			}
			hit := f.done(e, dropWait)
			// Until its give-back lands, the item is handed out (not
			// pending): no one waits for it, so its node stays in held/.
			require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/held")) > 0 }, liveWait, 5*time.Millisecond,
				"the lost job never gave its item back")
			// A give-back asked again once its connection is back (after
			// its 20 ms pause) must not make a second node, which no
			// offer would ever delete. Nothing offers the item meanwhile.
			require.Never(t, func() bool { return len(names(t, e.other, e.p+"/held")) > 1 }, 500*time.Millisecond, 5*time.Millisecond,
				"a second node in held/ for one give-back")
			// Handed out once, to the job lost.
			finish(t, ctx, e, f, "the lost job's give-back", hit, delivery{ids[0], "x", 2})
		},
	},
	{
		// Close of a consumer (not the dispatcher) that asked before: it
		// reads its inbox, lists ready/ for tickets of its own, and
		// deletes its inbox (version-checked). Its inbox must go, whatever
		// Close's ctx did: Close is not called again.
		name: "close",
		aims: []aim{
			{name: "inbox read", op: zktest.OpGetData, under: "/consumers/"},
			{name: "ready/ listing", op: zktest.OpGetChildren2, under: "/ready"},
			{name: "inbox delete", op: zktest.OpDelete, under: "/consumers/"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			// It takes nothing: no Job of its, settled, may remove the
			// inbox of a closed Queue instead.
			_, err := q.TryTake(ctx)
			require.ErrorIs(t, err, fairqueue.ErrEmpty)
			inbox := fairqueue.Name(q)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			err = q.Close(fctx)
			f.callReturned()
			if err != nil {
				require.True(t, f.byCtx() && isCtxErr(err), "Close with a %v: %v", f, err)
			}
			hit := f.done(e, dropWait)
			require.Eventually(t, func() bool { return !slices.Contains(names(t, e.other, e.p+"/consumers"), inbox) }, cleanWait,
				5*time.Millisecond, "the inbox of a Queue closed with a %v (Close said %v) is left", f, err)
			_, err = q.Take(ctx)
			require.ErrorIs(t, err, fairqueue.ErrClosed)
			finish(t, ctx, e, f, "Close", hit)
		},
	},
	{
		// Len: it lists items/, ready/ and consumers/, asks each bucket's
		// size (exists) and reads each inbox (the offers standing are not
		// pending). A consumer of the other session holds one item.
		name: "len",
		aims: []aim{
			{name: "items/ listing", op: zktest.OpGetChildren2, under: "/items"},
			{name: "ready/ listing", op: zktest.OpGetChildren2, under: "/ready"},
			{name: "consumers/ listing", op: zktest.OpGetChildren2, under: "/consumers"},
			{name: "bucket size (exists)", op: zktest.OpExists, under: "/items/b"},
			{name: "inbox read", op: zktest.OpGetData, under: "/consumers/"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			disp := e.elect(t, ctx, e.other)
			ids := e.put(t, ctx, "held", "a", "b")
			j, err := disp.Take(ctx)
			require.NoError(t, err)
			require.Equal(t, ids[0], j.ID())
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			n, err := fq(t, e.s, e.p).Len(fctx)
			f.callReturned()
			hit := f.done(e, dropWait)
			if readAnswered(t, "Len", f, err) {
				require.Equal(t, 2, n, "Len with a %v", f)
			}
			requireKept(t, j, "held while Len was faulted")
			require.NoError(t, j.Ack(ctx))
			finish(t, ctx, e, f, "Len", hit, delivery{ids[1], "a", 1}, delivery{ids[2], "b", 1})
		},
	},

	// The producer's requests (and the dead letters').
	{
		// The first Put on a queue no one used: it reads the high mark
		// (the queue's data) and lists items/, finds neither, makes items/
		// (a container, with the queue's node), reads again, and puts with
		// one multi that moves the mark up and makes the bucket with the
		// item.
		name: "put-first",
		aims: []aim{
			{name: "high mark read", op: zktest.OpGetData},
			{name: "items/ listing", op: zktest.OpGetChildren2, under: "/items"},
			{name: "items/ container create", op: zktest.OpCreateContainer, under: "/items"},
			{name: "new bucket multi", op: zktest.OpSetData},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			putCase(t, ctx, e, f, fq(t, e.s, e.p))
		},
	},
	{
		// A Put into a known bucket: one multi checking the bucket (not
		// sealed) and the high mark, creating the item.
		name: "put",
		aims: []aim{aimPut},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			_, err := q.Put(ctx, []byte("first"))
			require.NoError(t, err)
			require.Len(t, drainAll(t, ctx, e), 1)
			putCase(t, ctx, e, f, q)
		},
	},
	{
		// The Put whose item fills its bucket seals it (setData): the next
		// Put makes the next bucket.
		name: "put-seal",
		aims: []aim{{name: "seal", op: zktest.OpSetData, under: "/items/b"}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p, fairqueue.WithBucketSize(2))
			a, err := q.Put(ctx, []byte("a"))
			require.NoError(t, err)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			b, err := q.Put(fctx, []byte("b"))
			f.callReturned()
			hit := f.done(e, dropWait)
			requireWriteOutcome(t, e, "Put", f, err)
			c, cerr := q.Put(ctx, []byte("c"))
			require.NoError(t, cerr)
			want := []delivery{{a, "a", 1}, {c, "c", 1}}
			if err == nil {
				want = append(want, delivery{b, "b", 1})
			} else {
				want = append(want, leftBesides(t, ctx, e, want)...)
			}
			finish(t, ctx, e, f, "Put", hit, want...)
		},
	},
	{
		// PutMany into a known bucket: one multi, all or none.
		name: "put-many",
		aims: []aim{aimPut},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			_, err := q.Put(ctx, []byte("first"))
			require.NoError(t, err)
			drainAll(t, ctx, e)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			ids, err := q.PutMany(fctx, [][]byte{[]byte("a"), []byte("b")})
			f.callReturned()
			hit := f.done(e, dropWait)
			requireWriteOutcome(t, e, "PutMany", f, err)
			var want []delivery
			if err == nil {
				want = []delivery{{ids[0], "a", 1}, {ids[1], "b", 1}}
			} else if left := leftBesides(t, ctx, e, nil); len(left) > 0 {
				require.Len(t, left, 2, "PutMany is all or none: %v", left)
				want = left
			}
			finish(t, ctx, e, f, "PutMany", hit, want...)
		},
	},
	{
		// Put WithKey: its multi makes keys/<key> too (keys/ made first on
		// a queue that never had one). After an unknown outcome, the same
		// Put again adds nothing if the first landed.
		name: "put-key",
		aims: []aim{
			{name: "keys/ container create", op: zktest.OpCreateContainer, under: "/keys"},
			{name: "put multi (the key's create)", op: zktest.OpCreate, under: "/keys/", skip: 1},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			q := fq(t, e.s, e.p)
			_, err := q.Put(ctx, []byte("first"))
			require.NoError(t, err)
			drainAll(t, ctx, e)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			id, err := q.Put(fctx, []byte("x"), fairqueue.WithKey("k"))
			f.callReturned()
			hit := f.done(e, dropWait)
			requireWriteOutcome(t, e, "Put WithKey", f, err)
			again, aerr := q.Put(ctx, []byte("x"), fairqueue.WithKey("k"))
			require.NoError(t, aerr)
			if err == nil {
				require.Equal(t, id, again, "a Put again with the key of an item pending")
			}
			finish(t, ctx, e, f, "Put WithKey", hit, delivery{again, "x", 1})
		},
	},
	{
		// Put WithKey while an item with that key is pending: its multi
		// fails (the key exists), and it finds that item: it reads
		// keys/<key> (the bucket) and lists the bucket.
		name: "put-key-taken",
		aims: []aim{
			{name: "key read", op: zktest.OpGetData, under: "/keys/"},
			{name: "bucket listing", op: zktest.OpGetChildren2, under: "/items/b"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			first, err := fq(t, e.other, e.p).Put(ctx, []byte("x"), fairqueue.WithKey("k"))
			require.NoError(t, err)
			q := fq(t, e.s, e.p)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			id, err := q.Put(fctx, []byte("x"), fairqueue.WithKey("k"))
			f.callReturned()
			hit := f.done(e, dropWait)
			if readAnswered(t, "Put WithKey of a key taken", f, err) {
				require.Equal(t, first, id)
			}
			finish(t, ctx, e, f, "Put WithKey", hit, delivery{first, "x", 1})
		},
	},
	{
		// Put WithDelay: one multi making the entry in delayed/ (made
		// first on a queue that never had one). Once due, the dispatcher
		// moves it into the queue.
		name: "put-delayed",
		aims: []aim{
			{name: "delayed/ container create", op: zktest.OpCreateContainer, under: "/delayed"},
			{name: "put multi (delayed/ create)", op: zktest.OpCreate, under: "/delayed/", skip: 1},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			e.elect(t, ctx, e.other)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			_, err := fq(t, e.s, e.p).Put(fctx, []byte("x"), fairqueue.WithDelay(30*time.Millisecond))
			f.callReturned()
			hit := f.done(e, dropWait)
			requireWriteOutcome(t, e, "Put WithDelay", f, err)
			time.Sleep(30 * time.Millisecond) // due: drainAll waits for delayed/ to empty
			got := drainAll(t, ctx, e)
			if err == nil || len(got) > 0 {
				require.Len(t, got, 1, "items after a Put WithDelay (err %v) with a %v: %v", err, f, got)
				require.Equal(t, "x", got[0].data)
				require.Equal(t, 1, got[0].attempt)
			}
			finish(t, ctx, e, f, "Put WithDelay", hit)
		},
	},
	{
		// Requeue: it reads the dead letter, and puts it back with a multi
		// that deletes it: the item is back and the dead letter gone, or
		// neither.
		name: "requeue",
		aims: []aim{
			{name: "dead letter read", op: zktest.OpGetData, under: "/dead/"},
			{name: "requeue multi", op: zktest.OpDelete, under: "/dead/"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			id := deadLetter(t, ctx, e)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			newID, err := fq(t, e.s, e.p).Requeue(fctx, id)
			f.callReturned()
			hit := f.done(e, dropWait)
			requireWriteOutcome(t, e, "Requeue", f, err)
			dead, derr := fq(t, e.other, e.p).DeadLetters(ctx)
			require.NoError(t, derr)
			switch {
			case err == nil:
				require.Empty(t, dead, "the dead letter left after a Requeue with a %v", f)
				finish(t, ctx, e, f, "Requeue", hit, delivery{newID, "x", 1})
			case len(dead) == 0:
				left := leftBesides(t, ctx, e, nil)
				require.Len(t, left, 1, "the dead letter gone, and its item requeued once, after a Requeue (err %v) with a %v", err, f)
				finish(t, ctx, e, f, "Requeue", hit, left...)
			default:
				require.Empty(t, leftBesides(t, ctx, e, nil), "an item requeued while its dead letter stays, with a %v", f)
				newID, err = fq(t, e.other, e.p).Requeue(ctx, id)
				require.NoError(t, err)
				finish(t, ctx, e, f, "Requeue", hit, delivery{newID, "x", 1})
			}
		},
	},
	{
		// DeadLetters: it lists dead/ and reads each.
		name: "dead-letters",
		aims: []aim{
			{name: "dead/ listing", op: zktest.OpGetChildren2, under: "/dead"},
			{name: "dead letter read", op: zktest.OpGetData, under: "/dead/"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			id := deadLetter(t, ctx, e)
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			dead, err := fq(t, e.s, e.p).DeadLetters(fctx)
			f.callReturned()
			hit := f.done(e, dropWait)
			if readAnswered(t, "DeadLetters", f, err) {
				require.Equal(t, []fairqueue.DeadLetter{{ID: id, Data: []byte("x"), Attempts: 1}}, dead, "DeadLetters with a %v", f)
			}
			newID, err := fq(t, e.other, e.p).Requeue(ctx, id)
			require.NoError(t, err)
			finish(t, ctx, e, f, "DeadLetters", hit, delivery{newID, "x", 1})
		},
	},

	// Work's requests.
	{
		// Work's ticket for its handlers and the items held ahead: one
		// multi (in the acks' group).
		name:  "work-start",
		aims:  []aim{{name: "ticket create (multi)", op: zktest.OpCreate, under: "/ready/w-"}},
		noCtx: true, // Work's ctx: see work
		run:   func(t *testing.T, ctx context.Context, e env, f *fault) { workCase(t, ctx, e, f, true) },
	},
	{
		// Work, one handler, nothing held ahead: it does a job and acks it,
		// putting its next ticket in line in the same multi; then it does a
		// second job, from that ticket. A ctx fault ends Work's ctx that
		// long after the first job's handler returned.
		name:  "work",
		aims:  []aim{{name: "ack multi with the next ticket's create", op: zktest.OpCreate, under: "/ready/w-"}},
		waits: true,
		run:   func(t *testing.T, ctx context.Context, e env, f *fault) { workCase(t, ctx, e, f, false) },
	},
	{
		// Work, two handlers, nothing held ahead: a lot is two jobs. Both
		// handlers end their jobs together; their acks and one ticket for
		// two items go in one multi (or two, as the acks' group takes
		// them). Then it does two jobs put later. A ctx fault ends Work's
		// ctx that long after the handlers returned.
		name: "work-lot",
		aims: []aim{
			{name: "ack multi of a lot (an item's delete)", op: zktest.OpDelete, under: "/items/b"},
			{name: "ack multi of a lot (the ticket's create)", op: zktest.OpCreate, under: "/ready/w-"},
		},
		waits: true,
		run:   workLotCase,
	},
	{
		// Work with an item held ahead: its ticket, for two items, is
		// served with both; the handler gives the first back with Nack
		// (one multi: the item's check, its node in held/; the ticket
		// stays, for the other job).
		name: "work-nack",
		aims: []aim{{name: "nack multi of a job sharing its ticket", op: zktest.OpCreate, under: "/held/"}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			workNackCase(t, ctx, e, f, false)
		},
	},
	{
		// As work-nack, at max attempts: the first job moves to the dead
		// letters (one multi: the dead letter, the item's delete; the
		// ticket stays, for the other job).
		name: "work-bury",
		aims: []aim{{name: "bury multi of a job sharing its ticket", op: zktest.OpCreate, under: "/dead/"}},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			workNackCase(t, ctx, e, f, true)
		},
	},

	// The dispatcher's requests, on the dispatcher's session: a Queue of
	// the faulted session, elected first. The consumers are Queues of the
	// other session.
	{
		// The dispatcher's election on a queue with nothing in it: its
		// rebuild reads the high mark, and watches for held/, delayed/ and
		// items/ to be made.
		name: "elect",
		aims: []aim{
			{name: "rebuild: high mark read", op: zktest.OpGetData, under: "/items"},
			{name: "rebuild: items/ creation watch", op: zktest.OpExists, under: "/items", watch: true},
			{name: "rebuild: held/ creation watch", op: zktest.OpExists, under: "/held", watch: true},
			{name: "rebuild: delayed/ creation watch", op: zktest.OpExists, under: "/delayed", watch: true},
		},
		noCtx: true, // the dispatcher's ctx: see dispatch and rebuild
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			f.armDrop(e)
			d := e.elect(t, ctx, e.s)
			node, _ := e.leader(t)
			hit := f.done(e, dropWait)
			ids := e.put(t, ctx, "x")
			j, err := fq(t, e.other, e.p).Take(ctx)
			require.NoError(t, err)
			require.Equal(t, delivery{ids[0], "x", 1}, delivery{j.ID(), string(j.Data()), j.Attempt()})
			require.NoError(t, j.Ack(ctx))
			e.requireLeads(t, d, node, f)
			finish(t, ctx, e, f, "the dispatcher", hit)
		},
	},
	{
		// A running dispatcher serves a consumer that comes (its inbox: a
		// consumers/ listing; its ticket: a ready/ listing) and an item put
		// (the first bucket: an items/ listing, the bucket's listing, and
		// the hand-out multi: the election node's check, the ticket's
		// mark, the inbox, the high mark; the item is not read ahead, as a
		// ticket waits for it). A ctx fault closes the dispatcher's Queue
		// that long after the item is put: the consumer's own Queue, next
		// in the election, takes over.
		name: "dispatch",
		aims: []aim{aimListConsumers, aimListReady, aimListItems, aimListBucket, aimHandOut},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			dispatchCase(t, ctx, e, f, true, "x")
		},
	},
	{
		// Failover: a dispatcher (of the other session) closes, and the
		// faulted session's Queue, next in the election, rebuilds its view:
		// the high mark, the listings of ready/, consumers/, held/,
		// delayed/ and items/, every inbox, then the oldest bucket. The
		// queue holds an item a consumer holds (an offer standing), one
		// given back for a while (held/), one free, one delayed. A ctx
		// fault closes the new dispatcher's Queue that long after the old
		// one closed: before, during or after its rebuild.
		name: "rebuild",
		aims: []aim{
			{name: "rebuild: high mark read", op: zktest.OpGetData, under: "/items"},
			aimListReady, aimListConsumers, aimListHeld, aimListDelayed, aimListItems,
			{name: "rebuild: inbox read", op: zktest.OpGetData, under: "/consumers/"},
			aimListBucket,
		},
		run: rebuildCase,
	},
	{
		// The dispatcher reads ahead, to carry them in its offers, the
		// items of a PutMany that no ticket waiting will take: one read of
		// their blob.
		name: "dispatch-blob",
		aims: []aim{aimBlobRead},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			dispatchCase(t, ctx, e, f, false, tooLargeForAName("a"), tooLargeForAName("b"))
		},
	},
	{
		// A consumer's session ends while it holds an item: the dispatcher
		// sees its inbox and ticket gone (consumers/ and ready/ listings),
		// looks at held/, reads the item to learn it is still there, and
		// offers it again to a consumer waiting (the hand-out multi bumps
		// its version).
		name:  "limbo",
		aims:  []aim{aimListConsumers, aimListReady, aimListHeld, aimItemRead, aimBump},
		noCtx: true,
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			limboCase(t, ctx, e, f, false, false)
		},
	},
	{
		// As limbo, the item one of a PutMany: the dispatcher reads the
		// item for its version, and its blob for its payload.
		name:  "limbo-blob",
		aims:  []aim{aimItemRead, aimBlobRead},
		noCtx: true,
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			limboCase(t, ctx, e, f, false, true)
		},
	},
	{
		// As limbo, the item at max attempts: the dispatcher moves it to the
		// dead letters in its hand-out multi (the dead letter, the item's
		// delete); finding no dead/, it makes it first.
		name: "limbo-bury",
		aims: []aim{
			{name: "dead/ container create", op: zktest.OpCreateContainer, under: "/dead"},
			{name: "hand-out multi burying an item", op: zktest.OpCreate, under: "/dead/", skip: 1},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			limboCase(t, ctx, e, f, true, false)
		},
	},
	{
		// As limbo-bury, the item one of a PutMany: the dead letter holds
		// its payload, read from the blob.
		name: "limbo-bury-blob",
		aims: []aim{aimItemRead, aimBlobRead},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			limboCase(t, ctx, e, f, true, true)
		},
	},
	{
		// A consumer gives an item back (Nack): the dispatcher lists held/,
		// reads the item (its offer bumps its version, which needs its
		// data), and offers it again with a multi that bumps it and
		// deletes its node in held/.
		name:  "again",
		aims:  []aim{aimListHeld, aimItemRead, aimBump, {name: "hand-out multi (held/ delete)", op: zktest.OpDelete, under: "/held/"}},
		noCtx: true,
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			d := e.elect(t, ctx, e.s)
			node, _ := e.leader(t)
			ids := e.put(t, ctx, "x")
			c := fq(t, e.other, e.p)
			j, err := c.Take(ctx)
			require.NoError(t, err)
			w := fq(t, e.other, e.p)
			got := goTake(ctx, w)
			e.waitTicket(t, w, 1)
			f.armDrop(e)
			require.NoError(t, j.Nack(ctx))
			r := recv(t, got, "the waiting Take")
			require.NoError(t, r.err)
			require.Equal(t, delivery{ids[0], "x", 2}, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()}, "with a %v", f)
			requireKept(t, r.j, "taken with a "+f.String())
			hit := f.done(e, dropWait)
			e.requireLeads(t, d, node, f)
			require.NoError(t, r.j.Ack(ctx))
			finish(t, ctx, e, f, "the dispatcher", hit)
		},
	},
	{
		// A delayed item comes due while a consumer waits: the dispatcher
		// lists delayed/, then moves the item into the queue (it reads the
		// entry, and puts it with a multi that deletes the entry). A ctx
		// fault closes the dispatcher's Queue that long after the put:
		// before, during or after the move; the waiting consumer's Queue,
		// next in the election, takes over.
		name: "promote",
		aims: []aim{
			aimListDelayed,
			{name: "delayed entry read", op: zktest.OpGetData, under: "/delayed/"},
			{name: "promote multi", op: zktest.OpDelete, under: "/delayed/"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			d := e.elect(t, ctx, e.s)
			node, _ := e.leader(t)
			w := fq(t, e.other, e.p)
			got := goTake(ctx, w)
			e.waitTicket(t, w, 1)
			f.armDrop(e)
			_, err := fq(t, e.other, e.p).Put(ctx, []byte("y"), fairqueue.WithDelay(10*time.Millisecond))
			require.NoError(t, err)
			var r taken
			if f.byCtx() {
				r = endAfter(t, f, func() { require.NoError(t, d.Close(ctx)) }, got)
			} else {
				r = recv(t, got, "the waiting Take")
			}
			require.NoError(t, r.err)
			require.Equal(t, "y", string(r.j.Data()))
			require.Equal(t, 1, r.j.Attempt())
			requireKept(t, r.j, "taken with a "+f.String())
			hit := f.done(e, dropWait)
			if !f.byCtx() {
				e.requireLeads(t, d, node, f)
			}
			require.NoError(t, r.j.Ack(ctx))
			finish(t, ctx, e, f, "the dispatcher", hit)
		},
	},
	{
		// The dispatcher deletes a drained bucket once a newer one exists,
		// and the newest once drained while no one waits. A ctx fault
		// closes the dispatcher's Queue that long after the takes begin:
		// the taking consumer's Queue takes over, and deletes what is
		// left drained.
		name: "bucket-delete",
		aims: []aim{
			{name: "drained bucket delete", op: zktest.OpDelete, under: "/items/b"},
			{name: "drained newest bucket delete", op: zktest.OpDelete, under: "/items/b", skip: 1},
			{name: "drained bucket's blob directory listing", op: zktest.OpGetChildren2, under: "/items/p"},
			{name: "drained bucket's blob directory delete (its multi)", op: zktest.OpDelete, under: "/items/p"},
		},
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			d := e.elect(t, ctx, e.s)
			node, _ := e.leader(t)
			p := fq(t, e.other, e.p, fairqueue.WithBucketSize(2))
			var ids []string
			for _, x := range []string{"a", "b", "c"} {
				id, err := p.Put(ctx, []byte(x))
				require.NoError(t, err)
				ids = append(ids, id)
			}
			require.NotEqual(t, ids[0][:10], ids[2][:10], "two buckets")
			f.armDrop(e)
			w := fq(t, e.other, e.p)
			var acked atomic.Bool
			wait := closeAfter(t, ctx, f, d, acked.Load)
			for i, x := range []string{"a", "b", "c"} {
				j, err := w.TryTake(ctx)
				require.NoError(t, err)
				require.Equal(t, delivery{ids[i], x, 1}, delivery{j.ID(), string(j.Data()), j.Attempt()})
				require.NoError(t, j.Ack(ctx))
			}
			acked.Store(true)
			wait()
			hit := f.done(e, dropWait)
			if !f.byCtx() {
				e.requireLeads(t, d, node, f)
			}
			finish(t, ctx, e, f, "the dispatcher", hit)
		},
	},
	{
		// A TryTake of an empty queue: the dispatcher's hand-out multi
		// answers that nothing is pending.
		name:  "told-empty",
		aims:  []aim{{name: "hand-out multi telling a TryTake nothing is pending", op: zktest.OpSetData, under: "/ready/y-"}},
		noCtx: true,
		run: func(t *testing.T, ctx context.Context, e env, f *fault) {
			d := e.elect(t, ctx, e.s)
			node, _ := e.leader(t)
			f.armDrop(e)
			tctx, cancel := context.WithTimeout(ctx, liveWait)
			defer cancel()
			_, err := fq(t, e.other, e.p).TryTake(tctx)
			require.ErrorIs(t, err, fairqueue.ErrEmpty)
			hit := f.done(e, dropWait)
			e.requireLeads(t, d, node, f)
			finish(t, ctx, e, f, "the dispatcher", hit)
		},
	},
}

// tookOrGaveUp checks what a Take or TryTake of the one item want (put
// before) returned under the fault f: the item, as a first delivery, kept
// and then acked (true); or, with a ctx fault only, ctx's error, leaving
// the item to the queue (false).
func tookOrGaveUp(t *testing.T, ctx context.Context, f *fault, r taken, want delivery, what string) bool {
	t.Helper()
	if r.err != nil {
		require.True(t, f.byCtx() && isCtxErr(r.err), "%s with a %v: %v", what, f, r.err)
		require.Nil(t, r.j)
		return false
	}
	want.attempt = 1
	require.Equal(t, want, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()}, "%s with a %v", what, f)
	requireKept(t, r.j, what+" with a "+f.String())
	settle(t, ctx, "Ack", r.j.Ack(ctx), r.j.Ack)
	return true
}

// takeCase takes the one pending item want with a Take of q under the
// fault.
func takeCase(t *testing.T, ctx context.Context, e env, f *fault, q *fairqueue.Queue, want delivery) {
	t.Helper()
	fctx, cancel := f.opCtx(e, ctx)
	defer cancel()
	j, err := q.Take(fctx)
	f.callReturned()
	hit := f.done(e, dropWait) // the job's look at its ticket comes 100 ms after Take returns
	if tookOrGaveUp(t, ctx, f, taken{j, err}, want, "Take") {
		finish(t, ctx, e, f, "Take", hit)
		return
	}
	finish(t, ctx, e, f, "Take", hit, want)
}

// putCase puts "x" with q under the fault: it is there once if Put said
// so, at most once if it said the outcome is unknown.
func putCase(t *testing.T, ctx context.Context, e env, f *fault, q *fairqueue.Queue) {
	t.Helper()
	fctx, cancel := f.opCtx(e, ctx)
	defer cancel()
	id, err := q.Put(fctx, []byte("x"))
	f.callReturned()
	hit := f.done(e, dropWait)
	requireWriteOutcome(t, e, "Put", f, err)
	if err == nil {
		finish(t, ctx, e, f, "Put", hit, delivery{id, "x", 1})
		return
	}
	// The next Put of q goes out once the batch that carried "x" is done.
	y, err := q.Put(ctx, []byte("y"))
	require.NoError(t, err)
	known := []delivery{{y, "y", 1}}
	left := leftBesides(t, ctx, e, known)
	require.LessOrEqual(t, len(left), 1, "a Put whose outcome is unknown put %v", left)
	finish(t, ctx, e, f, "Put", hit, append(left, known...)...)
}

// leftBesides returns the items pending besides known ones (as first
// deliveries), the queue's dispatcher being of the other session:
// whatever a write with an unknown outcome put.
func leftBesides(t *testing.T, ctx context.Context, e env, known []delivery) []delivery {
	t.Helper()
	var out []delivery
	for _, b := range names(t, e.other, e.p+"/items") {
		if !strings.HasPrefix(b, "b") {
			continue // a bucket's blobs
		}
		for _, n := range names(t, e.other, e.p+"/items/"+b) {
			id := b[1:] + "-" + n[len(n)-10:]
			if slices.ContainsFunc(known, func(d delivery) bool { return d.id == id }) {
				continue
			}
			data, err := fairqueue.ItemData(e.p+"/items", b, n, func(p string) ([]byte, error) {
				data, _, err := e.other.Conn().Get(p)
				return data, err
			})
			require.NoError(t, err)
			out = append(out, delivery{id, string(data), 1})
		}
	}
	return out
}

// ackCase takes "x" (put with key, when given) on the faulted session and
// acks it under the fault: the item is gone for good, with its key.
func ackCase(t *testing.T, ctx context.Context, e env, f *fault, key string) {
	t.Helper()
	e.elect(t, ctx, e.other)
	q := fq(t, e.s, e.p)
	var opts []fairqueue.PutOption
	if key != "" {
		opts = append(opts, fairqueue.WithKey(key))
	}
	_, err := fq(t, e.other, e.p).Put(ctx, []byte("x"), opts...)
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	fctx, cancel := f.opCtx(e, ctx)
	defer cancel()
	err = j.Ack(fctx)
	f.callReturned()
	settledAlone(t, "Ack with a "+f.String(), err)
	hit := f.done(e, dropWait)
	require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/ready")) == 0 }, cleanWait, 5*time.Millisecond,
		"the ack asked for never happened")
	finish(t, ctx, e, f, "Ack", hit)
	if key != "" {
		id, err := fq(t, e.other, e.p).Put(ctx, []byte("y"), opts...)
		require.NoError(t, err)
		finish(t, ctx, e, f, "Ack", hit, delivery{id, "y", 1})
	}
}

// nackCase takes "x" on the faulted session and gives it back with nack
// under the fault: it comes back, as its second delivery, whatever the call
// said, and nothing of the first delivery stays.
func nackCase(t *testing.T, ctx context.Context, e env, f *fault, what string, nack func(*fairqueue.Job, context.Context) error) {
	t.Helper()
	e.elect(t, ctx, e.other)
	ids := e.put(t, ctx, "x")
	j, err := fq(t, e.s, e.p).Take(ctx)
	require.NoError(t, err)
	fctx, cancel := f.opCtx(e, ctx)
	defer cancel()
	err = nack(j, fctx)
	f.callReturned()
	settledAlone(t, what+" with a "+f.String(), err)
	hit := f.done(e, dropWait)
	finish(t, ctx, e, f, what, hit, delivery{ids[0], "x", 2})
}

// requireBuried waits for the item to be the one dead letter, with its
// attempts, and requeues it: the queue is empty but for the requeued item,
// which finish then drains.
func requireBuried(t *testing.T, ctx context.Context, e env, f *fault, id, data string, attempts int) {
	t.Helper()
	q := fq(t, e.other, e.p)
	dead := deadLetters(t, ctx, q, cleanWait, "no dead letter after a %v", f)
	require.Equal(t, []fairqueue.DeadLetter{{ID: id, Data: []byte(data), Attempts: attempts}}, dead, "with a %v", f)
	requireDrain(t, ctx, e, "a dead letter was delivered, with a "+f.String())
	newID, err := q.Requeue(ctx, id)
	require.NoError(t, err)
	requireDrain(t, ctx, e, "the requeued item", delivery{newID, data, 1})
}

// deadLetter makes a dead letter "x" (delivered once, at most once) through
// the other session, and returns its id. The other session's Queue is the
// dispatcher.
func deadLetter(t *testing.T, ctx context.Context, e env) string {
	t.Helper()
	q := e.elect(t, ctx, e.other, fairqueue.WithMaxAttempts(1))
	id, err := q.Put(ctx, []byte("x"))
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	return id
}

// spareLoop runs a loop of Takes on q (of items put on the way) until the
// Queue makes spares, and returns the job in hand: its Ack puts a spare in
// line. A loaded machine may keep a Take from following its Ack at once: it
// tries again.
func spareLoop(t *testing.T, ctx context.Context, e env, q *fairqueue.Queue) *fairqueue.Job {
	t.Helper()
	for range 50 {
		e.put(t, ctx, "w")
		j, err := q.Take(ctx)
		require.NoError(t, err)
		if fairqueue.SpareLoop(q) {
			return j
		}
		require.NoError(t, j.Ack(ctx))
	}
	t.Fatal("a loop of Takes never made spares")
	return nil
}

// workCase runs Work, one handler and nothing held ahead, on the faulted
// session: it does "first", then "second", put later. With start, the drop
// is armed before Work starts (its first ticket); else in the handler of
// "first", before its ack. A ctx fault ends Work's ctx that long after the
// first handler returned.
func workCase(t *testing.T, ctx context.Context, e env, f *fault, start bool) {
	t.Helper()
	e.elect(t, ctx, e.other)
	q := fq(t, e.s, e.p)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan delivery, 4)
	stopped := make(chan error, 1)
	if start {
		f.armDrop(e)
	}
	go func() {
		stopped <- q.Work(wctx, func(_ context.Context, j *fairqueue.Job) error {
			if string(j.Data()) == "first" && !start {
				f.armDrop(e) // for the ack that follows
			}
			done <- delivery{j.ID(), string(j.Data()), j.Attempt()}
			return nil
		}, fairqueue.WithPrefetch(0))
	}()
	ids := e.put(t, ctx, "first")
	require.Equal(t, delivery{ids[0], "first", 1}, recv(t, done, "the first job"))
	if f.byCtx() {
		stopWorkAtCtxEnd(t, ctx, e, f, cancel, stopped)
		return
	}
	hit := f.done(e, dropWait)
	ids = e.put(t, ctx, "second")
	require.Equal(t, delivery{ids[0], "second", 1}, recv(t, done, "the second job, after a "+f.String()))
	cancel()
	require.ErrorIs(t, recv(t, stopped, "Work"), context.Canceled)
	finish(t, ctx, e, f, "Work", hit)
}

// stopWorkAtCtxEnd is a Work case's ctx fault: Work's ctx ends f.end from
// now (Work returns only once it has), and the queue is left as it should.
func stopWorkAtCtxEnd(t *testing.T, ctx context.Context, e env, f *fault, cancel context.CancelFunc, stopped <-chan error) {
	t.Helper()
	time.Sleep(f.end)
	f.record(false)
	cancel()
	require.ErrorIs(t, recv(t, stopped, "Work"), context.Canceled)
	finish(t, ctx, e, f, "Work", true)
}

// workLotCase runs Work, two handlers and nothing held ahead, on the
// faulted session: its first ticket, for two, gets "a" and "b", whose
// handlers return together (the drop armed just before); then "c" and "d",
// put later, are done too, each as a first delivery.
func workLotCase(t *testing.T, ctx context.Context, e env, f *fault) {
	t.Helper()
	e.elect(t, ctx, e.other)
	ids := e.put(t, ctx, "a", "b")
	q := fq(t, e.s, e.p)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan delivery, 4)
	stopped := make(chan error, 1)
	var both sync.WaitGroup
	both.Add(2)
	go func() {
		stopped <- q.Work(wctx, func(_ context.Context, j *fairqueue.Job) error {
			if d := string(j.Data()); d == "a" || d == "b" {
				both.Done()
				both.Wait()
				if d == "a" {
					f.armDrop(e) // for the lot's ack
				}
			}
			done <- delivery{j.ID(), string(j.Data()), j.Attempt()}
			return nil
		}, fairqueue.WithHandlers(2), fairqueue.WithPrefetch(0))
	}()
	got := map[string]delivery{}
	for range 2 {
		d := recv(t, done, "the jobs of the first lot")
		got[d.data] = d
	}
	require.Equal(t, map[string]delivery{"a": {ids[0], "a", 1}, "b": {ids[1], "b", 1}}, got)
	if f.byCtx() {
		stopWorkAtCtxEnd(t, ctx, e, f, cancel, stopped)
		return
	}
	hit := f.done(e, dropWait)
	ids = e.put(t, ctx, "c", "d")
	for range 2 {
		d := recv(t, done, "the jobs put later, after a "+f.String())
		got[d.data] = d
	}
	require.Equal(t, delivery{ids[0], "c", 1}, got["c"], "after a %v", f)
	require.Equal(t, delivery{ids[1], "d", 1}, got["d"], "after a %v", f)
	cancel()
	require.ErrorIs(t, recv(t, stopped, "Work"), context.Canceled)
	finish(t, ctx, e, f, "Work", hit)
}

// workNackCase runs Work, one handler and one item held ahead, on a queue
// holding "a" and "b": its ticket, for two, gets both. The handler gives
// "a" back on its first delivery with Nack under the fault (with bury,
// at max attempts: to the dead letters), then returns an error (Work's own
// Nack then changes nothing); it does everything else. A ctx fault is the
// Nack's.
func workNackCase(t *testing.T, ctx context.Context, e env, f *fault, bury bool) {
	t.Helper()
	opts := []fairqueue.Option{}
	if bury {
		opts = append(opts, fairqueue.WithMaxAttempts(1))
	}
	disp := e.elect(t, ctx, e.other, opts...)
	// held/ or dead/ exist from now on: the faults aim at the multi that
	// settles the job.
	warm := e.put(t, ctx, "warm")
	j, err := disp.TryTake(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	if bury {
		_, err = disp.Requeue(ctx, warm[0])
		require.NoError(t, err)
	}
	require.Len(t, drainAll(t, ctx, e), 1)

	ids := e.put(t, ctx, "a", "b")
	q := fq(t, e.s, e.p, opts...)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var got []delivery
	tickets := map[string]string{}
	nacked := make(chan error, 1)
	stopped := make(chan error, 1)
	go func() {
		stopped <- q.Work(wctx, func(_ context.Context, j *fairqueue.Job) error {
			mu.Lock()
			got = append(got, delivery{j.ID(), string(j.Data()), j.Attempt()})
			if j.Attempt() == 1 {
				tickets[string(j.Data())] = fairqueue.TicketOf(j)
			}
			mu.Unlock()
			if string(j.Data()) != "a" || j.Attempt() > 1 {
				return nil
			}
			fctx, cancel := f.opCtx(e, ctx)
			defer cancel()
			err := j.Nack(fctx)
			f.callReturned()
			nacked <- err
			return errors.New("given back")
		}, fairqueue.WithPrefetch(1), fairqueue.WithBackoff(0, 0))
	}()
	settledAlone(t, "Nack with a "+f.String(), recv(t, nacked, "the handler's Nack"))
	hit := f.done(e, dropWait)
	// b, held ahead, runs before a comes back.
	want := []delivery{{ids[0], "a", 1}, {ids[1], "b", 1}, {ids[0], "a", 2}}
	if bury {
		want = []delivery{{ids[0], "a", 1}, {ids[1], "b", 1}}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	}, liveWait, time.Millisecond, "the jobs done")
	cancel()
	require.ErrorIs(t, recv(t, stopped, "Work"), context.Canceled)
	mu.Lock()
	require.Equal(t, want, got, "the jobs Work did, with a %v", f)
	require.Equal(t, tickets["a"], tickets["b"], "a and b were handed out on one ticket")
	mu.Unlock()
	if bury {
		requireBuried(t, ctx, e, f, ids[0], "a", 1)
	}
	finish(t, ctx, e, f, "Nack", hit)
}

// rebuildCase: see the scenario "rebuild". Once the old dispatcher has
// stopped, a consumer comes, and gets an item from the new one: the free
// one, unless the failover took long enough for another to be free too.
func rebuildCase(t *testing.T, ctx context.Context, e env, f *fault) {
	old := e.elect(t, ctx, e.other)
	d := fq(t, e.s, e.p)
	_, err := d.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/dispatch")) == 2 }, liveWait, time.Millisecond,
		"the faulted session's Queue stands second")
	ids := e.put(t, ctx, "held", "nacked", "free")
	_, err = fq(t, e.other, e.p).Put(ctx, []byte("delayed"), fairqueue.WithDelay(200*time.Millisecond))
	require.NoError(t, err)
	c := fq(t, e.other, e.p)
	held, err := c.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[0], held.ID())
	nacked, err := c.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[1], nacked.ID())
	require.NoError(t, nacked.NackAfter(ctx, 100*time.Millisecond))

	f.armDrop(e)
	require.NoError(t, old.Close(ctx))
	w := fq(t, e.other, e.p)
	got := goTake(ctx, w)
	var r taken
	if f.byCtx() {
		r = endAfter(t, f, func() { require.NoError(t, d.Close(ctx)) }, got)
	} else {
		r = recv(t, got, "the Take after the failover")
	}
	require.NoError(t, r.err)
	// The free item; or, if the failover (a reconnect on the way) outlasted
	// the NackAfter or the delay, the item given back (its second delivery)
	// or the delayed one may come first.
	first := delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()}
	left := []delivery{{ids[1], "nacked", 2}, {ids[2], "free", 1}}
	if first.data == "delayed" {
		require.Equal(t, 1, first.attempt, "the delayed item, with a %v", f)
		require.Greater(t, first.id, ids[2], "the delayed item, with a %v", f)
	} else {
		require.Contains(t, left, first, "with a %v", f)
		left = slices.DeleteFunc(left, func(d delivery) bool { return d == first })
	}
	hit := f.done(e, dropWait)
	requireKept(t, held, "held across the failover with a "+f.String())
	requireKept(t, r.j, "taken with a "+f.String())
	if !f.byCtx() {
		_, who := e.leader(t)
		require.Equal(t, fairqueue.Name(d), who, "the dispatcher after a %v", f)
	}
	require.NoError(t, held.Ack(ctx), "the Ack of a job held across the failover, with a %v", f)
	require.NoError(t, r.j.Ack(ctx))
	if first.data != "delayed" {
		left = append(left, leftDelayed(t, ctx, e))
	}
	finish(t, ctx, e, f, "the dispatcher's rebuild", hit, left...)
}

// dispatchCase: the faulted session's Queue dispatches, a consumer of the
// other session takes the first of items (put once its ticket waits, with
// waiting; else put first) and acks it, the others are left. A ctx fault
// closes the dispatcher's Queue that long after the put: the consumer's
// own Queue, next in the election, takes over.
func dispatchCase(t *testing.T, ctx context.Context, e env, f *fault, waiting bool, items ...string) {
	d := e.elect(t, ctx, e.s)
	node, _ := e.leader(t)
	f.armDrop(e)
	c := fq(t, e.other, e.p)
	var ids []string
	var got <-chan taken
	if waiting {
		got = goTake(ctx, c)
		e.waitTicket(t, c, 1)
		ids = e.put(t, ctx, items...)
	} else {
		ids = e.put(t, ctx, items...)
		got = goTake(ctx, c)
	}
	var r taken
	if f.byCtx() {
		r = endAfter(t, f, func() { require.NoError(t, d.Close(ctx)) }, got)
	} else {
		r = recv(t, got, "the Take")
	}
	require.NoError(t, r.err)
	require.Equal(t, delivery{ids[0], items[0], 1}, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()}, "with a %v", f)
	requireKept(t, r.j, "taken with a "+f.String())
	hit := f.done(e, dropWait)
	if !f.byCtx() {
		e.requireLeads(t, d, node, f)
	}
	require.NoError(t, r.j.Ack(ctx))
	var left []delivery
	for i, data := range items[1:] {
		left = append(left, delivery{ids[i+1], data, 0})
	}
	finish(t, ctx, e, f, "the dispatcher", hit, left...)
}

// leftDelayed waits for the item put WithDelay to come into the queue and
// returns it, as a first delivery.
func leftDelayed(t *testing.T, ctx context.Context, e env) delivery {
	t.Helper()
	require.Eventually(t, func() bool { return len(names(t, e.other, e.p+"/delayed")) == 0 }, liveWait, 5*time.Millisecond,
		"the delayed item never came into the queue")
	for _, d := range leftBesides(t, ctx, e, nil) {
		if d.data == "delayed" {
			return d
		}
	}
	t.Fatal("the delayed item is gone")
	return delivery{}
}

// limboCase: a consumer on a session of its own holds "x", a consumer of
// the other session waits, the dispatcher is the faulted session's; the
// first consumer's session closes. The item comes back to the one waiting,
// bumped; with bury (the dispatcher's Queue has WithMaxAttempts(1)), the
// dispatcher moves it to the dead letters, and the one waiting gets the
// next item.
func limboCase(t *testing.T, ctx context.Context, e env, f *fault, bury, blob bool) {
	var opts []fairqueue.Option
	if bury {
		opts = append(opts, fairqueue.WithMaxAttempts(1))
	}
	d := e.elect(t, ctx, e.s, opts...)
	node, _ := e.leader(t)
	if !bury {
		// held/ exists: the dispatcher lists it (else it watches for it).
		ids := e.put(t, ctx, "warm")
		w := fq(t, e.other, e.p)
		j, err := w.TryTake(ctx)
		require.NoError(t, err)
		require.NoError(t, j.Nack(ctx))
		requireDrain(t, ctx, e, "warm", delivery{ids[0], "warm", 2})
	}
	var x string
	var ids []string
	if blob {
		ids = e.put(t, ctx, "x", tooLargeForAName("x2")) // one too large: both in a blob
	} else {
		ids = e.put(t, ctx, "x")
	}
	x = ids[0]
	gone := connect(t, e.addrs)
	c := fq(t, gone, e.p)
	j, err := c.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, x, j.ID())
	if blob {
		// x2 taken and acked: only x is held.
		j2, err := fq(t, e.other, e.p, opts...).Take(ctx) // by the same rules, should it dispatch next
		require.NoError(t, err)
		require.Equal(t, delivery{ids[1], tooLargeForAName("x2"), 1}, delivery{j2.ID(), string(j2.Data()), j2.Attempt()})
		require.NoError(t, j2.Ack(ctx))
	}
	w := fq(t, e.other, e.p, opts...) // the next dispatcher, by the same rules
	got := goTake(ctx, w)
	e.waitTicket(t, w, 1)
	f.armDrop(e)
	require.NoError(t, gone.Close())
	wait := closeAfter(t, ctx, f, d, func() bool {
		dead, _, err := e.other.Conn().Children(e.p + "/dead")
		return err == nil && len(dead) > 0
	})
	want := delivery{x, "x", 2}
	if bury {
		deadLetters(t, ctx, fq(t, e.other, e.p), liveWait, "the item of the consumer gone, at max attempts, never moved to the dead letters")
		want = delivery{e.put(t, ctx, "y")[0], "y", 1}
	}
	r := recv(t, got, "the waiting Take")
	wait()
	require.NoError(t, r.err)
	require.Equal(t, want, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()}, "with a %v", f)
	requireKept(t, r.j, "taken with a "+f.String())
	hit := f.done(e, dropWait)
	if !f.byCtx() {
		e.requireLeads(t, d, node, f)
	}
	require.NoError(t, r.j.Ack(ctx))
	if bury {
		requireBuried(t, ctx, e, f, x, "x", 1)
	}
	finish(t, ctx, e, f, "the dispatcher", hit)
}

// runFaults runs each scenario's faults, the scenarios side by side (as
// -parallel allows), each on a faulted session of its own; the cases of a
// scenario one after the other, each on a queue of its own.
func runFaults(t *testing.T, faults func(sc scenario) []*fault) {
	srv := setup(t)
	other := connect(t, srv.Addrs())
	for _, sc := range scenarios {
		fs := faults(sc)
		if len(fs) == 0 {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			d := &zktest.Dropper{}
			w := &wire{next: d.Dial}
			s := zktest.Connect(t, d.Addrs(srv.Addrs()), zkrecipes.WithDialer(w.Dial))
			for _, f := range fs {
				t.Run(f.String(), func(t *testing.T) {
					t.Cleanup(func() { d.Disarm() })
					require.NoError(t, s.Err(), "the faulted session is over")
					e := env{d: d, w: w, s: s, other: other, addrs: srv.Addrs(), p: queuePath(t, srv.Addrs())}
					sc.run(t, bg(t, 2*time.Minute), e, f)
				})
			}
			var ended, returned []time.Duration
			for _, f := range fs {
				switch {
				case !f.recorded:
				case f.returned:
					returned = append(returned, f.end)
				default:
					ended = append(ended, f.end)
				}
			}
			zktest.RequireCtxBothWays(t, sc.name, ended, returned, sc.waits)
		})
	}
}

// Fault (1): the connection drops right after each request the queue
// sends, the consumer's and the dispatcher's.
func TestFaultDropFairqueue(t *testing.T) {
	runFaults(t, func(sc scenario) []*fault {
		var fs []*fault
		for _, a := range sc.aims {
			modes := []zktest.Mode{zktest.AfterWrite, zktest.LoseReply, zktest.BeforeWrite}
			if a.read() {
				modes = modes[:1]
			}
			for _, mode := range modes {
				fs = append(fs, &fault{aim: a, mode: mode})
			}
		}
		return fs
	})
}

// Fault (2): the caller's ctx ends before, during or after each operation
// (for the dispatcher, its Queue is closed before, during or after a
// hand-out and a rebuild); each operation's ctx faults are checked to have
// ended its ctx both before it returned and after (but for one that waits).
func TestFaultCtxFairqueue(t *testing.T) {
	runFaults(t, func(sc scenario) []*fault {
		if sc.noCtx {
			return nil
		}
		var fs []*fault
		for _, end := range zktest.CtxEnds() {
			fs = append(fs, &fault{end: end})
		}
		return fs
	})
}

// Two Takes of one Queue at once, the reply of the first one's ticket
// create lost (or the create lost, or cut after it was written): the Take
// looks for its ticket by its tag, and finds its own. Each Take gets an
// item of its own, as its first delivery, with items pending before the
// Takes and with items put after; no item is delivered twice.
func TestFaultTwoTakesShareNoDelivery(t *testing.T) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, mode := range []zktest.Mode{zktest.LoseReply, zktest.AfterWrite, zktest.BeforeWrite} {
		for _, before := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/items put before the Takes: %v", mode, before), func(t *testing.T) {
				t.Cleanup(func() { d.Disarm() })
				e := env{d: d, s: s, other: other, addrs: srv.Addrs(), p: queuePath(t, srv.Addrs())}
				ctx := bg(t, 2*time.Minute)
				e.elect(t, ctx, other)
				q := fq(t, s, e.p)
				e.warm(t, ctx, q)
				var ids []string
				if before {
					ids = e.put(t, ctx, "a", "b")
				}
				f := &fault{aim: aimTicket, mode: mode}
				f.armDrop(e)
				got := []<-chan taken{goTake(ctx, q), goTake(ctx, q)}
				if !before {
					e.waitTicket(t, q, 2)
					ids = e.put(t, ctx, "a", "b")
				}
				var jobs []*fairqueue.Job
				var dels []delivery
				for i, ch := range got {
					r := recv(t, ch, fmt.Sprintf("Take %d", i))
					require.NoError(t, r.err)
					jobs = append(jobs, r.j)
					dels = append(dels, delivery{r.j.ID(), string(r.j.Data()), r.j.Attempt()})
				}
				slices.SortFunc(dels, func(a, b delivery) int { return strings.Compare(a.id, b.id) })
				require.Equal(t, []delivery{{ids[0], "a", 1}, {ids[1], "b", 1}}, dels, "the Takes' items with a %v", f)
				for _, j := range jobs {
					requireKept(t, j, "taken with a "+f.String())
					require.NoError(t, j.Ack(ctx))
				}
				hit := f.done(e, dropWait)
				finish(t, ctx, e, f, "Take", hit)
			})
		}
	}
}

// Both faults at once, on a Take: its ticket create is cut (its reply
// lost, or the create cut after or before it was written), and the client
// is kept from reconnecting until the Take's ctx ends while it looks for
// its ticket by tag. The Take returns ctx's error; once the client is back,
// the ticket it may have left in line is dropped, for no Take waits on it:
// an item offered to it would stay there until the session ends. The queue
// is left clean, and the next Take gets the next item put, as its first
// delivery.
func TestFaultTakeGivesUpItsTicketUnknown(t *testing.T) {
	srv := setup(t)
	d := &zktest.Dropper{}
	s := d.Connect(t, srv.Addrs())
	other := connect(t, srv.Addrs())
	for _, mode := range []zktest.Mode{zktest.LoseReply, zktest.AfterWrite, zktest.BeforeWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Cleanup(func() { d.Disarm(); d.Resume() })
			e := env{d: d, s: s, other: other, addrs: srv.Addrs(), p: queuePath(t, srv.Addrs())}
			ctx := bg(t, 2*time.Minute)
			e.elect(t, ctx, other)
			q := fq(t, s, e.p)
			e.warm(t, ctx, q)
			f := &fault{aim: aimTicket, mode: mode}
			d.Pause()
			f.armDrop(e)
			tctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := goTake(tctx, q)
			require.True(t, fired(d, f.base+f.want, liveWait), "the ticket create was cut")
			// A moment for the Take to learn of the cut and look for its
			// ticket, which it cannot while the client is away.
			time.Sleep(200 * time.Millisecond)
			if mode == zktest.LoseReply {
				require.Len(t, e.tickets(t, q), 1, "the ticket create whose reply was lost landed")
			}
			cancel()
			time.Sleep(50 * time.Millisecond)
			d.Resume()
			r := recv(t, got, "the Take that gave up")
			require.True(t, isCtxErr(r.err), "the Take that gave up: %v", r.err)
			hit := f.done(e, dropWait)
			finish(t, ctx, e, f, "Take", hit)
		})
	}
}

// Both faults at once, on an Ack: its ctx ends (here before the call) while
// its connection is cut and the client is kept from reconnecting. While it
// is in flight, a Nack is refused at once with ErrSettled ("or is being
// settled"), and the item and its ticket are still there; once the client
// is back, the ack goes on by itself until it is applied, never asked
// again: the item is gone, not delivered again.
func TestFaultSettleInFlight(t *testing.T) {
	srv := setup(t)
	ctx := bg(t, time.Minute)
	d := &zktest.Dropper{}
	// Long enough for the session to outlive the outage below.
	s := d.Connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(30*time.Second))
	other := connect(t, srv.Addrs())
	e := env{d: d, s: s, other: other, addrs: srv.Addrs(), p: queuePath(t, srv.Addrs())}
	e.elect(t, ctx, other)
	ids := e.put(t, ctx, "x")
	j, err := fq(t, s, e.p).Take(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[0], j.ID())

	d.Pause()
	t.Cleanup(d.Resume)
	d.Arm(aimAck.match(e.p), zktest.BeforeWrite)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = j.Ack(ended)
	require.ErrorIs(t, err, fairqueue.ErrOutcomeUnknown, "Ack with an ended ctx returns at once")
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, fired(d, 1, liveWait), "the ack was sent, and cut off")
	require.Len(t, names(t, other, e.p+"/ready"), 1, "the ack cut off did not land")

	nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
	defer ncancel()
	require.ErrorIs(t, j.Nack(nctx), fairqueue.ErrSettled, "Nack while the Ack is in flight")

	d.Resume()
	require.Eventually(t, func() bool { return len(names(t, other, e.p+"/ready")) == 0 }, liveWait, 5*time.Millisecond,
		"the Ack asked for never happened")
	requireDrain(t, ctx, e, "the acked item")
	require.NoError(t, j.Ack(ctx), "Ack after Ack")
	require.ErrorIs(t, j.Nack(ctx), fairqueue.ErrSettled, "Nack after Ack")
	require.NoError(t, s.Err(), "the session lived through the outage")
	requireClean(t, e, "the Ack")
}
