package chaos

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Kinds of fault the nemesis injects, one at a time, each healed before
// the next.
const (
	KillServer = "kill -9 a server"   // then restart it
	KillLeader = "kill -9 the leader" // then restart it
	Partition  = "partition a server" // cut its links to the other members, then heal
	Freeze     = "freeze a client"    // its connections, past its session timeout
	PauseProc  = "SIGSTOP a client"   // past its session timeout, mid-write when it holds the mutex
	KillClient = "kill -9 a client"   // then start a new one in its slot
)

// AllFaults is every kind, in the order the summary lists them.
var AllFaults = []string{KillServer, KillLeader, Partition, Freeze, PauseProc, KillClient}

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
	kinds   []string
	reads   chan int // slots that just read the register under the mutex
	holder  func() int

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
	case Partition:
		i := n.rng.IntN(servers)
		if n.rng.IntN(2) == 0 {
			if l := n.cluster.Leader(); l >= 0 {
				i = l
			}
		}
		f.Target = fmt.Sprintf("server %d", i)
		n.cluster.Isolate(i)
		time.Sleep(n.between(6*time.Second, 10*time.Second))
		n.cluster.Heal()
	case Freeze:
		slot := n.target()
		p := n.cs.Get(slot)
		if p == nil {
			return
		}
		d := n.past()
		f.Target = fmt.Sprintf("client %d.%d for %v", slot, p.Inc(), d.Round(time.Millisecond))
		p.Send(fmt.Sprintf("freeze %d", d.Milliseconds()))
		time.Sleep(d)
	case PauseProc:
		slot := n.midWrite()
		p := n.cs.Get(slot)
		if p == nil {
			return
		}
		d := n.past()
		f.Target = fmt.Sprintf("client %d.%d for %v", slot, p.Inc(), d.Round(time.Millisecond))
		start := record.Now()
		p.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		p.Signal(syscall.SIGCONT)
		n.pauses = append(n.pauses, Pause{P: slot, Inc: p.Inc(), Start: start, End: record.Now()})
	case KillClient:
		slot := n.target()
		inc := n.cs.Kill(slot)
		if inc >= 0 {
			n.deaths[[2]int{slot, inc}] = record.Now()
		}
		f.Target = fmt.Sprintf("client %d.%d", slot, inc)
		time.Sleep(n.between(time.Second, 3*time.Second))
		if _, err := n.cs.Start(slot); err != nil {
			n.t.Logf("chaos: restart client %d: %v", slot, err)
		}
	}
	f.End = record.Now()
	n.faults = append(n.faults, f)
}

// target picks the slot that holds the mutex, else any.
func (n *nemesis) target() int {
	if h := n.holder(); h >= 0 && n.rng.IntN(4) != 0 {
		return h
	}
	return n.rng.IntN(n.cs.N())
}

// midWrite waits (up to three seconds) for a mutex holder to have read the
// register, and returns its slot: stopped now, it wakes past its lease with
// its write still to do. Kleppmann's scenario.
func (n *nemesis) midWrite() int {
drain:
	for {
		select {
		case <-n.reads: // stale
		default:
			break drain
		}
	}
	select {
	case slot := <-n.reads:
		return slot
	case <-time.After(3 * time.Second):
		return n.target()
	}
}

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
