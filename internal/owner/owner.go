// Package owner keeps the state of one held node (a lease's, a job's
// claim) in the hands of one goroutine. The holder's requests (release it,
// write it) and the watch on the node are messages to that goroutine, which
// is the one place that decides whether the holding has ended, and why.
//
// Models: Consul's api/lock.go monitorLock (one goroutine per held lock,
// a channel closed when it is lost) and etcd's concurrency.Session.
//
// The owner keeps three rules:
//
//   - a connection error is not a loss: a read that meets one is asked
//     again once the client has reconnected, while the session lives;
//   - a request sent may land, whatever became of the caller's context: the
//     owner sends its requests itself, one at a time, and looks at the node
//     only once the outcome of each is known, so its own write is never
//     taken for a stranger's;
//   - "release in flight" is its own state: the node found gone after a
//     release was sent was released, not lost;
//   - a watch re-set after a reconnect proves nothing: go-zookeeper may
//     re-set it as of a newer change than it saw, and the server then
//     fires it for nothing that changed meanwhile; after every reconnect
//     the owner reads the node again;
//   - a release asked for is sent, always: the request is handed over
//     without waiting on the caller's context, which bounds only how long
//     the caller waits for the outcome.
package owner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// The losses other than the session's end, for errors.Is (telemetry tells
// them apart).
var (
	errDeleted  = errors.New("our node was deleted by another client")
	errModified = errors.New("our node was modified by another client")
)

// ErrUnsettled marks the loss of a holding whose release had been sent,
// but not answered, when its session ended: the release may have landed.
var ErrUnsettled = errors.New("the release was sent, and the session ended before its answer")

// ErrGone is what a ReleaseFunc returns when what it releases was gone
// already (or moved on, for a claim whose item was claimed again).
var ErrGone = errors.New("gone")

// ReleaseFunc sends the one request that releases the held node (a delete,
// alone or in a multi with other operations) and returns its error: nil,
// ErrGone, a connection error (the owner asks again once reconnected), or
// any other error, which refuses the release and leaves the node held.
// quiet says that no one has joined or left the node's directory since it
// was listed (see Start), so no one waits for a release mark.
type ReleaseFunc func(conn *zk.Conn, quiet bool) error

// Config is what an Owner starts with.
type Config struct {
	Session *session.Session
	Path    string
	// DirEv, when not nil, is the child watch of the node's directory, set
	// after the node was created: until it fires nothing in the directory
	// has changed, so it stands in for a watch on the node.
	DirEv <-chan zk.Event
	// Own is the getData watch on the node, when set.
	Own *znode.Watch
	// Version, when Own is not set, is the node's data version as held
	// (a write that moves it further is a stranger's).
	Version int32
	// Reconnect, when not nil, is the session's NextReconnect taken before
	// DirEv or Own was set; nil: taken at Start.
	Reconnect <-chan struct{}
	// Lost and Released are the recipe's sentinels: every loss wraps Lost;
	// Err returns Released after a release. Settled is what a release of
	// another kind than the one that released the node returns (Resign
	// after Unlock, Nack after Ack).
	Lost, Released, Settled error
	// Release is how the node is released by default (Owner.Release).
	Release ReleaseFunc
	// Hold is what the holding reports to telemetry (a lease's time and
	// loss, a job in flight), ended with the holding; nil for nothing.
	Hold *telemetry.Hold
	// FirstLook, when nothing watches the node yet (no DirEv, no Own), is
	// how long after Start the owner first reads and watches it: a holder
	// that releases sooner costs no read, and its release does not wait
	// behind one. Until then only the session's end is seen as a loss; a
	// stranger's delete is seen at the first look.
	FirstLook time.Duration
	// Ended, when not nil, is called once the holding has ended and every
	// request is answered, in the owner's goroutine, with whether it was
	// lost: what the holder keeps of it can go, without a goroutine of
	// its own.
	Ended func(lost bool)
}

// Owner is the one goroutine that owns a held node's state.
type Owner struct {
	s        *session.Session
	path     string
	lostErr  error
	released error

	settled error

	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{} // closed when lost
	wake   chan struct{} // a request is in the inbox; never blocks

	hold       *telemetry.Hold
	ended      func(lost bool)
	version    atomic.Int32 // the node's data version, as the holder left it
	mu         sync.Mutex
	err        error      // nil while held
	unsettled  bool       // lost with a release sent and not answered
	releasedBy string     // the kind of the release that released the node
	inbox      []*request // handed over, not yet taken by the goroutine
	closed     bool       // the goroutine takes no more requests: answer them here

	// cache is a cached holding's state (cache.go); nil for a holding that
	// is one lease.
	cache *cache

	// The rest belongs to the goroutine (run).
	defRelease ReleaseFunc
	dirEv      <-chan zk.Event
	nodeEv     <-chan zk.Event
	reconnect  <-chan struct{}  // closed at the next reconnect: look again
	look       bool             // the node must be read (and watched) again
	lookAt     <-chan time.Time // when the first look is due (FirstLook)
	lookTry    int
	release    *releasing
	writes     []*request
}

type request struct {
	ctx     context.Context
	release ReleaseFunc // a release, or else a write of data (or a multi)
	kind    string      // a release's kind, e.g. "unlock", "ack"
	data    []byte
	ops     []any              // a multi's operations, sent behind the node's check (multi.go)
	res     []zk.MultiResponse // the multi's results, set before its reply
	sec     *Section           // a cached holding's section the request is about (cache.go)
	cached  cacheOp            // a cached holding's request (cache.go); 0 for none
	grant   *grantReq          // a grant's state (cache.go)
	reply   chan error
}

type releasing struct {
	fn      ReleaseFunc
	kind    string
	waiters []chan error
	sent    bool // a try was sent and its outcome is unknown: it may have landed
	try     int
}

// Start starts the owner of a node that is held now.
func Start(cfg Config) *Owner {
	o := newOwner(cfg)
	go o.run()
	return o
}

// newOwner is an owner whose goroutine is yet to start.
func newOwner(cfg Config) *Owner {
	ctx, cancel := context.WithCancelCause(context.Background())
	o := &Owner{
		s: cfg.Session, path: cfg.Path, lostErr: cfg.Lost, released: cfg.Released, settled: cfg.Settled,
		ctx: ctx, cancel: cancel, lost: make(chan struct{}), wake: make(chan struct{}, 1),
		defRelease: cfg.Release, dirEv: cfg.DirEv, reconnect: cfg.Reconnect,
		hold: cfg.Hold, ended: cfg.Ended,
	}
	if o.reconnect == nil {
		o.reconnect = cfg.Session.NextReconnect()
	}
	o.version.Store(cfg.Version)
	switch {
	case cfg.Own != nil:
		o.nodeEv = cfg.Own.Ev
		o.version.Store(cfg.Own.Stat.Version)
	case cfg.DirEv == nil && cfg.FirstLook > 0:
		o.lookAt = time.After(cfg.FirstLook)
	case cfg.DirEv == nil:
		o.look = true // nothing watches the node yet
	}
	return o
}

// Done is closed when the holding ends: released or lost.
func (o *Owner) Done() <-chan struct{} { return o.ctx.Done() }

// Lost is closed when the holding is lost (not when it is released).
func (o *Owner) Lost() <-chan struct{} { return o.lost }

// Context is cancelled when the holding ends; context.Cause says why.
func (o *Owner) Context() context.Context { return o.ctx }

// Err is nil while held; then Released, or an error wrapping Lost.
func (o *Owner) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Version is the node's data version as the holder's writes left it.
func (o *Owner) Version() int32 { return o.version.Load() }

// Release releases the node with the Config's ReleaseFunc, as a release of
// the given kind. See ReleaseWith.
func (o *Owner) Release(ctx context.Context, kind string) error {
	return o.ReleaseWith(ctx, kind, o.defRelease)
}

// ReleaseWith releases the node with fn. Once asked, the release is sent,
// whatever the state of ctx (even one that has ended already), and goes on
// until it is confirmed or the session is over: ctx bounds only the wait,
// and a release that was asked for is never dropped or left half done. It
// returns nil once released (and again if asked again with the same kind),
// the loss if the holding was lost first, ctx's cause if ctx ends first,
// the error of a release refused by the server (then the node is still
// held), or an error wrapping the Config's Settled when a release of
// another kind released it or is under way.
func (o *Owner) ReleaseWith(ctx context.Context, kind string, fn ReleaseFunc) error {
	return o.ask(ctx, &request{ctx: ctx, release: fn, kind: kind, reply: make(chan error, 1)})
}

// Write sets the node's data, as its holder: the owner then takes the
// change for the holder's own, and Version follows it. It is not sent if
// ctx has ended. If ctx ends while it is in flight, Write returns ctx's
// cause and the owner learns its outcome all the same. A write whose
// connection dropped is looked at once the client has reconnected, and sent
// again if it did not land and ctx still waits.
func (o *Owner) Write(ctx context.Context, data []byte) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return o.ask(ctx, &request{ctx: ctx, data: data, reply: make(chan error, 1)})
}

// ask hands r to the goroutine, without blocking and whatever ctx says (a
// release must not be lost to a context that ended), then waits for its
// answer or ctx.
func (o *Owner) ask(ctx context.Context, r *request) error {
	if !o.handOver(r) {
		return o.closedAnswer(r)
	}
	// A release whose outcome is decided by now gets it, not a "maybe":
	// the holding has ended (released or lost).
	err, _ := o.await(ctx, r, func() (error, bool) {
		if r.release != nil && o.Err() != nil {
			return o.final(r.kind), true
		}
		return nil, false
	})
	return err
}

// await waits for r's answer (answered) or for ctx to end. Once ctx has
// ended, an answer there by now wins; then decided, when not nil, may say
// what r gets although unanswered (its outcome decided by the end of what
// it asks about); else ctx's cause.
func (o *Owner) await(ctx context.Context, r *request, decided func() (error, bool)) (err error, answered bool) {
	select {
	case err := <-r.reply:
		return err, true
	case <-ctx.Done():
		select {
		case err := <-r.reply:
			return err, true
		default:
		}
		if decided != nil {
			if err, ok := decided(); ok {
				return err, false
			}
		}
		return context.Cause(ctx), false
	}
}

// handOver puts r in the goroutine's inbox, without blocking; false when
// the goroutine takes no more requests (the holding has ended).
func (o *Owner) handOver(r *request) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	o.inbox = append(o.inbox, r)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return true
}

// closedAnswer is what r gets once the holding has ended.
func (o *Owner) closedAnswer(r *request) error {
	switch {
	case r.cached != 0:
		return o.cachedClosedAnswer(r)
	case r.release == nil:
		return o.Err() // no write after the end
	}
	return o.final(r.kind)
}

// final is what a release of kind gets once the holding has ended.
func (o *Owner) final(kind string) error {
	o.mu.Lock()
	err, unsettled, by := o.err, o.unsettled, o.releasedBy
	o.mu.Unlock()
	switch {
	case errors.Is(err, o.released) && by != kind:
		return o.settledBy(kind, by)
	case errors.Is(err, o.released):
		return nil
	case unsettled:
		return fmt.Errorf("%w: %w", ErrUnsettled, err)
	}
	return err
}

func (o *Owner) settledBy(kind, by string) error {
	return fmt.Errorf("%w: %s after %s", o.settled, kind, by)
}

// run is the owner: it does one thing at a time (a release, a write, a
// look at the node), each to its known outcome, then waits for the next
// message: a request, a watch event, the session's end, or the time to
// retry after a connection error.
func (o *Owner) run() {
	var retry <-chan struct{} // fires when a retry is due
	for o.Err() == nil {
		if retry == nil && o.busy() {
			retry = o.step()
			continue
		}
		select {
		case <-o.wake:
			o.mu.Lock()
			in := o.inbox
			o.inbox = nil
			o.mu.Unlock()
			for _, r := range in {
				o.take(r)
			}
			retry = nil // a new request goes at once
		case ev := <-o.dirEv:
			o.dirEvent(ev)
		case ev := <-o.nodeEv:
			o.nodeEvent(ev)
		case <-retry:
			retry = nil
		case <-o.lookAt:
			o.lookAt, o.look = nil, true
		case <-o.reconnect:
			o.reconnected()
		case res := <-o.cacheSynced():
			o.synced(res)
		case <-o.cacheIdle():
			o.idleFired()
		case <-o.s.Done():
			o.end(o.lossf("%w", o.s.Err()))
		}
		if o.cache != nil && o.Err() == nil {
			o.serve()
		}
	}
	o.settle()
}

func (o *Owner) busy() bool { return o.release != nil || len(o.writes) > 0 || o.look }

// step does the most pressing thing: a release before a write, a write
// before a look. It returns a channel when a connection error calls for
// another try later.
func (o *Owner) step() <-chan struct{} {
	switch {
	case o.release != nil:
		return o.doRelease()
	case len(o.writes) > 0:
		return o.doWrite()
	default:
		return o.doLook()
	}
}

// take queues a request.
func (o *Owner) take(r *request) {
	if r.cached != 0 {
		o.takeCached(r)
		return
	}
	switch {
	case r.release == nil && o.release != nil:
		r.reply <- fmt.Errorf("%w: a release is under way", o.released)
	case r.release == nil:
		o.writes = append(o.writes, r)
	case o.release != nil && o.release.kind != r.kind:
		r.reply <- fmt.Errorf("%w (under way)", o.settledBy(r.kind, o.release.kind))
	case o.release != nil:
		o.release.waiters = append(o.release.waiters, r.reply)
	default:
		o.release = &releasing{fn: r.release, kind: r.kind, waiters: []chan error{r.reply}}
		// Writes not yet sent make no sense after a release.
		for _, w := range o.writes {
			w.reply <- fmt.Errorf("%w: released before the write was sent", o.released)
		}
		o.writes = nil
	}
}

// doRelease sends the release once and handles its outcome.
func (o *Owner) doRelease() <-chan struct{} {
	rel := o.release
	quiet := o.dirEv != nil && !o.fired(o.dirEv)
	err := rel.fn(o.s.Conn(), quiet)
	switch {
	case err == nil:
		o.end(o.released)
	case errors.Is(err, ErrGone) && rel.sent:
		// An earlier try, whose answer we never had, landed.
		o.end(o.released)
	case errors.Is(err, ErrGone):
		o.end(o.lossf("%w", errDeleted))
	case session.IsConnErr(err):
		rel.sent = true
		rel.try++
		return o.pause(&rel.try)
	default:
		for _, w := range rel.waiters {
			w <- fmt.Errorf("release %s: %w", o.path, err)
		}
		o.release = nil
	}
	return nil
}

// doWrite sends the first queued write and handles its outcome.
func (o *Owner) doWrite() <-chan struct{} {
	w := o.writes[0]
	if w.ctx.Err() != nil {
		o.writes = o.writes[1:]
		w.reply <- context.Cause(w.ctx) // not sent: the writer gave up
		return nil
	}
	if w.ops != nil {
		o.writes = o.writes[1:]
		o.doMulti(w)
		return nil
	}
	v := o.version.Load()
	st, err := o.s.Conn().Set(o.path, w.data, v)
	if session.IsConnErr(err) {
		// It may or may not have landed: now that it is settled, look.
		n, rerr := znode.Get(context.Background(), o.s, o.path)
		switch {
		case rerr != nil:
			err = rerr // the session is over (Get asks again while it lives)
		case n.Stat.Version == v+1:
			st, err = n.Stat, nil // it landed
		case n.Stat.Version == v:
			return nil // it did not: send it again (or drop it if w.ctx ended)
		default:
			err = zk.ErrBadVersion
		}
	}
	o.writes = o.writes[1:]
	switch {
	case err == nil:
		o.version.Store(st.Version)
		w.reply <- nil
		return nil
	case errors.Is(err, zk.ErrBadVersion):
		o.end(o.modified())
	case errors.Is(err, zk.ErrNoNode):
		o.end(o.lossf("%w", errDeleted))
	case o.s.Err() != nil:
		o.end(o.lossf("%w", o.s.Err()))
	default:
		w.reply <- fmt.Errorf("write %s: %w", o.path, err)
		return nil
	}
	w.reply <- o.Err()
	return nil
}

// doLook reads the node, watching it, and compares its version with the
// holder's writes: a newer one is a stranger's.
func (o *Owner) doLook() <-chan struct{} {
	_, st, ev, err := o.s.Conn().GetW(o.path)
	switch {
	case err == nil && st.Version > o.version.Load():
		o.end(o.modified())
	case err == nil:
		o.look, o.lookTry, o.nodeEv = false, 0, ev
	case errors.Is(err, zk.ErrNoNode):
		o.gone()
	case session.IsConnErr(err):
		o.lookTry++
		return o.pause(&o.lookTry)
	default:
		o.end(o.lossf("%w: read it: %w", errDeleted, err))
	}
	return nil
}

// reconnected: the client reconnected, and the watches it re-set may have
// missed a change made meanwhile. The directory's watch no longer stands in
// for the node's (nor makes a release quiet), and the node is read again,
// unless a release is under way: its own answer tells.
func (o *Owner) reconnected() {
	o.reconnect = o.s.NextReconnect()
	o.dirEv = nil
	if o.cache != nil {
		o.cacheReconnected()
		return
	}
	if o.release == nil {
		o.look, o.lookAt = true, nil
	}
}

// dirEvent: something in the directory changed. It may have been our node:
// the watch moves onto the node itself.
func (o *Owner) dirEvent(ev zk.Event) {
	o.dirEv = nil
	if znode.Dropped(ev) {
		o.sessionOver()
		return
	}
	if o.cache != nil {
		o.cacheJoined()
		return
	}
	o.look = true
}

// nodeEvent: our node changed.
func (o *Owner) nodeEvent(ev zk.Event) {
	o.nodeEv = nil
	switch {
	case znode.Dropped(ev):
		o.sessionOver()
	case ev.Type == zk.EventNodeDeleted:
		o.gone()
	default:
		// A data change: the holder's own write (its outcome is known, the
		// owner sent it) or a stranger's. Look.
		o.look = true
	}
}

// gone: our node is gone. Without a release under way, someone else
// deleted it. With one, the node's going proves nothing: the server that
// expires our session deletes our ephemeral node and tells our own watch
// so before it closes the connection (a client stopped past its session
// timeout reads that on waking), exactly as if our release had landed.
// Only the release's own answer tells, so the owner waits for it: the try
// due next finds the node gone while the session lives (released), or the
// session ends first (unsettled).
func (o *Owner) gone() {
	if o.release != nil {
		o.look = false
		return
	}
	o.end(o.lossf("%w", errDeleted))
}

// modified is the loss of a node written by a stranger. The node is still
// there, ours, first or high in its line: it is deleted, so that no one
// waits behind a holder that knows it lost.
func (o *Owner) modified() error {
	o.s.Cleanup("delete modified "+o.path, o.s.DeleteStep(o.path))
	return o.lossf("%w", errModified)
}

// sessionOver waits for the session to be over: the client drops watches
// only then.
func (o *Owner) sessionOver() {
	<-o.s.Done()
	o.end(o.lossf("%w", o.s.Err()))
}

func (o *Owner) lossf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{o.lostErr}, args...)...)
}

// end records why the holding ended; the first reason wins.
func (o *Owner) end(why error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return
	}
	o.err = why
	reason := ""
	if errors.Is(why, o.released) && o.release != nil {
		o.releasedBy = o.release.kind
	}
	if !errors.Is(why, o.released) {
		o.unsettled = o.release != nil && o.release.sent
		close(o.lost)
		switch {
		case errors.Is(why, errModified):
			reason = "modified"
		case errors.Is(why, errDeleted):
			reason = "deleted"
		default:
			reason = "session"
		}
	}
	o.hold.End(reason)
	if o.cache != nil {
		o.cacheEnded(why, reason)
	}
	o.cancel(why)
}

// settle answers every request left once the holding has ended, and those
// handed over since: from now on ask answers them itself.
func (o *Owner) settle() {
	o.mu.Lock()
	o.closed = true
	in := o.inbox
	o.inbox = nil
	o.mu.Unlock()
	if o.release != nil {
		final := o.final(o.release.kind)
		for _, w := range o.release.waiters {
			w <- final
		}
	}
	for _, w := range o.writes {
		w.reply <- o.Err()
	}
	for _, r := range in {
		r.reply <- o.closedAnswer(r)
	}
	if o.cache != nil {
		o.cacheSettled()
	}
	if o.ended != nil {
		o.ended(!errors.Is(o.Err(), o.released))
	}
}

// pause returns a channel that fires when the next try is due.
func (o *Owner) pause(try *int) <-chan struct{} {
	ch := make(chan struct{})
	n := *try
	go func() {
		if znode.Pause(o.ctx, o.s, n) {
			close(ch)
		}
	}()
	return ch
}

// fired reports, without blocking, whether ch has fired.
func (o *Owner) fired(ch <-chan zk.Event) bool {
	select {
	case ev := <-ch:
		o.dirEvent(ev)
		return true
	default:
		return false
	}
}
