package bench

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zkrecipes/zkrecipes/chaos"
	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/zktest"
)

var (
	compare    = flag.Bool("compare", false, "run TestLockComparison (make redis-compare)")
	compareFor = flag.Duration("compare.for", 40*time.Second, "how long the nemesis runs against each lock")
	compareOut = flag.String("compare.out", "", "directory for the tables (comparison.md) and porcupine's visualisations")
)

// lockCase is one lock under the same workload and faults.
type lockCase struct {
	name    string
	impl    string // lockclient's -impl
	fencing string
	redis   int // Redis servers it needs
}

var lockCases = []lockCase{
	{"redsync, 1 Redis", "redsync", "none (no token)", 1},
	{"Redlock: redsync over 3 Redis", "redlock", "none (no token)", 3},
	{"plain ephemeral znode (the seeds' ZooKeeper lock)", "ephemeral", "none (no token)", 0},
	{"zklock.Mutex, token not shown", "zklock", "none (token ignored)", 0},
	{"zklock.Mutex + Lease.Token", "zklock+token", "register refuses lower tokens", 0},
}

// caseResult is one row of the table.
type caseResult struct {
	c                      lockCase
	grants, pauses, kills  int
	overlaps               int // two holders at once, neither paused
	reads, writes, refused int
	lostUpdates            int
	verdict                porcupine.CheckResult
}

// TestLockComparison runs the fenced-register workload of package chaos
// (read the register, work, check the lock, write back the value read plus
// one) with each lock in turn, three client processes, and the same
// faults: the holder stopped with SIGSTOP between its check and its write,
// for longer than the lock's lease (Redis expiry, ZooKeeper session
// timeout: both 3s), and a lock server killed with -9 and restarted while
// a holder is inside (Redis as Debian ships it, without an append-only
// file; for Redlock, one server down while a holder takes the lock on the
// other two, then one of those two restarted; for ZooKeeper, the leader of
// a 3-server ensemble). It counts what the register saw: lost updates, and
// stale writes it refused. Then it measures wake-ups per hand-off (see
// wakeups_test.go).
func TestLockComparison(t *testing.T) {
	if !*compare {
		t.Skip("go test ./bench -run TestLockComparison -compare (make redis-compare)")
	}
	zktest.CheckGoroutines(t)
	redisBin := redisBinary(t)
	bin := zktest.BuildProgram(t, "github.com/zkrecipes/zkrecipes/bench/cmd/lockclient")
	cluster := zktest.StartCluster(t, 3)
	out := *compareOut
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var rows []caseResult
	for _, c := range lockCases {
		t.Run(c.impl, func(t *testing.T) {
			r := runLockCase(t, c, bin, redisBin, cluster, *compareFor, out)
			t.Logf("%s: %+v", c.name, r)
			rows = append(rows, r)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| lock | fencing | grants | holders paused past their lease | lock-server kill -9 + restart | two holders at once, neither paused | stale requests refused | lost updates | porcupine |\n")
	fmt.Fprintf(&b, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s |\n", r.c.name, r.c.fencing, r.grants, r.pauses, r.kills, r.overlaps, r.refused, r.lostUpdates, verdict(r.verdict))
	}
	b.WriteString("\n")
	b.WriteString(wakeupTable(t, cluster.Addrs()))
	fmt.Print("\n" + b.String())
	if err := os.WriteFile(filepath.Join(out, "comparison.md"), []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
	for _, r := range rows {
		if r.c.impl == "zklock+token" && (r.lostUpdates > 0 || r.verdict != porcupine.Ok) {
			t.Errorf("zklock.Mutex with its token: %d lost updates, porcupine %s", r.lostUpdates, r.verdict)
		}
	}
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "**not linearizable**"
	}
	return string(r)
}

func runLockCase(t *testing.T, c lockCase, bin, redisBin string, cluster *zktest.Cluster, d time.Duration, out string) caseResult {
	reg, err := chaos.StartRegister()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	var redis []*redisServer
	var redisAddrs []string
	for range c.redis {
		r := startRedis(t, redisBin)
		redis = append(redis, r)
		redisAddrs = append(redisAddrs, r.addr())
	}
	var b [4]byte
	rand.Read(b[:])
	key := "/fencing-" + hex.EncodeToString(b[:])

	var (
		mu      sync.Mutex
		events  []record.Event
		ready   = map[[2]int]bool{}
		holding = map[int]bool{}
		reads   = make(chan int, 1)
		checked = make(chan int, 1)
	)
	offer := func(ch chan int, slot int) {
		select {
		case ch <- slot:
		default:
		}
	}
	sink := func(e record.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		switch {
		case e.K == record.Ready:
			ready[[2]int{e.P, e.Inc}] = true
		case e.K == record.Grant:
			holding[e.P] = true
		case e.K == record.Release:
			holding[e.P] = false
		case e.K == record.Ret && e.F == "r" && !e.Rej && holding[e.P]:
			offer(reads, e.P)
		case e.K == "checked" && holding[e.P]:
			offer(checked, e.P)
		}
	}
	const ttl = 3 * time.Second
	cs := chaos.NewClients(bin, 3, t.TempDir(), func(slot, inc int) []string {
		return []string{
			"-impl", c.impl, "-redis", strings.Join(redisAddrs, ","), "-zk", strings.Join(cluster.Addrs(), ","),
			"-register", reg.Addr(), "-slot", fmt.Sprint(slot), "-inc", fmt.Sprint(inc),
			"-ttl", ttl.String(), "-key", key,
		}
	}, sink)
	defer cs.KillAll()
	for slot := range cs.N() {
		if _, err := cs.Start(slot); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(ready)
		mu.Unlock()
		if n == cs.N() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("clients not ready after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	next := func(ch chan int) int {
		select {
		case <-ch: // stale
		default:
		}
		select {
		case slot := <-ch:
			return slot
		case <-time.After(5 * time.Second):
			return -1
		}
	}

	res := caseResult{c: c}
	var pauses []chaos.Pause
	rng := mrand.New(mrand.NewPCG(mrand.Uint64(), 0))
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		if i%2 == 0 {
			// The holder stopped between its check and its write.
			slot := next(checked)
			p := cs.Get(max(slot, 0))
			if slot < 0 || p == nil {
				continue
			}
			start := record.Now()
			p.Signal(syscall.SIGSTOP)
			time.Sleep(ttl + time.Second + time.Duration(rng.Int64N(int64(time.Second))))
			p.Signal(syscall.SIGCONT)
			pauses = append(pauses, chaos.Pause{P: slot, Inc: p.Inc(), Start: start, End: record.Now()})
			res.pauses++
		} else {
			// A lock server killed -9 and restarted while a holder is inside.
			switch {
			case c.redis == 1:
				if next(reads) < 0 {
					continue
				}
				redis[0].restart()
			case c.redis == 3:
				x := rng.IntN(3)
				redis[x].kill()
				time.Sleep(500 * time.Millisecond)
				if next(reads) >= 0 { // a holder that locked the other two
					redis[(x+1+rng.IntN(2))%3].restart()
				}
				redis[x].start()
			default:
				if next(reads) < 0 {
					continue
				}
				l := cluster.Leader()
				if l < 0 {
					l = 0
				}
				cluster.Stop(l)
				cluster.Restart(l)
			}
			res.kills++
		}
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
	}
	time.Sleep(ttl) // let the last paused holder's write land
	cs.KillAll()
	reg.Close()
	stop := record.Now()

	mu.Lock()
	evs := append([]record.Event(nil), events...)
	mu.Unlock()
	leases := chaos.Leases(evs, record.Mutex, pauses, nil, stop)
	// A Redis lock never tells its holder it expired, so its release looks
	// clean: any lease its holder was stopped in counts until the stop only.
	for _, l := range leases {
		for _, p := range pauses {
			if p.P == l.P && p.Inc == l.Inc && p.Start < l.End && p.End > l.Acq {
				l.Paused, l.End = true, max(l.Start, min(l.End, p.Start))
			}
		}
	}
	res.grants = len(leases)
	res.overlaps = len(chaos.CheckExclusion(leases, 1, "one holder"))
	ops, st := chaos.RegisterHistory(evs, reg.Log())
	res.reads, res.writes, res.refused = st.Reads, st.Writes, st.Refused
	res.lostUpdates = reg.LostUpdates()
	verdict, _, err := chaos.CheckRegister(ops, filepath.Join(out, c.impl+".html"), 2*time.Minute)
	if err != nil {
		t.Error(err)
	}
	res.verdict = verdict
	return res
}
