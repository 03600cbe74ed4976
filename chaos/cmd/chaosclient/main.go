// Command chaosclient is one client process of the chaos suite: the
// harness (package chaos) starts several, pauses them with SIGSTOP, kills
// them with SIGKILL and freezes their connections, and reads what they did
// from their standard output (package record: one JSON event per line).
//
// Each process runs every workload, each on a ZooKeeper session of its own,
// all dialled through one zktest.Freezer so that "freeze" cuts the whole
// process off the ensemble. Leases are held for real: each for a random
// time between -hold-min and -hold-max (seconds, by default), and a
// goroutine waits on each lease's (and Job's) Done to note the moment it
// closed:
//
//   - mutex: Lock, then, holding the lease, read the fenced register and
//     write back the value read plus one (-work later), presenting the
//     lease's token with both; hold on for the rest of the time; Unlock.
//   - election: Campaign, lead, Resign; and, on another session, Observe
//     the same election.
//   - semaphore: Acquire one of the permits, hold it, Unlock.
//   - queue: Put and PutMany of two, in turn (only with -produce), and
//     Take, work up to -job-hold (one
//     job in eight: up to -job-long, seconds, as a lease is held), then Ack.
//     Each consumer's Queue stands for election as the queue's dispatcher,
//     on the consumer's session.
//   - cached: a CachedMutex on a path of its own, guarding a register of
//     its own (-register-cached) with each section's Fence, in phases
//     apart by one to six seconds (when the lock may be free): calm ones,
//     one to three sections, the first held as a mutex lease is (the
//     read-modify-write first), the others briefly, after pauses in which
//     the holding may be kept idle; and hot ones, a second or two of
//     sections back to back from two goroutines sharing the CachedMutex, a
//     read-modify-write each. A Mutex on the same path now and then (every
//     three to ten seconds, held briefly) is a plain contender among them.
//
// A holder told of its loss (Done closed) stops holding at once and
// releases.
//
// -pin N connects every session to the N-th server of -zk only, so that the
// harness knows which server a holder's session sits on when it cuts that
// server off.
//
// Commands on standard input, one a line: "freeze MS" (cut every
// connection for MS milliseconds), "quiesce" (stop acquiring, campaigning
// and putting; consumers and observers go on). The process exits when its
// standard input ends.
//
// -unfenced breaks the mutex workload on purpose: the holder neither looks
// at its lease before writing nor shows its token to the register, the
// way a client of a lock without fencing writes. The harness must then
// find lost updates whenever a holder is paused past its lease.
//
// -deaf breaks every workload on purpose the other way: no holder watches
// Done, each holds for its whole time whatever happens, and its loss is
// noted only when its Unlock (Ack) returns. The harness must then find two
// holders at once whenever a holder is cut off past its session timeout.
//
// -bypass breaks the cached workload on purpose: in a hot phase it keeps
// one section and reports a new section every millisecond or so, the way
// a cache that ignored the contenders who joined would grant them; the
// harness must then find sections begun long after a waiter joined.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

type client struct {
	servers  []string
	root     string
	reg      string
	regC     string // the cached workload's register
	timeout  time.Duration
	holdMin  time.Duration // a lease is held between holdMin and holdMax
	holdMax  time.Duration
	work     time.Duration // the mutex holder's work between its read and its write
	jobHold  time.Duration // a consumer works on a job up to this long
	jobLong  time.Duration // or, one job in eight, up to this long
	permits  int
	unfenced bool
	deaf     bool
	bypass   bool
	produce  bool

	out     *record.Writer
	freezer zktest.Freezer
	// releasing is read-held by each release, from its Release event to
	// its Unlocked; a freeze waits for those out (see freeze).
	releasing sync.RWMutex
	quiet     chan struct{} // closed by "quiesce"
	ops       atomic.Int64
}

func main() {
	var (
		zkAddrs = flag.String("zk", "", "ZooKeeper servers, comma-separated")
		root    = flag.String("root", "/chaos", "znode under which the workloads live")
		reg     = flag.String("register", "", "address of the fenced register")
		regC    = flag.String("register-cached", "", "address of the cached workload's fenced register")
		slot    = flag.Int("slot", 0, "this client's slot")
		inc     = flag.Int("inc", 0, "incarnation of the slot")
		timeout = flag.Duration("session", 3*time.Second, "session timeout")
		holdMin = flag.Duration("hold-min", 500*time.Millisecond, "shortest hold of a lease")
		holdMax = flag.Duration("hold-max", 4*time.Second, "longest hold of a lease")
		work    = flag.Duration("work", 80*time.Millisecond, "how long the mutex holder works between its read and its write")
		jobHold = flag.Duration("job-hold", 400*time.Millisecond, "longest work on a job before its Ack")
		jobLong = flag.Duration("job-long", 4*time.Second, "longest work on a long job (one in eight) before its Ack")
		permits = flag.Int("permits", 2, "semaphore permits")
		loads   = flag.String("workloads", "mutex,cached,election,semaphore,queue", "workloads to run")
		produce = flag.Bool("produce", false, "put items on the queue")
		pin     = flag.Int("pin", -1, "connect only to this server of -zk (0-based); -1: any")
		unfence = flag.Bool("unfenced", false, "BROKEN ON PURPOSE: write without the token and without looking at the lease")
		deaf    = flag.Bool("deaf", false, "BROKEN ON PURPOSE: never watch Done; hold for the whole time; learn of a loss from Unlock only")
		bypass  = flag.Bool("bypass", false, "BROKEN ON PURPOSE: report sections of one kept lease in hot phases, deaf to contenders")
	)
	flag.Parse()
	servers := strings.Split(*zkAddrs, ",")
	if *pin >= len(servers) {
		fail(fmt.Errorf("-pin %d: only %d servers in -zk", *pin, len(servers)))
	}
	if *pin >= 0 {
		servers = servers[*pin : *pin+1]
	}
	if *holdMin <= 0 || *holdMax < *holdMin {
		fail(fmt.Errorf("-hold-min %v, -hold-max %v: need 0 < min <= max", *holdMin, *holdMax))
	}
	c := &client{
		servers: servers, root: *root, reg: *reg, regC: *regC,
		timeout: *timeout, holdMin: *holdMin, holdMax: *holdMax, work: *work, jobHold: *jobHold, jobLong: *jobLong,
		permits: *permits, unfenced: *unfence, deaf: *deaf, bypass: *bypass, produce: *produce,
		out:   record.NewWriter(os.Stdout, *slot, *inc),
		quiet: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range strings.SplitSeq(*loads, ",") {
		var role func(context.Context)
		switch w {
		case record.Mutex:
			role = c.mutex
		case record.Cached:
			role = c.cached
		case record.Election:
			role = c.election
			wg.Add(1)
			go func() { defer wg.Done(); c.observe(ctx) }()
		case record.Semaphore:
			role = c.semaphore
		case record.Queue:
			role = c.consume
			if c.produce {
				wg.Add(1)
				go func() { defer wg.Done(); c.producer(ctx) }()
			}
		default:
			fmt.Fprintf(os.Stderr, "chaosclient: unknown workload %q\n", w)
			os.Exit(2)
		}
		wg.Add(1)
		go func() { defer wg.Done(); role(ctx) }()
	}
	c.out.Emit(record.Event{K: record.Ready})
	c.commands()
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// commands reads standard input until it ends.
func (c *client) commands() {
	sc := bufio.NewScanner(os.Stdin)
	var quiesce sync.Once
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "freeze":
			ms, err := strconv.Atoi(f[1])
			if err != nil {
				continue
			}
			c.freeze()
			c.out.Emit(record.Event{K: record.Frozen, N: ms})
			time.AfterFunc(time.Duration(ms)*time.Millisecond, func() {
				c.freezer.Thaw()
				c.out.Emit(record.Event{K: record.Thawed})
			})
		case len(f) == 1 && f[0] == "quiesce":
			quiesce.Do(func() { close(c.quiet) })
			c.out.Emit(record.Event{K: record.Quiet})
		}
	}
}

// freeze cuts the connections once no release is out (a second at most),
// holding off new ones until then. A release frozen between its write and
// its reply may have landed, handing the lock on at once, or not, and the
// checker cannot tell which: a lease whose release is unconfirmed ends,
// for it, only when its loss is told, after that grant. A release begun
// after the freeze goes nowhere: the lock waits for the session's expiry.
func (c *client) freeze() {
	locked := make(chan struct{})
	go func() {
		c.releasing.Lock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(time.Second):
	}
	c.freezer.Freeze()
	go func() {
		<-locked
		c.releasing.Unlock()
	}()
}

func (c *client) quiesced() bool {
	select {
	case <-c.quiet:
		return true
	default:
		return false
	}
}

// connect returns a new session, retrying until ctx ends.
func (c *client) connect(ctx context.Context) (*zkrecipes.Session, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := zkrecipes.Connect(cctx, c.servers,
			zkrecipes.WithSessionTimeout(c.timeout), zkrecipes.WithDialer(c.freezer.Dial))
		cancel()
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// sessions calls work with live sessions, one after another, until ctx
// ends or the process is quiesced (when stopAtQuiet).
func (c *client) sessions(ctx context.Context, stopAtQuiet bool, work func(ctx context.Context, s *zkrecipes.Session)) {
	for ctx.Err() == nil && !(stopAtQuiet && c.quiesced()) {
		s, err := c.connect(ctx)
		if err != nil {
			return
		}
		sctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-s.Done():
				if err := s.Err(); !errors.Is(err, zkrecipes.ErrClosed) {
					c.out.Emit(record.Event{K: record.Ended, Sid: s.ID(), Err: fmt.Sprint(err)})
				}
			case <-sctx.Done():
			}
			cancel()
		}()
		work(sctx, s)
		cancel()
		s.Close()
	}
}

// watch notes the moment l's Done closes, as its holder sees it: Lost
// when l ends other than by its own release, Freed when by its release.
// A deaf client does not watch.
func (c *client) watch(w string, l *zklock.Lease) {
	if c.deaf {
		return
	}
	f := l.Fence()
	go func() {
		<-l.Done()
		if err := l.Err(); !errors.Is(err, zklock.ErrReleased) {
			c.out.Emit(record.Event{W: w, K: record.Lost, Tok: f.Holding, Sec: f.Section, Err: fmt.Sprint(err)})
		} else {
			c.out.Emit(record.Event{W: w, K: record.Freed, Tok: f.Holding, Sec: f.Section})
		}
	}()
}

// holdFor draws how long to hold a lease.
func (c *client) holdFor() time.Duration {
	return c.holdMin + jitter(c.holdMax-c.holdMin)
}

// hold waits d, or until done closes or ctx ends; false if it did not wait
// the whole time. A deaf client waits d whatever happens: ctx also ends
// when the session does.
func (c *client) hold(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	if c.deaf {
		ctx, done = context.Background(), nil
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
	case <-ctx.Done():
	}
	return false
}

// server is the server s is connected to (or was last).
func server(s *zkrecipes.Session) string { return s.Conn().Server() }

// release emits Release, ends the lease with end and emits Unlocked.
func (c *client) release(w string, l *zklock.Lease, end func(context.Context) error) {
	c.releasing.RLock()
	defer c.releasing.RUnlock()
	f := l.Fence()
	c.out.Emit(record.Event{W: w, K: record.Release, Tok: f.Holding, Sec: f.Section})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := end(ctx)
	e := record.Event{W: w, K: record.Unlocked, Tok: f.Holding, Sec: f.Section}
	if err != nil {
		e.Err = err.Error()
		if errors.Is(err, zklock.ErrLockLost) {
			e.F = "lost"
		}
	}
	c.out.Emit(e)
}

func (c *client) mutex(ctx context.Context) {
	reg := &register{addr: c.reg, out: c.out, w: record.Mutex}
	defer reg.close()
	c.sessions(ctx, true, func(ctx context.Context, s *zkrecipes.Session) {
		m, err := zklock.NewMutex(s, c.root+"/mutex")
		if err != nil {
			fail(err)
		}
		for ctx.Err() == nil && !c.quiesced() {
			c.out.Emit(record.Event{W: record.Mutex, K: record.Acquiring, Sid: s.ID()})
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			l, err := m.Lock(lctx)
			cancel()
			if err != nil {
				continue
			}
			c.out.Emit(record.Event{W: record.Mutex, K: record.Grant, Tok: l.Token(), Sid: s.ID(), Srv: server(s), ID: l.Path()})
			c.watch(record.Mutex, l)
			c.critical(ctx, reg, l, c.work, c.holdFor())
			c.release(record.Mutex, l, l.Unlock)
			sleep(ctx, jitter(20*time.Millisecond))
		}
	})
}

// cached is the CachedMutex workload (see the top of this file): phases
// of sections, a Mutex now and then beside it.
func (c *client) cached(ctx context.Context) {
	path := c.root + "/cached"
	c.sessions(ctx, true, func(ctx context.Context, s *zkrecipes.Session) {
		m, err := zklock.NewCachedMutex(s, path)
		if err != nil {
			fail(err)
		}
		plain, err := zklock.NewMutex(s, path)
		if err != nil {
			fail(err)
		}
		newReg := func() *register { return &register{addr: c.regC, out: c.out, w: record.Cached} }
		var wg sync.WaitGroup
		// A Mutex on the same path now and then; with -bypass often, and
		// every turn of the cached loop hot: the checker's self-test needs
		// contenders to join while deaf holdings are kept.
		every := func() time.Duration { return 3*time.Second + jitter(7*time.Second) }
		if c.bypass {
			every = func() time.Duration { return 300*time.Millisecond + jitter(700*time.Millisecond) }
		}
		wg.Go(func() {
			reg := newReg()
			defer reg.close()
			for waited(ctx, every()) && !c.quiesced() {
				c.section(ctx, s, plain.Lock, reg, c.work, 100*time.Millisecond+jitter(400*time.Millisecond))
			}
		})
		reg := newReg()
		defer reg.close()
		for waited(ctx, time.Second+jitter(5*time.Second)) && !c.quiesced() {
			if c.bypass || rand.IntN(3) == 0 {
				d := time.Second + jitter(time.Second)
				var hot sync.WaitGroup
				hot.Go(func() { c.cachedHot(ctx, s, m, reg, d) })
				hot.Go(func() {
					reg := newReg()
					defer reg.close()
					c.cachedHot(ctx, s, m, reg, d)
				})
				hot.Wait()
				continue
			}
			if !c.section(ctx, s, m.Lock, reg, c.work, c.holdFor()) {
				continue
			}
			for range rand.IntN(3) {
				sleep(ctx, 20*time.Millisecond+jitter(80*time.Millisecond))
				c.section(ctx, s, m.Lock, reg, time.Millisecond, 50*time.Millisecond+jitter(250*time.Millisecond))
			}
		}
		wg.Wait()
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Release(rctx)
	})
}

// section takes one lease of the cached workload's path with lock (a
// CachedMutex's or a Mutex's) and holds it for about d, its
// read-modify-write taking about work; false if none was granted.
func (c *client) section(ctx context.Context, s *zkrecipes.Session, lock func(context.Context) (*zklock.Lease, error), reg *register, work, d time.Duration) bool {
	c.out.Emit(record.Event{W: record.Cached, K: record.Acquiring, Sid: s.ID()})
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := lock(lctx)
	cancel()
	if err != nil {
		return false
	}
	f := l.Fence()
	c.out.Emit(record.Event{W: record.Cached, K: record.Grant, Tok: f.Holding, Sec: f.Section, Sid: s.ID(), Srv: server(s), ID: l.Path()})
	c.watch(record.Cached, l)
	c.critical(ctx, reg, l, work, d)
	c.release(record.Cached, l, l.Unlock)
	return true
}

// cachedHot takes sections back to back for d, a read-modify-write each.
// With -bypass it keeps one section instead, and reports a new one every
// millisecond or so.
func (c *client) cachedHot(ctx context.Context, s *zkrecipes.Session, m *zklock.CachedMutex, reg *register, d time.Duration) {
	until := time.Now().Add(d)
	if !c.bypass {
		for time.Now().Before(until) && ctx.Err() == nil {
			if !c.section(ctx, s, m.Lock, reg, time.Millisecond, 0) {
				return
			}
		}
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := m.Lock(lctx)
	cancel()
	if err != nil {
		return
	}
	f := l.Fence()
	for i := uint32(1); time.Now().Before(until) && l.Err() == nil; i++ {
		e := record.Event{W: record.Cached, Tok: f.Holding, Sec: f.Section*100000 + i, Sid: s.ID()}
		for _, k := range []string{record.Acquiring, record.Grant, record.Release, record.Unlocked, record.Freed} {
			e.K = k
			c.out.Emit(e)
		}
		time.Sleep(time.Millisecond)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	_ = l.Unlock(rctx)
	_ = m.Release(rctx) // its next holding has another token: no section number used twice
}

// critical is the work done under the lock, for about d in all: read the
// register, work (about work), write back what was read plus one, then
// hold on for the rest of d. Each request shows the lease's fence; the
// register refuses fences lower than the highest it has seen. The
// read-modify-write comes first, so that a holder stopped or cut off just
// after its grant is one with its write still to do, and the holder
// granted next has written by the time it wakes (Kleppmann's scenario).
func (c *client) critical(ctx context.Context, reg *register, l *zklock.Lease, work, d time.Duration) {
	tok := l.Fence()
	if c.unfenced {
		tok = zklock.Fence{} // no token: the register cannot tell a stale holder
	}
	held := func() bool { return c.unfenced || l.Err() == nil }
	work = work/2 + jitter(work)
	if !held() {
		return
	}
	if v, ok := reg.read(c.opID(), tok); ok {
		time.Sleep(work) // not cut short: a paused holder also carries on
		if !held() {
			return
		}
		reg.write(c.opID(), tok, v, v+1)
	}
	c.hold(ctx, l.Done(), d-work)
}

func (c *client) opID() string {
	return fmt.Sprintf("%d.%d.%d", c.out.P, c.out.Inc, c.ops.Add(1))
}

func (c *client) election(ctx context.Context) {
	c.sessions(ctx, true, func(ctx context.Context, s *zkrecipes.Session) {
		el, err := zklock.NewElection(s, c.root+"/election")
		if err != nil {
			fail(err)
		}
		value := []byte(fmt.Sprintf("client %d.%d", c.out.P, c.out.Inc))
		for ctx.Err() == nil && !c.quiesced() {
			c.out.Emit(record.Event{W: record.Election, K: record.Acquiring, Sid: s.ID()})
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			l, err := el.Campaign(cctx, value)
			cancel()
			if err != nil {
				continue
			}
			c.out.Emit(record.Event{W: record.Election, K: record.Grant, Tok: l.Token(), Sid: s.ID(), Srv: server(s)})
			c.watch(record.Election, l.Lease)
			c.hold(ctx, l.Done(), c.holdFor())
			c.release(record.Election, l.Lease, l.Resign)
			sleep(ctx, jitter(50*time.Millisecond))
		}
	})
}

// observe reports every leader Observe tells of, until the process ends.
func (c *client) observe(ctx context.Context) {
	c.sessions(ctx, false, func(ctx context.Context, s *zkrecipes.Session) {
		el, err := zklock.NewElection(s, c.root+"/election")
		if err != nil {
			fail(err)
		}
		for l := range el.Observe(ctx) {
			c.out.Emit(record.Event{W: record.Observe, K: record.Obs, Tok: l.Token, ID: l.Path, Sid: s.ID(), Srv: server(s)})
		}
	})
}

func (c *client) semaphore(ctx context.Context) {
	c.sessions(ctx, true, func(ctx context.Context, s *zkrecipes.Session) {
		sm, err := zklock.NewSemaphore(s, c.root+"/semaphore", c.permits)
		if err != nil {
			fail(err)
		}
		for ctx.Err() == nil && !c.quiesced() {
			c.out.Emit(record.Event{W: record.Semaphore, K: record.Acquiring, Sid: s.ID()})
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			l, err := sm.Acquire(actx)
			cancel()
			if err != nil {
				continue
			}
			c.out.Emit(record.Event{W: record.Semaphore, K: record.Grant, Tok: l.Token(), Sid: s.ID(), Srv: server(s)})
			c.watch(record.Semaphore, l)
			c.hold(ctx, l.Done(), c.holdFor())
			c.release(record.Semaphore, l, l.Unlock)
			sleep(ctx, jitter(50*time.Millisecond))
		}
	})
}

func (c *client) producer(ctx context.Context) {
	n, round := 0, 0
	c.sessions(ctx, true, func(ctx context.Context, s *zkrecipes.Session) {
		q, err := fairqueue.New(s, c.root+"/queue")
		if err != nil {
			fail(err)
		}
		for ctx.Err() == nil && !c.quiesced() {
			// Every other put is a PutMany of two, whose payloads share a
			// blob: padded past what an item's name holds (a Put's ride
			// in their names).
			round++
			var ds []string
			var items [][]byte
			for range 1 + round%2 {
				n++
				d := fmt.Sprintf("p%d.%d.%d", c.out.P, c.out.Inc, n)
				if round%2 == 1 {
					d += "." + strings.Repeat("b", 48)
				}
				ds, items = append(ds, d), append(items, []byte(d))
				c.out.Emit(record.Event{W: record.Queue, K: record.Put, D: d})
			}
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			ids, err := put(pctx, q, items)
			cancel()
			for i, d := range ds {
				if err != nil {
					c.out.Emit(record.Event{W: record.Queue, K: record.PutErr, D: d, Err: err.Error(), Unknown: errors.Is(err, fairqueue.ErrOutcomeUnknown) || zkrecipes.IsAmbiguous(err)})
				} else {
					c.out.Emit(record.Event{W: record.Queue, K: record.PutOK, D: d, ID: ids[i]})
				}
			}
			sleep(ctx, 250*time.Millisecond+jitter(250*time.Millisecond))
		}
	})
}

// put puts one item with Put, more with PutMany.
func put(ctx context.Context, q *fairqueue.Queue, items [][]byte) ([]string, error) {
	if len(items) > 1 {
		return q.PutMany(ctx, items)
	}
	id, err := q.Put(ctx, items[0])
	return []string{id}, err
}

func (c *client) consume(ctx context.Context) {
	c.sessions(ctx, false, func(ctx context.Context, s *zkrecipes.Session) {
		q, err := fairqueue.New(s, c.root+"/queue")
		if err != nil {
			fail(err)
		}
		c.out.Emit(record.Event{W: record.Queue, K: record.Consumer, Sid: s.ID(), Srv: server(s)})
		for ctx.Err() == nil {
			c.out.Emit(record.Event{W: record.Queue, K: record.Taking, Sid: s.ID(), Srv: server(s)})
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			j, err := q.Take(tctx)
			cancel()
			if err != nil {
				c.out.Emit(record.Event{W: record.Queue, K: record.TakeErr, Sid: s.ID(), Err: err.Error()})
				continue
			}
			c.out.Emit(record.Event{W: record.Queue, K: record.Take, ID: j.ID(), D: string(j.Data()), N: j.Attempt(), Sid: s.ID(), Srv: server(s)})
			settled := c.watchJob(j)
			work := jitter(c.jobHold)
			if rand.N(8) == 0 {
				work = jitter(c.jobLong) // a long job: its claim held for seconds, as a lease is
			}
			c.hold(ctx, j.Done(), work)
			c.out.Emit(record.Event{W: record.Queue, K: record.Acking, ID: j.ID(), D: string(j.Data())})
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = j.Ack(actx)
			cancel()
			if err != nil {
				lost := errors.Is(err, fairqueue.ErrClaimLost) && !errors.Is(err, fairqueue.ErrOutcomeUnknown)
				c.out.Emit(record.Event{W: record.Queue, K: record.AckErr, ID: j.ID(), D: string(j.Data()), Err: err.Error(), Unknown: !lost})
			} else {
				c.out.Emit(record.Event{W: record.Queue, K: record.Ack, ID: j.ID(), D: string(j.Data())})
			}
			close(settled)
		}
	})
}

// watchJob notes the moment j's Done closes (its claim lost), until the
// returned channel is closed once j is settled. A deaf client does not
// watch.
func (c *client) watchJob(j *fairqueue.Job) chan struct{} {
	settled := make(chan struct{})
	if c.deaf {
		return settled
	}
	go func() {
		select {
		case <-j.Done():
			c.out.Emit(record.Event{W: record.Queue, K: record.Lost, ID: j.ID(), D: string(j.Data())})
		case <-settled:
		}
	}()
	return settled
}

// register is the client side of the fenced register (see package chaos):
// lines "R op tok" and "W op tok expect value", answered "OK value",
// "OK" or "REJ".
type register struct {
	addr string
	out  *record.Writer
	w    string // the workload whose register it is
	conn net.Conn
	rd   *bufio.Reader
}

func (r *register) read(op string, tok zklock.Fence) (int64, bool) {
	r.out.Emit(record.Event{W: r.w, K: record.Call, Op: op, F: "r", Tok: tok.Holding, Sec: tok.Section})
	reply, err := r.do(fmt.Sprintf("R %s %s\n", op, fenceArg(tok)))
	if err != nil {
		return 0, false // no reply: the harness's log of the register says what happened
	}
	if reply == "REJ" {
		r.out.Emit(record.Event{W: r.w, K: record.Ret, Op: op, F: "r", Rej: true})
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimPrefix(reply, "OK "), 10, 64)
	if err != nil {
		fail(fmt.Errorf("register: %q", reply))
	}
	r.out.Emit(record.Event{W: r.w, K: record.Ret, Op: op, F: "r", V: v})
	return v, true
}

func (r *register) write(op string, tok zklock.Fence, expect, v int64) {
	r.out.Emit(record.Event{W: r.w, K: record.Call, Op: op, F: "w", Tok: tok.Holding, Sec: tok.Section, X: expect, V: v})
	reply, err := r.do(fmt.Sprintf("W %s %s %d %d\n", op, fenceArg(tok), expect, v))
	if err != nil {
		return
	}
	r.out.Emit(record.Event{W: r.w, K: record.Ret, Op: op, F: "w", Rej: reply == "REJ"})
}

// fenceArg is a fence as the register reads it: "tok", or "tok.sec" for a
// CachedMutex's section.
func fenceArg(f zklock.Fence) string {
	if f.Section == 0 {
		return strconv.FormatInt(f.Holding, 10)
	}
	return fmt.Sprintf("%d.%d", f.Holding, f.Section)
}

func (r *register) do(req string) (string, error) {
	if r.conn == nil {
		c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		r.conn, r.rd = c, bufio.NewReader(c)
	}
	r.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.conn.Write([]byte(req)); err != nil {
		r.close()
		return "", err
	}
	line, err := r.rd.ReadString('\n')
	if err != nil {
		r.close()
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func (r *register) close() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// waited sleeps d and reports whether ctx is still live.
func waited(ctx context.Context, d time.Duration) bool {
	sleep(ctx, d)
	return ctx.Err() == nil
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaosclient:", err)
	os.Exit(1)
}
