package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Config says what to run.
type Config struct {
	For            time.Duration // how long the nemesis runs
	Servers        int           // ensemble size (default 3)
	Clients        int           // client processes (default 4); the first two also produce
	SessionTimeout time.Duration // the clients' (default 3s)
	Permits        int           // semaphore permits (default 2)
	Hold           time.Duration // mutex holder's work between read and write (default 80ms)
	Faults         []string      // kinds of fault (default AllFaults)
	Seed           uint64        // 0: random
	Out            string        // directory for summary.txt, register.html, events.jsonl ("": none)
	// Unfenced breaks the mutex workload on purpose (see chaosclient):
	// the run must then report lost updates.
	Unfenced bool
}

func (c *Config) defaults() {
	if c.Servers == 0 {
		c.Servers = 3
	}
	if c.Clients == 0 {
		c.Clients = 4
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 3 * time.Second
	}
	if c.Permits == 0 {
		c.Permits = 2
	}
	if c.Hold == 0 {
		c.Hold = 80 * time.Millisecond
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.Seed == 0 {
		c.Seed = mrand.Uint64()
	}
}

// Result is what a run found.
type Result struct {
	Config     Config
	Elapsed    time.Duration
	Faults     []Fault
	Violations []Violation
	Findings   []Violation // what holders were told wrongly, short of a broken rule
	Summary    string      // one screen
	Register   porcupine.CheckResult
	Ops        RegisterStats
	// LostUpdates counts the writes the register accepted on top of a value
	// their writer had not read.
	LostUpdates int
}

// Run starts an ensemble (zktest.StartLinkedCluster), the fenced register
// and the client processes, lets the nemesis loose for cfg.For, heals
// everything, lets the workloads settle (the queue drained, the election's
// observers caught up), and checks what every process recorded. Everything
// it starts is stopped before it returns.
func Run(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.defaults()
	begin := time.Now()
	if cfg.Out != "" {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logs := cfg.Out
	if logs == "" {
		logs = t.TempDir()
	}
	cluster := zktest.StartLinkedCluster(t, cfg.Servers)
	servers := cluster.Addrs()
	reg, err := StartRegister()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	bin := zktest.BuildProgram(t, "github.com/zkrecipes/zkrecipes/chaos/cmd/chaosclient")
	var b [4]byte
	rand.Read(b[:])
	root := "/chaos-" + hex.EncodeToString(b[:])

	var (
		mu      sync.Mutex
		events  []record.Event
		ready   = map[[2]int]bool{}
		holders = map[int]int64{} // slot -> token of the mutex lease it holds
		reads   = make(chan int, 1)
	)
	sink := func(e record.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		switch {
		case e.K == record.Ready:
			ready[[2]int{e.P, e.Inc}] = true
		case e.W == record.Mutex && e.K == record.Grant:
			holders[e.P] = e.Tok
		case e.W == record.Mutex && (e.K == record.Release || e.K == record.Lost) && holders[e.P] == e.Tok:
			delete(holders, e.P)
		case e.W == record.Mutex && e.K == record.Ret && e.F == "r" && !e.Rej && holders[e.P] != 0:
			select {
			case reads <- e.P:
			default:
			}
		}
	}
	cs := NewClients(bin, cfg.Clients, logs,
		func(slot, inc int) []string {
			a := []string{
				"-zk", strings.Join(servers, ","), "-root", root, "-register", reg.Addr(),
				"-slot", itoa(slot), "-inc", itoa(inc), "-session", cfg.SessionTimeout.String(),
				"-permits", itoa(cfg.Permits), "-hold", cfg.Hold.String(),
			}
			if slot < 2 {
				a = append(a, "-produce")
			}
			if cfg.Unfenced {
				a = append(a, "-unfenced")
			}
			return a
		}, sink)
	defer cs.KillAll()
	for slot := range cfg.Clients {
		if _, err := cs.Start(slot); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every client ready", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ready) >= cfg.Clients
	})

	nem := &nemesis{
		t: t, cluster: cluster, cs: cs, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0)),
		timeout: cfg.SessionTimeout, kinds: cfg.Faults, reads: reads,
		holder: func() int {
			mu.Lock()
			defer mu.Unlock()
			for slot := range holders {
				return slot
			}
			return -1
		},
		deaths: map[[2]int]int64{},
	}
	t.Logf("chaos: %d servers %v, %d clients, faults for %v, seed %d", cfg.Servers, servers, cfg.Clients, cfg.For, cfg.Seed)
	nem.run(time.Now().Add(cfg.For))
	nem.heal()
	cluster.WaitForLeader()
	t.Logf("chaos: %d faults injected; settling", len(nem.faults))

	// Settle: no new acquires or puts; the queue drained; the observers
	// caught up with a leader the harness itself elects.
	for slot := range cfg.Clients {
		if p := cs.Get(slot); p != nil {
			p.Send("quiesce")
		}
	}
	var settle []Violation
	admin, err := connectAdmin(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	remaining := drain(t, admin, root, func() (want, acked int) {
		mu.Lock()
		defer mu.Unlock()
		return queueProgress(events)
	})
	converged, v := converge(t, admin, root, cs, func(live map[int]int) map[int]string {
		mu.Lock()
		defer mu.Unlock()
		return LastObserved(events, live)
	})
	settle = append(settle, v...)
	end := record.Now()
	cs.KillAll()
	reg.Close()

	mu.Lock()
	evs := append([]record.Event(nil), events...)
	mu.Unlock()
	res := &Result{Config: cfg, Faults: nem.faults}
	res.Elapsed = time.Since(begin)
	res.LostUpdates = reg.LostUpdates()
	res.check(evs, nem, reg.Log(), end, remaining, converged, settle)
	if cfg.Out != "" {
		writeFiles(t, cfg.Out, res, evs)
	}
	return res
}

// connectAdmin opens the harness's own session.
func connectAdmin(servers []string) (*zkrecipes.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return zkrecipes.Connect(ctx, servers, zkrecipes.WithSessionTimeout(10*time.Second))
}

// queueProgress returns how many puts succeeded and how many of those have
// had an Ack, whatever it returned (a failed Ack whose item comes back is
// delivered and acked again, and meanwhile the item is in the queue).
func queueProgress(events []record.Event) (want, acked int) {
	ok := map[string]bool{}
	done := map[string]bool{}
	for _, e := range events {
		if e.W != record.Queue {
			continue
		}
		switch {
		case e.K == record.PutOK:
			ok[e.D] = true
		case e.K == record.Ack, e.K == record.AckErr:
			done[e.D] = true
		}
	}
	for d := range ok {
		if done[d] {
			acked++
		}
	}
	return len(ok), acked
}

// drain waits (up to two minutes) until every put item is acked and the
// queue is empty, and returns what is left in it: pending items and dead
// letters.
func drain(t *testing.T, s *zkrecipes.Session, root string, progress func() (int, int)) int {
	q, err := fairqueue.New(s, root+"/queue")
	if err != nil {
		t.Fatal(err)
	}
	left := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := q.Len(ctx)
		if err != nil {
			return -1
		}
		dead, err := q.DeadLetters(ctx)
		if err != nil {
			return -1
		}
		return n + len(dead)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		want, acked := progress()
		if want == acked && left() == 0 {
			return 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	want, acked := progress()
	n := left()
	t.Logf("chaos: queue not drained after 2 minutes: %d of %d put items acked, %d left", acked, want, n)
	if n == 0 {
		n = want - acked
	}
	return n
}

// converge campaigns in the election with the harness's own session (the
// clients have stopped campaigning) and waits (up to a minute) until every
// client's observer reports the harness as leader. It returns how many
// did.
func converge(t *testing.T, s *zkrecipes.Session, root string, cs *Clients, last func(map[int]int) map[int]string) (string, []Violation) {
	el, err := zklock.NewElection(s, root+"/election")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := el.Campaign(ctx, []byte("harness"))
	if err != nil {
		return "0/0", []Violation{{"observers converge", fmt.Sprintf("the harness could not campaign: %v", err)}}
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		_ = l.Resign(rctx)
	}()
	live := map[int]int{}
	for slot := range cs.N() {
		if p := cs.Get(slot); p != nil {
			live[slot] = p.Inc()
		}
	}
	count := func() (int, map[int]string) {
		seen := last(live)
		n := 0
		for slot := range live {
			if seen[slot] == l.Path() {
				n++
			}
		}
		return n, seen
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if n, _ := count(); n == len(live) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	n, seen := count()
	got := fmt.Sprintf("%d/%d", n, len(live))
	if n == len(live) {
		return got, nil
	}
	return got, []Violation{{"observers converge", fmt.Sprintf("after a minute, %s observers report the latest leader %s (term %d); last reports: %v", got, l.Path(), l.Token(), seen)}}
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("chaos: %s: not after %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check runs every checker and writes the summary.
func (r *Result) check(evs []record.Event, nem *nemesis, log map[string]applied, end int64, remaining int, converged string, settle []Violation) {
	cfg := r.Config
	var vs []Violation
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }

	p("zkchaos: %d servers, %d client processes, faults for %v (whole run %v), session timeout %v, seed %d%s",
		cfg.Servers, cfg.Clients, cfg.For, r.Elapsed.Round(time.Second), cfg.SessionTimeout, cfg.Seed,
		map[bool]string{true: "  [-unfenced: mutex fencing BROKEN ON PURPOSE]", false: ""}[cfg.Unfenced])
	count := map[string]int{}
	for _, f := range nem.faults {
		count[f.Kind]++
	}
	var fs []string
	for _, k := range AllFaults {
		if count[k] > 0 {
			fs = append(fs, fmt.Sprintf("%d× %s", count[k], k))
		}
	}
	p("faults: %d: %s", len(nem.faults), strings.Join(fs, ", "))

	// Mutex and its register.
	mutex := Leases(evs, record.Mutex, nem.pauses, nem.deaths, end)
	vs = append(vs, CheckExclusion(mutex, 1, "mutex: one holder at a time")...)
	vs = append(vs, CheckTokenOrder(mutex, "mutex: tokens increase")...)
	ops, rst := RegisterHistory(evs, log)
	html := ""
	if cfg.Out != "" {
		html = filepath.Join(cfg.Out, "register.html")
	}
	res, rv, err := CheckRegister(ops, html, 5*time.Minute)
	if err != nil {
		rv = append(rv, Violation{"register visualisation", err.Error()})
	}
	r.Register, r.Ops = res, rst
	vs = append(vs, rv...)
	if r.LostUpdates > 0 {
		vs = append(vs, Violation{"no lost update", fmt.Sprintf("the register accepted %d writes on top of a value their writer had not read", r.LostUpdates)})
	}
	if rst.Mismatch > 0 {
		vs = append(vs, Violation{"register log", fmt.Sprintf("%d answers differ between client and register", rst.Mismatch)})
	}
	lost, before, paused := LossStats(mutex)
	p("mutex:     %d leases; %d lost while running, %d of them reported before the next grant; %d lost while paused (SIGSTOP)",
		len(mutex), lost, before, paused)
	p("register:  %d ops (%d reads, %d writes, %d refused by fencing; %d outcomes from the register's log); lost updates: %d; porcupine: %s",
		len(ops), rst.Reads, rst.Writes, rst.Refused, rst.FromLog, r.LostUpdates, res)

	// Election.
	lead := Leases(evs, record.Election, nem.pauses, nem.deaths, end)
	vs = append(vs, CheckExclusion(lead, 1, "election: one leader at a time")...)
	vs = append(vs, CheckTokenOrder(lead, "election: terms increase")...)
	vs = append(vs, CheckTerms(lead)...)
	obs, ov := CheckObservers(evs)
	vs = append(vs, ov...)
	vs = append(vs, settle...)
	lost, before, paused = LossStats(lead)
	p("election:  %d terms; %d lost while running, %d of them reported before the next leader; %d lost while paused; %d observer reports, %s observers converged on the last leader",
		len(lead), lost, before, paused, obs, converged)

	// Semaphore.
	sem := Leases(evs, record.Semaphore, nem.pauses, nem.deaths, end)
	vs = append(vs, CheckExclusion(sem, cfg.Permits, fmt.Sprintf("semaphore: at most %d holders", cfg.Permits))...)
	lostSem := 0
	pausedSem := 0
	for _, l := range sem {
		if l.How == LostHow {
			if l.Paused {
				pausedSem++
			} else {
				lostSem++
			}
		}
	}
	p("semaphore: %d permits granted (%d permits); %d lost while running, %d lost while paused", len(sem), cfg.Permits, lostSem, pausedSem)

	// Queue.
	qs, qv, qf := CheckQueue(evs, remaining)
	vs = append(vs, qv...)
	p("queue:     %d puts (%d ok, %d unknown, %d failed), %d deliveries (%d redeliveries), %d acks (%d refused: claim lost, %d unknown); %d left",
		qs.Puts, qs.PutOK, qs.PutUnknown, qs.PutFailed, qs.Takes, qs.Redeliveries, qs.Acks, qs.AckLost, qs.AckUnknown, remaining)

	// Honesty: what a lease's holder or a job's consumer was told. A loss
	// reported as a release, or an Ack that landed reported as a lost
	// claim, breaks the library's promise to be honest about loss.
	var findings []Violation
	for _, ls := range [][]*Lease{mutex, lead, sem} {
		for _, l := range ls {
			if l.Misreported {
				findings = append(findings, Violation{l.W + ": loss misreported", fmt.Sprintf("client %d.%d token %d (session 0x%x, paused: %v) was lost, and its Unlock returned %q", l.P, l.Inc, l.Tok, l.Sid, l.Paused, l.UnlockErr)})
			}
		}
	}
	r.Findings = append(findings, qf...)
	p("honesty:   %d lost leases whose Unlock did not return ErrLockLost, %d Acks that said ErrClaimLost but landed", len(findings), len(qf))
	vs = append(vs, r.Findings...)

	r.Violations = vs
	if len(vs) == 0 {
		p("violations: 0")
	} else {
		p("violations: %d", len(vs))
		for i, v := range vs {
			if i == 10 {
				p("  ... %d more (summary.txt)", len(vs)-10)
				break
			}
			p("  %s", v)
		}
	}
	if cfg.Out != "" {
		p("histories: %s (porcupine), events.jsonl, faults.txt", html)
	}
	r.Summary = sb.String()
}

func writeFiles(t *testing.T, dir string, r *Result, evs []record.Event) {
	var all strings.Builder
	all.WriteString(r.Summary)
	for _, v := range r.Violations {
		all.WriteString(v.String() + "\n")
	}
	for _, v := range r.Findings {
		all.WriteString("finding: " + v.String() + "\n")
	}
	check := func(err error) {
		if err != nil {
			t.Errorf("chaos: %v", err)
		}
	}
	check(os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(all.String()), 0o644))
	var fb strings.Builder
	for _, f := range r.Faults {
		fmt.Fprintf(&fb, "%d\t%d\t%s\t%s\n", f.Start, f.End, f.Kind, f.Target)
	}
	check(os.WriteFile(filepath.Join(dir, "faults.txt"), []byte(fb.String()), 0o644))
	f, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		check(err)
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			check(err)
			return
		}
	}
}
