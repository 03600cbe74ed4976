package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
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
	// KillHead kills the process whose consumer stands at the head of the
	// queue's line, the one that hands items out, then starts a new one in
	// its slot: the consumer behind it must pass it over.
	KillHead = "kill -9 the queue's head"
	// StopHead stops it with SIGSTOP past its session timeout: frozen, it
	// neither hands out nor leaves the line until its session ends.
	StopHead = "SIGSTOP the queue's head"
)

// AllFaults is every kind run by default, in the order the summary lists
// them.
var AllFaults = []string{KillServer, KillLeader, IsolateFollower, IsolateLeader, Freeze, PauseProc, StopIdle, KillClient, KillHead, StopHead}

// faultNames are the kinds' names for flags (-chaos.faults).
var faultNames = map[string]string{
	"kill-server":      KillServer,
	"kill-leader":      KillLeader,
	"isolate-follower": IsolateFollower,
	"isolate-leader":   IsolateLeader,
	"partition":        Partition,
	"freeze-client":    Freeze,
	"stop-holder":      PauseProc,
	"stop-idle":        StopIdle,
	"kill-client":      KillClient,
	"kill-head":        KillHead,
	"stop-head":        StopHead,
}

// ParseFaults turns a comma-separated list of fault names (kill-server,
// kill-leader, isolate-follower, isolate-leader, partition, freeze-client,
// stop-holder, stop-idle, kill-client, kill-head, stop-head; "all" for AllFaults) into
// kinds.
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
	line    string // the queue's line directory, where consumers wait

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
	case KillHead, StopHead:
		slot, node := n.head()
		if slot < 0 {
			n.t.Logf("chaos: %s: no consumer at the head of the line; skipped", kind)
			return
		}
		p := n.cs.Get(slot)
		if p == nil {
			return
		}
		held := n.held.of(slot)
		f.Target = fmt.Sprintf("client %d.%d at the head (%s), %s", slot, p.Inc(), node, describeHoldings("holding", held))
		f.Start = record.Now()
		if kind == StopHead {
			d := n.past()
			p.Signal(syscall.SIGSTOP)
			time.Sleep(d)
			p.Signal(syscall.SIGCONT)
			n.pauses = append(n.pauses, Pause{P: slot, Inc: p.Inc(), Start: f.Start, End: record.Now()})
			break
		}
		if inc := n.cs.Kill(slot); inc >= 0 {
			n.deaths[[2]int{slot, inc}] = record.Now()
		}
		n.held.forget(slot)
		time.Sleep(n.between(time.Second, 3*time.Second))
		if _, err := n.cs.Start(slot); err != nil {
			n.t.Logf("chaos: restart client %d: %v", slot, err)
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

// head waits (up to the longest hold) for a consumer of a live process to
// stand at the head of the queue's line, and returns its slot and node; -1
// if none came. The head is the line's lowest sequence number; its node's
// owner is the consumer's session.
func (n *nemesis) head() (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s, err := zkrecipes.Connect(ctx, n.cluster.Addrs(), zkrecipes.WithSessionTimeout(10*time.Second))
	cancel()
	if err != nil {
		return -1, ""
	}
	defer s.Close()
	conn := s.Conn()
	for deadline := time.Now().Add(n.holdMax + time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		nodes, _, err := conn.Children(n.line)
		if err != nil || len(nodes) == 0 {
			continue
		}
		seq := func(name string) string { return name[strings.LastIndexByte(name, '-')+1:] }
		first := slices.MinFunc(nodes, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
		// go-zookeeper answers a missing node with a zero Stat: the bool says.
		there, st, err := conn.Exists(n.line + "/" + first)
		if err != nil || !there {
			continue
		}
		slot, inc, ok := n.held.consumer(st.EphemeralOwner)
		if p := n.cs.Get(slot); ok && p != nil && p.Inc() == inc {
			return slot, first
		}
	}
	return -1, ""
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
