package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Kinds of fault the nemesis injects, one at a time, each healed before
// the next.
const (
	KillServer = "kill -9 a server"   // then restart it
	KillLeader = "kill -9 the leader" // then restart it
	// IsolateFollower cuts a follower on which a holder's session sits from
	// the other members, past the session timeout, while its clients still
	// reach it: the follower answers them on its own for syncLimit x
	// tickTime while the leader expires their sessions.
	IsolateFollower = "isolate a holder's follower"
	// IsolateLeader does the same to the leader (with a holder on it when
	// there is one within a few seconds).
	IsolateLeader = "isolate the leader"
	Partition     = "partition a server" // any server, the leader half the time (not in AllFaults)
	Freeze        = "freeze a client"    // its connections, past its session timeout, just after a grant
	PauseProc     = "SIGSTOP a holder"   // past its session timeout, mid-hold (just after it read the register)
	// StopIdle stops, past its session timeout, a process just after it
	// ended a CachedMutex section: its holding kept idle, a frozen holder
	// holds up the next contender until its session expires, and must not
	// grant itself a section when it wakes.
	StopIdle   = "SIGSTOP an idle cached holder"
	KillClient = "kill -9 a client" // then start a new one in its slot
	// KillDispatcher kills the process whose Queue is the queue's
	// dispatcher (the session that owns the lowest node of the queue's
	// election, dispatch/), then starts a new one in its slot: hand-out
	// stalls until its session expires and the next candidate takes over.
	KillDispatcher = "kill -9 the queue's dispatcher"
	// StopDispatcher stops it with SIGSTOP past its session timeout:
	// frozen, it hands nothing out, and is deposed once its session
	// expires.
	StopDispatcher = "SIGSTOP the queue's dispatcher"
	// IsolateDispatcher cuts the server the dispatcher's session is
	// connected to off from the other servers, past the session timeout,
	// while its clients still reach it: the dispatcher's hand-outs cannot
	// commit, and the ensemble expires its session. When that server is
	// the leader, the cut lasts past the session timeout counted from the
	// moment the others have elected a new one.
	IsolateDispatcher = "isolate the dispatcher's server"
)

// AllFaults is every kind run by default, in the order the summary lists
// them.
var AllFaults = []string{KillServer, KillLeader, IsolateFollower, IsolateLeader, Freeze, PauseProc, StopIdle, KillClient,
	KillDispatcher, StopDispatcher, IsolateDispatcher}

// DispatcherFaults are the kinds aimed at the queue's dispatcher, after
// each of which CheckStalls measures the hand-out stall.
var DispatcherFaults = []string{KillDispatcher, StopDispatcher, IsolateDispatcher}

// faultNames are the kinds' names for flags (-chaos.faults).
var faultNames = map[string]string{
	"kill-server":        KillServer,
	"kill-leader":        KillLeader,
	"isolate-follower":   IsolateFollower,
	"isolate-leader":     IsolateLeader,
	"partition":          Partition,
	"freeze-client":      Freeze,
	"stop-holder":        PauseProc,
	"stop-idle":          StopIdle,
	"kill-client":        KillClient,
	"kill-dispatcher":    KillDispatcher,
	"stop-dispatcher":    StopDispatcher,
	"isolate-dispatcher": IsolateDispatcher,
}

// ParseFaults turns a comma-separated list of fault names (kill-server,
// kill-leader, isolate-follower, isolate-leader, partition, freeze-client,
// stop-holder, stop-idle, kill-client, kill-dispatcher, stop-dispatcher,
// isolate-dispatcher; "all" for AllFaults) into kinds.
func ParseFaults(list string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		switch k, ok := faultNames[name]; {
		case name == "all":
			out = append(out, AllFaults...)
		case ok:
			out = append(out, k)
		default:
			var names []string
			for n := range faultNames {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("chaos: unknown fault %q (known: all, %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// Fault is one fault injected.
type Fault struct {
	Kind       string
	Target     string
	Start, End int64
	// A dispatcher fault's aim: the dispatcher's process (Slot, Inc) and
	// session, the server cut off (IsolateDispatcher), and Serving, when
	// the ensemble could commit again: Start, unless the server cut off was
	// the leader, then when the others had elected a new one.
	Slot, Inc int
	Session   int64
	Server    string
	Serving   int64
}

// nemesis injects faults into a cluster and its clients.
type nemesis struct {
	t       testingT
	cluster *zktest.Cluster
	cs      *Clients
	rng     *rand.Rand
	timeout time.Duration // the clients' session timeout
	holdMax time.Duration // the longest a lease is held
	kinds   []string
	held    *holders
	elect   string // the queue's election directory, where its dispatcher stands

	faults []Fault
	pauses []Pause
	deaths map[[2]int]int64
}

// testingT is what the nemesis needs of a test.
type testingT interface {
	Helper()
	Logf(format string, args ...any)
}

// run injects faults until deadline: rounds of every kind of fault in a
// random order, with a pause of one to four seconds after each.
func (n *nemesis) run(deadline time.Time) {
	for time.Now().Before(deadline) {
		order := n.rng.Perm(len(n.kinds))
		for _, i := range order {
			if !time.Now().Before(deadline) {
				return
			}
			n.inject(n.kinds[i])
			time.Sleep(time.Second + n.between(0, 3*time.Second))
		}
	}
}

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

// past is a duration longer than the session timeout: the session is
// expired by the time it is over.
func (n *nemesis) past() time.Duration {
	return n.timeout + n.timeout/3 + n.between(0, n.timeout)
}

// cut is how long a server stays isolated: past the session timeout by
// enough for the ensemble to expire the sessions on it and grant their
// locks to others.
func (n *nemesis) cut() time.Duration {
	return n.between(n.timeout+3*time.Second, n.timeout+7*time.Second)
}

func (n *nemesis) inject(kind string) {
	f := Fault{Kind: kind, Start: record.Now()}
	servers := len(n.cluster.Addrs())
	switch kind {
	case KillServer, KillLeader:
		i := n.rng.IntN(servers)
		if kind == KillLeader {
			if i = n.cluster.Leader(); i < 0 {
				f.Kind, i = KillServer, n.rng.IntN(servers)
			}
		}
		f.Target = fmt.Sprintf("server %d", i)
		n.cluster.Stop(i)
		time.Sleep(n.between(2*time.Second, 5*time.Second))
		n.cluster.Restart(i)
	case IsolateFollower, IsolateLeader, Partition:
		i, on := n.isolated(kind)
		if i < 0 {
			n.t.Logf("chaos: %s: no leader to tell the followers by; skipped", kind)
			return
		}
		f.Target = fmt.Sprintf("server %d %s, %s", i, n.cluster.Addr(i), describeHoldings("holders on it", on))
		f.Start = record.Now()
		n.cluster.Isolate(i)
		time.Sleep(n.cut())
		n.cluster.Heal()
		n.waitHealthy()
	case Freeze:
		slot := n.fresh()
		p := n.cs.Get(slot)
		if p == nil {
			return
		}
		d := n.past()
		f.Target = fmt.Sprintf("client %d.%d for %v, %s", slot, p.Inc(), d.Round(time.Millisecond), describeHoldings("holding", n.held.of(slot)))
		f.Start = record.Now()
		p.Send(fmt.Sprintf("freeze %d", d.Milliseconds()))
		time.Sleep(d)
	case PauseProc, StopIdle:
		slot := n.midWrite()
		if kind == StopIdle {
			slot = n.idle()
		}
		p := n.cs.Get(slot)
		if p == nil {
			return
		}
		d := n.past()
		held := n.held.of(slot)
		start := record.Now()
		p.Signal(syscall.SIGSTOP)
		f.Start = start
		f.Target = fmt.Sprintf("client %d.%d for %v, %s", slot, p.Inc(), d.Round(time.Millisecond), describeHoldings("holding", held))
		time.Sleep(d)
		p.Signal(syscall.SIGCONT)
		n.pauses = append(n.pauses, Pause{P: slot, Inc: p.Inc(), Start: start, End: record.Now()})
	case KillDispatcher, StopDispatcher, IsolateDispatcher:
		if !n.aimAtDispatcher(&f) {
			return
		}
	case KillClient:
		slot := n.target()
		held := n.held.of(slot)
		inc := n.cs.Kill(slot)
		if inc >= 0 {
			n.deaths[[2]int{slot, inc}] = record.Now()
		}
		n.held.forget(slot)
		f.Target = fmt.Sprintf("client %d.%d, %s", slot, inc, describeHoldings("holding", held))
		time.Sleep(n.between(time.Second, 3*time.Second))
		if _, err := n.cs.Start(slot); err != nil {
			n.t.Logf("chaos: restart client %d: %v", slot, err)
		}
	}
	f.End = record.Now()
	n.faults = append(n.faults, f)
}

// isolated picks the server to isolate and says which holders' sessions
// sit on it. For IsolateFollower, the follower on which a lease was just
// granted (it waits up to the longest hold for one): cut off now, its
// holder goes on holding past the moment the ensemble expires its session,
// unless the library tells it in time; failing that, the follower with the
// most holders, or any. For IsolateLeader, the leader, likewise just after
// a grant on it if one comes. For Partition, any server, the leader half
// the time. -1 when there is no leader to tell.
func (n *nemesis) isolated(kind string) (int, []Holding) {
	addrs := n.cluster.Addrs()
	on := func(i int) []Holding { return n.held.on(addrs[i]) }
	if kind == Partition {
		i := n.rng.IntN(len(addrs))
		if n.rng.IntN(2) == 0 {
			if l := n.cluster.Leader(); l >= 0 {
				i = l
			}
		}
		return i, on(i)
	}
	leader := -1
	for deadline := time.Now().Add(5 * time.Second); leader < 0; time.Sleep(100 * time.Millisecond) {
		if leader = n.cluster.Leader(); leader < 0 && time.Now().After(deadline) {
			return -1, nil
		}
	}
	want := func(i int) bool { return (i == leader) == (kind == IsolateLeader) }
	grants := latest(n.held.leases)
	timeout := time.After(n.holdMax + time.Second)
	for waiting := true; waiting; {
		select {
		case g := <-grants:
			if i := slices.Index(addrs, g.Srv); i >= 0 && want(i) {
				return i, on(i)
			}
		case <-timeout:
			waiting = false
		}
	}
	best, most := -1, -1
	for i := range addrs {
		if h := leases(on(i)); want(i) && (h > most || (h == most && n.rng.IntN(2) == 0)) {
			best, most = i, h
		}
	}
	return best, on(best)
}

// aimAtDispatcher injects a dispatcher fault: it finds the dispatcher's
// process (see dispatcher), then kills it and starts a new one in its
// slot, stops it past its session timeout, or cuts off the server its
// session is connected to. It fills f's aim, and keeps the fault on until
// the hand-out stall's bound (see StallBound) has passed since the
// ensemble could commit, so that the next fault does not begin within it;
// false if no dispatcher was found.
func (n *nemesis) aimAtDispatcher(f *Fault) bool {
	slot, inc, sid, node := n.dispatcher()
	var p *Proc
	if slot >= 0 {
		p = n.cs.Get(slot)
	}
	if p == nil || p.Inc() != inc {
		n.t.Logf("chaos: %s: no live process's consumer is the queue's dispatcher; skipped", f.Kind)
		return false
	}
	f.Slot, f.Inc, f.Session = slot, inc, sid
	aim := fmt.Sprintf("client %d.%d's dispatcher (session 0x%x, %s), %s", slot, inc, sid, path.Base(node), describeHoldings("holding", n.held.of(slot)))
	switch f.Kind {
	case KillDispatcher:
		f.Target = aim
		f.Start = record.Now()
		if inc := n.cs.Kill(slot); inc >= 0 {
			n.deaths[[2]int{slot, inc}] = record.Now()
		}
		n.held.forget(slot)
		time.Sleep(n.between(time.Second, 3*time.Second))
		if _, err := n.cs.Start(slot); err != nil {
			n.t.Logf("chaos: restart client %d: %v", slot, err)
		}
		f.Serving = f.Start
	case StopDispatcher:
		d := n.past()
		f.Target = fmt.Sprintf("%s, for %v", aim, d.Round(time.Millisecond))
		f.Start = record.Now()
		p.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		p.Signal(syscall.SIGCONT)
		n.pauses = append(n.pauses, Pause{P: slot, Inc: inc, Start: f.Start, End: record.Now()})
		f.Serving = f.Start
	case IsolateDispatcher:
		i := n.serverOf(sid)
		if i < 0 {
			n.t.Logf("chaos: %s: no server lists session 0x%x among its connections; skipped", f.Kind, sid)
			return false
		}
		leader := n.cluster.Leader()
		f.Server = n.cluster.Addr(i)
		role := "a follower"
		if i == leader {
			role = "the leader"
		}
		f.Target = fmt.Sprintf("server %d %s (%s), on which %s", i, f.Server, role, aim)
		f.Start = record.Now()
		n.cluster.Isolate(i)
		f.Serving = f.Start
		if i == leader {
			// The others elect a new leader once they give up on this one
			// (syncLimit x tickTime): only then can the dispatcher's session
			// expire, and the cut lasts past its timeout from then on.
			f.Serving = n.newLeader(i, 30*time.Second)
			if f.Serving == 0 {
				n.t.Logf("chaos: %s: the other servers elected no leader within 30s of cutting off server %d", f.Kind, i)
				f.Serving = record.Now()
			}
		}
		time.Sleep(time.Until(clockTime(f.Serving).Add(n.cut())))
		n.cluster.Heal()
		n.waitHealthy()
	}
	time.Sleep(time.Until(clockTime(f.Serving).Add(StallBound(n.timeout))))
	return true
}

// clockTime is the wall-clock moment of t, a time of the shared monotonic
// clock (record.Now), for time.Until.
func clockTime(t int64) time.Time { return time.Now().Add(time.Duration(t - record.Now())) }

// dispatcher waits (up to the longest hold) for the queue's dispatcher to
// be the consumer of a live process, and returns that process's slot and
// incarnation, the session and the election node; slot -1 if none came.
// The dispatcher is the session that owns the lowest node of the queue's
// election (zklock.Election.Leader); the node's data is the consumer's
// name, "<session hex>-<tag>", which must name the same session.
func (n *nemesis) dispatcher() (slot, inc int, sid int64, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s, err := zkrecipes.Connect(ctx, n.cluster.Addrs(), zkrecipes.WithSessionTimeout(10*time.Second))
	cancel()
	if err != nil {
		return -1, 0, 0, ""
	}
	defer s.Close()
	el, err := zklock.NewElection(s, n.elect)
	if err != nil {
		n.t.Logf("chaos: the queue's election: %v", err)
		return -1, 0, 0, ""
	}
	for deadline := time.Now().Add(n.holdMax + time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := el.Leader(ctx)
		cancel()
		if err != nil {
			continue
		}
		if name := fmt.Sprintf("%016x-", uint64(l.SessionID)); !strings.HasPrefix(string(l.Value), name) {
			n.t.Logf("chaos: the dispatcher's node %s, owned by session 0x%x, names %q", l.Path, l.SessionID, l.Value)
		}
		slot, inc, ok := n.held.consumer(l.SessionID)
		if p := n.cs.Get(slot); ok && p != nil && p.Inc() == inc {
			return slot, inc, l.SessionID, l.Path
		}
	}
	return -1, 0, 0, ""
}

// serverOf returns the server to which session sid is connected, as the
// servers list their connections (the four-letter word cons), or -1.
func (n *nemesis) serverOf(sid int64) int {
	want := fmt.Sprintf("sid=0x%x,", uint64(sid))
	for i, a := range n.cluster.Addrs() {
		if !n.cluster.Running(i) {
			continue
		}
		if reply, err := zktest.FourLetter(a, "cons"); err == nil && strings.Contains(reply, want) {
			return i
		}
	}
	return -1
}

// newLeader waits (up to limit) until a server other than cut leads, and
// returns when it was seen to (record.Now), or 0.
func (n *nemesis) newLeader(cut int, limit time.Duration) int64 {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for i, a := range n.cluster.Addrs() {
			if i == cut {
				continue
			}
			if reply, err := zktest.FourLetter(a, "srvr"); err == nil && strings.Contains(reply, "Mode: leader") {
				return record.Now()
			}
		}
	}
	return 0
}

// leases counts the holdings of locks, permits and leaderships (not jobs).
func leases(hs []Holding) int {
	c := 0
	for _, h := range hs {
		if h.W != record.Queue {
			c++
		}
	}
	return c
}

// waitHealthy waits (up to a minute) until every server serves, one as the
// leader: an isolated server has rejoined.
func (n *nemesis) waitHealthy() {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		leaders, members := 0, 0
		for _, a := range n.cluster.Addrs() {
			reply, err := zktest.FourLetter(a, "srvr")
			switch {
			case err != nil:
			case strings.Contains(reply, "Mode: leader"):
				leaders++
				members++
			case strings.Contains(reply, "Mode: follower"):
				members++
			}
		}
		if leaders == 1 && members == len(n.cluster.Addrs()) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Logf("chaos: the ensemble is not whole a minute after healing")
}

// target picks a slot that holds the mutex, else one that holds anything,
// else any (and any at all one time in four).
func (n *nemesis) target() int {
	if n.rng.IntN(4) != 0 {
		if s := n.held.slot(record.Mutex); s >= 0 {
			return s
		}
		if s := n.held.slot(""); s >= 0 {
			return s
		}
	}
	return n.rng.IntN(n.cs.N())
}

// fresh waits (up to the longest hold) for a client to be granted the
// mutex, and returns its slot: cut off now, it is cut off for the most of
// its hold. Else target().
func (n *nemesis) fresh() int { return n.next(n.held.grants) }

// next waits (up to the longest hold) for a slot signalled on ch after
// now, and returns it; else target().
func (n *nemesis) next(ch chan int) int {
	select {
	case slot := <-latest(ch):
		return slot
	case <-time.After(n.holdMax + time.Second):
		return n.target()
	}
}

// midWrite waits (up to the longest hold) for a mutex holder to have read
// the register, and returns its slot: stopped now, it wakes past its lease
// with its write still to do. Kleppmann's scenario. Else a holder of
// anything (target).
func (n *nemesis) midWrite() int { return n.next(n.held.reads) }

// idle waits (up to the longest hold) for a process to end a CachedMutex
// section, its holding then likely kept idle, and returns its slot. Else
// target().
func (n *nemesis) idle() int { return n.next(n.held.idle) }

// heal ends every fault left: it is called after run, which heals each
// fault before the next, so this is a safety net.
func (n *nemesis) heal() {
	n.cluster.Heal()
	for slot := range n.cs.N() {
		if p := n.cs.Get(slot); p == nil {
			if _, err := n.cs.Start(slot); err != nil {
				n.t.Logf("chaos: restart client %d: %v", slot, err)
			}
		} else {
			p.Signal(syscall.SIGCONT)
		}
	}
	for i := range n.cluster.Addrs() {
		if !n.cluster.Running(i) {
			n.cluster.Restart(i)
		}
	}
}

// describeHoldings says what holders a fault hit.
func describeHoldings(what string, hs []Holding) string {
	if len(hs) == 0 {
		return what + ": none"
	}
	var parts []string
	for _, h := range hs {
		what := fmt.Sprintf("%s token %d", h.W, h.Tok)
		if h.W == record.Queue {
			what = "job " + h.ID
		}
		parts = append(parts, fmt.Sprintf("client %d.%d %s", h.Slot, h.Inc, what))
	}
	slices.Sort(parts)
	return what + ": " + strings.Join(parts, ", ")
}
