package owner

// A cached holding: a node held from the line like any other, whose holder
// keeps it between critical sections while no one else waits, so that the
// next section is granted here, without a request. Each section is a lease
// of its own (Section); the holding is the node, and the owner goroutine
// grants, ends and releases in one place.
//
// A section is granted only when all of these hold, checked by the owner at
// the moment of the grant (decide):
//
//   - the session is live, and the earliest moment any leader could expire
//     it is at least half a timeout away (the leader-proven contact clock:
//     every section is then told of a loss before anyone else is granted);
//   - the directory's child watch, set after our node was created on the
//     connection of the moment, has not fired: nobody joined or left the
//     line since it was listed with our node first and alone. A reconnect,
//     which voids what the watch proves, lets the holding go;
//   - a sync sent less than Fresh ago, or sent after this grant was asked
//     for, was answered on that connection. A server answers a sync only
//     once it has applied everything the leader committed before it, and
//     sends a watch event before any later reply: a contender that joined
//     before the sync was sent has been seen. So a contender waits behind
//     the sections granted within Fresh of its join (or whose own sync was
//     in flight when it joined), then for one write.
//
// Any child event is the request to let go: an idle holding deletes its node
// at once, one inside a section at that section's Unlock. So does the idle
// timer, and Drop.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// ErrNoGrant: the cached holding grants no section (it lets go, or has
// ended): join the line as a holder without a cache would.
var ErrNoGrant = errors.New("the cached holding grants no more sections")

// ErrBusy: a section was asked for without waiting while another runs or
// waits.
var ErrBusy = errors.New("another section of the holding runs or waits")

// Why a cached holding let go, as told to Cache.Ended.
const (
	WhyJoin      = "join"      // a contender joined or left the line
	WhyIdle      = "idle"      // no section for Cache.Idle
	WhyDrop      = "release"   // Drop
	WhyReconnect = "reconnect" // the client reconnected: the watch proves nothing
	WhyUnproven  = "unproven"  // the session's contact was too old to grant
	WhySync      = "sync"      // a sync was refused
	WhyLost      = "lost"      // the holding was lost: session over, node deleted
)

// How a section was granted, for telemetry.
const (
	howCached = "cached" // with no request
	howSynced = "synced" // after a sync sent for it
)

// Cache configures a cached holding.
type Cache struct {
	// Dir is the directory of the node's line.
	Dir string
	// Fresh is how old an answered sync may be for a grant (0: a sync for
	// every grant).
	Fresh time.Duration
	// Idle is how long the holding is kept with no section.
	Idle time.Duration
	// Recipe names the sections for telemetry.
	Recipe string
	// Ended, when set, is called once, on the owner's goroutine, when the
	// holding grants no more: as its release starts, or as it ends without
	// one; why is one of the Why constants.
	Ended func(why string)
}

type cacheOp uint8

const (
	opGrant cacheOp = iota + 1
	opTryGrant
	opPark
	opDrop
)

// cert is an answered sync: when it was sent, and the connection (the
// session's NextReconnect taken before it) it was answered on.
type cert struct {
	sent time.Time
	gen  <-chan struct{}
}

func (c cert) valid() bool { return c.gen != nil && !isClosed(c.gen) }

type syncResult struct {
	cert
	err error
}

// A grant's state, shared by the owner and the caller: whichever moves it
// from waiting first decides whether the section is granted or the caller
// gave up.
const (
	waiting int32 = iota
	granted
	abandoned
)

type grantReq struct {
	at     time.Time // when it was asked for
	state  atomic.Int32
	synced bool     // a sync was needed for it
	sec    *Section // set before the reply, once granted
}

type cache struct {
	cfg       Cache
	tel       *telemetry.T
	sec       *Section // the section running; nil when idle
	n         uint32   // the sections granted so far
	waiters   []*request
	cert      cert
	syncing   bool
	synced    chan syncResult
	idle      *time.Timer
	idleOn    bool
	idleSince time.Time
	why       string // why it lets go; "" while kept
	told      bool   // Ended was called
}

// StartCached starts the owner of a node held now, from a listing that
// showed it first with nobody behind, as a cached holding (cfg.DirEv is that
// listing's child watch, unfired), and grants its first section.
func StartCached(cfg Config, c Cache) (*Owner, *Section) {
	cfg.Hold = nil // the sections are the leases
	o := newOwner(cfg)
	t := time.NewTimer(time.Hour)
	t.Stop()
	o.cache = &cache{cfg: c, tel: cfg.Session.Telemetry(), synced: make(chan syncResult, 1), idle: t}
	o.cache.n = 1
	sec := newSection(1, o.cache.tel.StartHold(c.Recipe))
	o.cache.sec = sec
	go o.run()
	return o, sec
}

// Grant asks the holding for a section: at once when the holding may
// grant it (a sync first when the latest is too old), after the section
// running now and those asked for before when wait is set. It returns
// ErrNoGrant when the holding lets go or has ended, ErrBusy when !wait and
// another section runs or waits, or ctx's cause.
func (o *Owner) Grant(ctx context.Context, wait bool) (*Section, error) {
	g := &grantReq{at: time.Now()}
	op := opGrant
	if !wait {
		op = opTryGrant
	}
	r := &request{ctx: ctx, cached: op, grant: g, reply: make(chan error, 1)}
	if !o.handOver(r) {
		return nil, ErrNoGrant
	}
	select {
	case err := <-r.reply:
		return g.sec, err
	case <-ctx.Done():
		if g.state.CompareAndSwap(waiting, abandoned) {
			return nil, context.Cause(ctx)
		}
		err := <-r.reply // granted meanwhile: the answer is on its way
		return g.sec, err
	}
}

// Park ends sec, the running section: the holding is kept, idle, when no
// one else waits and it may grant again; otherwise its node is released (as
// a lease's Unlock releases). Once asked, it is done whatever becomes of
// ctx, which bounds only the wait. It returns nil once the section has
// ended (again if asked again), or its loss.
func (o *Owner) Park(ctx context.Context, sec *Section) error {
	r := &request{ctx: ctx, cached: opPark, sec: sec, reply: make(chan error, 1)}
	if !o.handOver(r) {
		return sec.unlockResult(o.released)
	}
	err, _ := o.await(ctx, r, func() (error, bool) {
		return sec.unlockResult(o.released), sec.Err() != nil
	})
	return err
}

// Drop lets the holding go: an idle one's node is released now, and nil
// returned once it is gone (or lost: nothing is held either way); a
// running section's holding is released at that section's Park. Once
// asked, it is done whatever becomes of ctx, which bounds only the wait.
func (o *Owner) Drop(ctx context.Context) error {
	r := &request{ctx: ctx, cached: opDrop, kind: "unlock", reply: make(chan error, 1)}
	if !o.handOver(r) {
		return nil
	}
	err, _ := o.await(ctx, r, func() (error, bool) { return nil, o.Err() != nil })
	if errors.Is(err, o.lostErr) {
		return nil // a loss leaves nothing held either
	}
	return err
}

// cachedClosedAnswer is what a cached holding's request gets once the
// holding has ended.
func (o *Owner) cachedClosedAnswer(r *request) error {
	switch r.cached {
	case opGrant, opTryGrant:
		return ErrNoGrant
	case opPark:
		return r.sec.unlockResult(o.released)
	}
	return nil
}

// cacheSynced and cacheIdle are the channels run waits on for a cached
// holding (nil, which never fires, for another).
func (o *Owner) cacheSynced() <-chan syncResult {
	if o.cache == nil {
		return nil
	}
	return o.cache.synced
}

func (o *Owner) cacheIdle() <-chan time.Time {
	if o.cache == nil || !o.cache.idleOn {
		return nil
	}
	return o.cache.idle.C
}

// takeCached takes a cached holding's request.
func (o *Owner) takeCached(r *request) {
	c := o.cache
	switch r.cached {
	case opGrant, opTryGrant:
		o.catchUp()
		switch {
		case o.release != nil || c.why != "":
			r.reply <- ErrNoGrant
		case r.cached == opTryGrant && (c.sec != nil || len(c.waiters) > 0):
			r.reply <- ErrBusy
		default:
			c.waiters = append(c.waiters, r) // served in order (serve)
		}
	case opPark:
		o.park(r)
	case opDrop:
		switch {
		case o.release != nil:
			o.release.waiters = append(o.release.waiters, r.reply)
		case c.sec != nil:
			c.setWhy(WhyDrop)
			c.refuseWaiters()
			r.reply <- nil // released at the section's Park
		default:
			c.setWhy(WhyDrop)
			o.letGo(r.reply)
		}
	}
}

// catchUp takes, without blocking, what may have happened since the
// goroutine last looked: a child event, a reconnect.
func (o *Owner) catchUp() {
	if o.dirEv != nil {
		o.fired(o.dirEv)
	}
	select {
	case <-o.reconnect:
		o.reconnected()
	default:
	}
}

// serve grants sections to the waiters, in order, while the holding may;
// it sends a sync when the latest is too old, and lets the holding go when
// it may grant no more.
func (o *Owner) serve() {
	c := o.cache
	for c.sec == nil && len(c.waiters) > 0 {
		if o.release != nil || c.why != "" {
			c.refuseWaiters()
			return
		}
		w := c.waiters[0]
		if w.grant.state.Load() != waiting {
			c.waiters = c.waiters[1:]
			continue
		}
		o.catchUp()
		if o.release != nil || c.why != "" {
			continue
		}
		now := time.Now()
		_, expiry := o.s.Remaining()
		v, why := decide(view{
			live: o.s.Err() == nil, expiry: expiry, timeout: o.s.Timeout(),
			watched: o.dirEv != nil, certOK: c.cert.valid(), certSent: c.cert.sent,
			now: now, asked: w.grant.at, fresh: c.cfg.Fresh,
		})
		switch v {
		case grantNow:
			c.waiters = c.waiters[1:]
			o.grantTo(w, now)
		case refresh:
			w.grant.synced = true
			if !c.syncing {
				o.startSync()
			}
			return
		default:
			c.setWhy(why)
			o.letGo(nil)
		}
	}
}

// grantTo grants w a section, unless its caller gave up.
func (o *Owner) grantTo(w *request, now time.Time) {
	c := o.cache
	if !w.grant.state.CompareAndSwap(waiting, granted) {
		return
	}
	c.n++
	sec := newSection(c.n, c.tel.StartHold(c.cfg.Recipe))
	c.sec = sec
	w.grant.sec = sec
	w.reply <- nil
	how := howCached
	if w.grant.synced {
		how = howSynced
	}
	c.tel.LocalGrant(c.cfg.Recipe, how)
	o.refresh(now)
}

// park ends the running section r.sec: kept idle when the holding may grant
// again, else released (r waits for the release).
func (o *Owner) park(r *request) {
	c := o.cache
	sec := r.sec
	if sec != c.sec {
		r.reply <- sec.unlockResult(o.released) // ended already
		return
	}
	o.catchUp()
	now := time.Now()
	if c.why == "" {
		// Kept unless the holding could not grant at all; the next grant
		// checks the rest.
		_, expiry := o.s.Remaining()
		if v, why := decide(view{live: o.s.Err() == nil, expiry: expiry, timeout: o.s.Timeout(), watched: o.dirEv != nil}); v == letGo {
			c.setWhy(why)
		}
	}
	if c.why != "" || o.release != nil {
		o.letGo(r.reply)
		return
	}
	c.sec = nil
	sec.finish(o.released, "")
	r.reply <- nil
	c.idleSince = now
	if !c.idleOn {
		c.idle.Reset(c.cfg.Idle)
		c.idleOn = true
	}
	o.refresh(now)
}

// refresh sends a sync, while the holding is in use, once the latest is
// half as old as Fresh allows: the next grant then needs none.
func (o *Owner) refresh(now time.Time) {
	c := o.cache
	if c.cfg.Fresh > 0 && !c.syncing && (!c.cert.valid() || now.Sub(c.cert.sent) > c.cfg.Fresh/2) {
		o.startSync()
	}
}

// startSync sends a sync of the directory from a goroutine of its own; its
// answer comes back on c.synced.
func (o *Owner) startSync() {
	c := o.cache
	c.syncing = true
	gen := o.s.NextReconnect() // before the sync: what it proves holds on that connection
	conn, dir, ch := o.s.Conn(), c.cfg.Dir, c.synced
	go func() {
		sent := time.Now()
		_, err := conn.Sync(dir)
		ch <- syncResult{cert{sent, gen}, err}
	}()
}

// synced takes a sync's answer. A child event that came before it is in
// dirEv by now: the client hands an event over before it reads the next
// reply, and the next grant drains dirEv first.
func (o *Owner) synced(res syncResult) {
	c := o.cache
	c.syncing = false
	switch {
	case res.err == nil:
		if res.valid() && res.sent.After(c.cert.sent) {
			c.cert = res.cert
		}
	case session.IsConnErr(res.err):
		// The reconnect lets the holding go.
	default:
		c.setWhy(WhySync)
		if c.sec == nil {
			o.letGo(nil)
		}
	}
}

// idleFired: the idle timer fired. The holding goes once it has had no
// section for Idle.
func (o *Owner) idleFired() {
	c := o.cache
	c.idleOn = false
	if c.sec != nil || o.release != nil || c.why != "" || len(c.waiters) > 0 {
		return
	}
	if rest := c.cfg.Idle - time.Since(c.idleSince); rest > 0 {
		c.idle.Reset(rest)
		c.idleOn = true
		return
	}
	c.setWhy(WhyIdle)
	o.letGo(nil)
}

// cacheJoined: the directory's child watch fired: someone joined or left
// the line. An idle holding lets go at once; a running section's holding
// at its Park, while its node is watched as a lease's is.
func (o *Owner) cacheJoined() {
	c := o.cache
	c.setWhy(WhyJoin)
	switch {
	case o.release != nil: // its own answer tells
	case c.sec == nil:
		o.letGo(nil)
	default:
		c.refuseWaiters()
		o.look = true
	}
}

// cacheReconnected: the client reconnected, and the child watch proves
// nothing any more. The holding lets go: at once when idle, at the running
// section's Park otherwise, its node read again meanwhile.
func (o *Owner) cacheReconnected() {
	c := o.cache
	c.setWhy(WhyReconnect)
	switch {
	case o.release != nil:
	case c.sec == nil:
		o.letGo(nil)
	default:
		c.refuseWaiters()
		o.look, o.lookAt = true, nil
	}
}

// letGo releases the node (no section runs), the release mark written
// unless no one joined since the listing; reply, when not nil, waits for
// the outcome. Nothing is granted from now on.
func (o *Owner) letGo(reply chan error) {
	c := o.cache
	if o.release == nil {
		o.release = &releasing{fn: o.defRelease, kind: "unlock"}
	}
	if reply != nil {
		o.release.waiters = append(o.release.waiters, reply)
	}
	c.refuseWaiters()
	c.idle.Stop()
	c.idleOn = false
	o.tellEnded()
}

// cacheEnded ends the running section with the holding (end, o.mu held).
func (o *Owner) cacheEnded(why error, lossReason string) {
	c := o.cache
	if c.sec != nil {
		c.sec.finish(why, lossReason)
		c.sec = nil
	}
}

// cacheSettled answers what waits once the holding has ended.
func (o *Owner) cacheSettled() {
	c := o.cache
	c.refuseWaiters()
	c.idle.Stop()
	c.setWhy(WhyLost)
	o.tellEnded()
}

func (o *Owner) tellEnded() {
	c := o.cache
	if c.told {
		return
	}
	c.told = true
	if c.cfg.Ended != nil {
		c.cfg.Ended(c.why)
	}
}

func (c *cache) setWhy(why string) {
	if c.why == "" {
		c.why = why
	}
}

func (c *cache) refuseWaiters() {
	for _, w := range c.waiters {
		w.reply <- ErrNoGrant
	}
	c.waiters = nil
}

// verdict is what decide says of a grant.
type verdict int

const (
	grantNow verdict = iota // grant it now, with no request
	refresh                 // send a sync first, then ask again
	letGo                   // grant nothing more: let the holding go
)

// view is what decide looks at.
type view struct {
	live     bool          // the session is not over
	expiry   time.Duration // until the earliest moment a leader could expire the session
	timeout  time.Duration // the session's
	watched  bool          // the child watch stands: no event, no reconnect since the listing
	certOK   bool          // a sync has been answered on this connection
	certSent time.Time     // when the latest such sync was sent
	now      time.Time     // the grant's moment
	asked    time.Time     // when the grant was asked for
	fresh    time.Duration // how old an answered sync may be
}

// decide is the rule of a grant (see the top of this file), pure: the
// session's contact first, then the watch, then the sync's freshness. A
// sync sent after the grant was asked for is fresh enough whatever its
// round trip. The reason comes with letGo.
func decide(v view) (verdict, string) {
	switch {
	case !v.live:
		return letGo, WhyLost
	case v.expiry < v.timeout/2:
		return letGo, WhyUnproven
	case !v.watched:
		return letGo, WhyJoin
	case !v.certOK:
		return refresh, ""
	case v.now.Sub(v.certSent) <= v.fresh, !v.certSent.Before(v.asked):
		return grantNow, ""
	}
	return refresh, ""
}

// Section is one critical section of a cached holding: a lease of its
// own, ended by Park (released) or by the holding's loss.
type Section struct {
	n    uint32
	done chan struct{}
	hold *telemetry.Hold

	mu     sync.Mutex
	err    error
	ctx    context.Context // made on first use
	cancel context.CancelCauseFunc
}

func newSection(n uint32, hold *telemetry.Hold) *Section {
	return &Section{n: n, done: make(chan struct{}), hold: hold}
}

// N is the section's number in its holding, from 1.
func (s *Section) N() uint32 { return s.n }

// Done is closed when the section ends.
func (s *Section) Done() <-chan struct{} { return s.done }

// Err is nil while the section runs; then why it ended.
func (s *Section) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Context is cancelled when the section ends, with why as its cause. It is
// made on first use: most sections never need one.
func (s *Section) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		if s.err != nil {
			s.cancel(s.err)
		}
	}
	return s.ctx
}

// finish ends the section with why, once.
func (s *Section) finish(why error, lossReason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = why
	close(s.done)
	if s.cancel != nil {
		s.cancel(why)
	}
	s.hold.End(lossReason)
}

// unlockResult is what an Unlock of the ended section returns: nil when it
// was released (parked), else its loss.
func (s *Section) unlockResult(released error) error {
	if err := s.Err(); err != nil && !errors.Is(err, released) {
		return err
	}
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
