package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	Clients        int           // client processes (default 5); the first two also produce
	Pinned         int           // the first Pinned clients connect to one server each, in turn (default Servers; -1: none)
	SessionTimeout time.Duration // the clients' (default 3s)
	Permits        int           // semaphore permits (default 2)
	HoldMin        time.Duration // a lease (mutex, permit, leadership) is held at least this long (default 500ms)
	HoldMax        time.Duration // and at most this long (default 4s)
	Work           time.Duration // mutex holder's work between its read and its write (default 80ms)
	JobHold        time.Duration // a consumer works on a job up to this long before its Ack (default 400ms)
	JobLong        time.Duration // or, one job in eight, up to this long (default 4s)
	Faults         []string      // kinds of fault (default AllFaults)
	Seed           uint64        // 0: random
	Out            string        // directory for summary.txt, register.html, events.jsonl, ... ("": none)
	// Unfenced breaks the mutex workload on purpose (see chaosclient):
	// the run must then report lost updates.
	Unfenced bool
	// Deaf breaks every workload on purpose (see chaosclient): holders
	// never watch Done, and hold on whatever happens; the run must then
	// report two holders at once when one is cut off.
	Deaf bool
	// Bypass breaks the cached workload on purpose (see chaosclient): in
	// hot phases, sections deaf to contenders; the run must then report
	// contenders passed by more than the library allows.
	Bypass bool
}

func (c *Config) defaults() {
	if c.Servers == 0 {
		c.Servers = 3
	}
	if c.Clients == 0 {
		c.Clients = 5
	}
	if c.Pinned == 0 {
		c.Pinned = c.Servers
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 3 * time.Second
	}
	if c.Permits == 0 {
		c.Permits = 2
	}
	if c.HoldMin == 0 {
		c.HoldMin = 500 * time.Millisecond
	}
	if c.HoldMax == 0 {
		c.HoldMax = max(4*time.Second, c.HoldMin)
	}
	if c.Work == 0 {
		c.Work = 80 * time.Millisecond
	}
	if c.JobHold == 0 {
		c.JobHold = 400 * time.Millisecond
	}
	if c.JobLong == 0 {
		c.JobLong = 4 * time.Second
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.Seed == 0 {
		c.Seed = mrand.Uint64()
	}
}

// pin is the server that slot's client connects to alone, or -1.
func (c *Config) pin(slot int) int {
	if slot < c.Pinned {
		return slot % c.Servers
	}
	return -1
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
	// Stalls are the hand-out stalls measured after the dispatcher faults
	// (CheckStalls).
	Stalls   []Stall
	Ensemble Ensemble
}

// Recipes returns the violations that are the recipes' own: all but the
// ensemble's ("ensemble: ..."), which are the servers' disagreement or
// what a server shown to have diverged gave.
func (r Result) Recipes() []Violation {
	var out []Violation
	for _, v := range r.Violations {
		if !strings.HasPrefix(v.Rule, "ensemble: ") {
			out = append(out, v)
		}
	}
	return out
}

// History is everything a run recorded, which the checks judge: what the
// clients did (Events, in events.jsonl), what the nemesis did, what the
// register applied and what the servers held at the end. A run writes it
// to its Out directory (history.json with events.jsonl), and LoadHistory
// reads it back (TestRecheck: -chaos.recheck).
type History struct {
	Config      Config
	Elapsed     time.Duration
	Events      []record.Event `json:"-"`
	Faults      []Fault
	Pauses      []Pause
	Deaths      []Death
	Register    map[string]applied
	LostUpdates int
	End         int64  // when the run ended, on the shared clock
	Remaining   int    // items left in the queue after draining
	Converged   string // observers on the last leader
	// The cached workload's register.
	CachedRegister    map[string]applied
	CachedLostUpdates int
	// Joins is when the harness first saw each node of the cached
	// workload's line, by path: for CheckBypass.
	Joins    map[string]int64
	Settle   []Violation
	Ensemble Ensemble
}

// Death is when a killed client process was reaped.
type Death struct {
	P, Inc int
	T      int64
}

// Run starts an ensemble (zktest.StartLinkedCluster), the fenced register
// and the client processes, lets the nemesis loose for cfg.For, heals
// everything, lets the workloads settle (the queue drained, the election's
// observers caught up), reads every server alone and compares them, and
// checks what every process recorded. Everything it starts is stopped
// before it returns. A run that fails and has an Out directory keeps the
// servers' logs and data directories there (servers/).
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
	clk := NewClock() // the servers log the time of day: this ties it to the records' clock
	cluster := zktest.StartLinkedCluster(t, cfg.Servers)
	servers := cluster.Addrs()
	reg, err := StartRegister()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	regC, err := StartRegister() // the cached workload's
	if err != nil {
		t.Fatal(err)
	}
	defer regC.Close()
	bin := zktest.BuildProgram(t, "github.com/zkrecipes/zkrecipes/chaos/cmd/chaosclient")
	var b [4]byte
	rand.Read(b[:])
	root := "/chaos-" + hex.EncodeToString(b[:])

	watcher, err := connectAdmin(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	stopJoins := make(chan struct{})
	joins := watchJoins(watcher, root+"/cached", stopJoins)
	var (
		mu     sync.Mutex
		events []record.Event
		ready  = map[[2]int]bool{}
		held   = newHolders()
	)
	sink := func(e record.Event) {
		held.note(e)
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		if e.K == record.Ready {
			ready[[2]int{e.P, e.Inc}] = true
		}
	}
	cs := NewClients(bin, cfg.Clients, logs,
		func(slot, inc int) []string {
			a := []string{
				"-zk", strings.Join(servers, ","), "-root", root, "-register", reg.Addr(), "-register-cached", regC.Addr(),
				"-slot", itoa(slot), "-inc", itoa(inc), "-session", cfg.SessionTimeout.String(),
				"-permits", itoa(cfg.Permits), "-hold-min", cfg.HoldMin.String(), "-hold-max", cfg.HoldMax.String(),
				"-work", cfg.Work.String(), "-job-hold", cfg.JobHold.String(), "-job-long", cfg.JobLong.String(), "-pin", itoa(cfg.pin(slot)),
			}
			if slot < 2 {
				a = append(a, "-produce")
			}
			if cfg.Unfenced {
				a = append(a, "-unfenced")
			}
			if cfg.Deaf {
				a = append(a, "-deaf")
			}
			if cfg.Bypass {
				a = append(a, "-bypass")
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
		timeout: cfg.SessionTimeout, holdMax: cfg.HoldMax, kinds: cfg.Faults, held: held,
		elect: root + "/queue/dispatch", deaths: map[[2]int]int64{},
	}
	t.Logf("chaos: %d servers %v, %d clients (%d pinned), faults for %v, seed %d", cfg.Servers, servers, cfg.Clients, min(max(cfg.Pinned, 0), cfg.Clients), cfg.For, cfg.Seed)
	nem.run(time.Now().Add(cfg.For))
	nem.heal()
	cluster.WaitForLeader()
	t.Logf("chaos: %d faults injected (%v); settling", len(nem.faults), time.Since(begin).Round(time.Second))

	// Settle: no new acquires or puts; the queue drained; the observers
	// caught up with a leader the harness itself elects.
	for slot := range cfg.Clients {
		if p := cs.Get(slot); p != nil {
			p.Send("quiesce")
		}
	}
	admin, err := connectAdmin(servers)
	if err != nil {
		t.Fatal(err)
	}
	remaining := drain(t, admin, root, func() (want, acked int) {
		mu.Lock()
		defer mu.Unlock()
		return queueProgress(events)
	})
	t.Logf("chaos: queue drained (%v)", time.Since(begin).Round(time.Second))
	converged, settle := converge(t, admin, root, cs, func(live map[int]int) map[int]record.Event {
		mu.Lock()
		defer mu.Unlock()
		return LastObserved(events, live)
	})
	t.Logf("chaos: observers converged (%v)", time.Since(begin).Round(time.Second))
	admin.Close()
	close(stopJoins)
	end := record.Now()
	cs.KillAll()
	reg.Close()
	regC.Close()

	// The servers, each read alone: the killed clients' sessions expire
	// meanwhile, so it reads again until they agree, for a while.
	ens := CompareEnsemble(servers, root, 2*cfg.SessionTimeout+30*time.Second)
	for i := range servers {
		ds, err := ReadDivergences(cluster.LogFile(i), i, clk)
		if err != nil {
			t.Logf("chaos: server %d's log: %v", i, err)
		}
		ens.Diverged = append(ens.Diverged, ds...)
	}
	t.Logf("chaos: ensemble (%v): %s", time.Since(begin).Round(time.Second), ens.Summary())

	mu.Lock()
	h := &History{Config: cfg, Events: append([]record.Event(nil), events...)}
	mu.Unlock()
	h.Elapsed = time.Since(begin)
	h.Faults, h.Pauses = nem.faults, nem.pauses
	for k, d := range nem.deaths {
		h.Deaths = append(h.Deaths, Death{P: k[0], Inc: k[1], T: d})
	}
	slices.SortFunc(h.Deaths, func(a, b Death) int { return cmpInt(a.T, b.T) })
	h.Register, h.LostUpdates = reg.Log(), reg.LostUpdates()
	h.CachedRegister, h.CachedLostUpdates = regC.Log(), regC.LostUpdates()
	h.End, h.Remaining, h.Converged, h.Settle, h.Ensemble = end, remaining, converged, settle, ens
	h.Joins = joins()
	res := Check(h)
	if cfg.Out != "" {
		writeFiles(t, cfg.Out, res, h)
		if len(res.Violations) > 0 {
			keepServers(t, cluster, cfg.Out)
		}
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
// did, and a violation for each that did not, with its last report.
func converge(t *testing.T, s *zkrecipes.Session, root string, cs *Clients, last func(map[int]int) map[int]record.Event) (string, []Violation) {
	el, err := zklock.NewElection(s, root+"/election")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := el.Campaign(ctx, []byte("harness"))
	if err != nil {
		return "0/0", []Violation{{Rule: "observers converge", Detail: fmt.Sprintf("the harness could not campaign: %v", err)}}
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
	count := func() (int, map[int]record.Event) {
		seen := last(live)
		n := 0
		for slot := range live {
			if e, ok := seen[slot]; ok && e.ID == l.Path() {
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
	var vs []Violation
	for _, slot := range slices.Sorted(maps.Keys(live)) {
		e, ok := seen[slot]
		if ok && e.ID == l.Path() {
			continue
		}
		v := Violation{Rule: "observers converge", Detail: fmt.Sprintf("after a minute, %s observers report the latest leader %s (term %d); client %d.%d's last report: ", got, l.Path(), l.Token(), slot, live[slot])}
		switch {
		case !ok:
			v.Detail += "none"
		case e.ID == "":
			v.Detail += "no leader"
		default:
			v.Detail += fmt.Sprintf("%s (term %d, session 0x%x)", e.ID, e.Tok, e.Sid)
			v.Told = told(e)
		}
		vs = append(vs, v)
	}
	return got, vs
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

// Check judges a history: every check, on the events in the order things
// happened (Ordered), whatever order they were recorded in; and the
// summary. With h.Config.Out set, it writes porcupine's register.html
// there.
func Check(h *History) *Result {
	cfg := h.Config
	r := &Result{Config: cfg, Faults: h.Faults, Elapsed: h.Elapsed, LostUpdates: h.LostUpdates, Ensemble: h.Ensemble}
	evs := Ordered(h.Events)
	deaths := map[[2]int]int64{}
	for _, d := range h.Deaths {
		deaths[[2]int{d.P, d.Inc}] = d.T
	}
	var vs []Violation
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }

	broken := ""
	if cfg.Unfenced {
		broken += "  [-unfenced: mutex fencing BROKEN ON PURPOSE]"
	}
	if cfg.Deaf {
		broken += "  [-deaf: holders' Done ignored ON PURPOSE]"
	}
	if cfg.Bypass {
		broken += "  [-bypass: cached sections deaf to contenders ON PURPOSE]"
	}
	p("zkchaos: %d servers, %d client processes (%d pinned to one server), faults for %v (whole run %v), session timeout %v, holds %v-%v, seed %d%s",
		cfg.Servers, cfg.Clients, min(max(cfg.Pinned, 0), cfg.Clients), cfg.For, h.Elapsed.Round(time.Second), cfg.SessionTimeout, cfg.HoldMin, cfg.HoldMax, cfg.Seed, broken)
	count := map[string]int{}
	for _, f := range h.Faults {
		count[f.Kind]++
	}
	var fs []string
	for _, k := range append(slices.Clone(AllFaults), Partition) {
		if count[k] > 0 {
			fs = append(fs, fmt.Sprintf("%d× %s", count[k], k))
		}
	}
	p("faults: %d: %s", len(h.Faults), strings.Join(fs, ", "))

	// Mutex and its register.
	mutex := Leases(evs, record.Mutex, h.Pauses, deaths, h.End)
	vs = append(vs, CheckExclusion(mutex, 1, "mutex: one holder at a time")...)
	vs = append(vs, CheckTokenOrder(mutex, "mutex: tokens increase")...)
	ops, rst := RegisterHistory(evs, h.Register)
	html := ""
	if cfg.Out != "" {
		html = filepath.Join(cfg.Out, "register.html")
	}
	res, rv, err := CheckRegister(ops, html, 5*time.Minute)
	if err != nil {
		rv = append(rv, Violation{Rule: "register visualisation", Detail: err.Error()})
	}
	r.Register, r.Ops = res, rst
	vs = append(vs, rv...)
	if r.LostUpdates > 0 {
		vs = append(vs, Violation{Rule: "no lost update", Detail: fmt.Sprintf("the register accepted %d writes on top of a value their writer had not read", r.LostUpdates)})
	}
	if rst.Mismatch > 0 {
		vs = append(vs, Violation{Rule: "register log", Detail: fmt.Sprintf("%d answers differ between client and register", rst.Mismatch)})
	}
	lost, before, paused := LossStats(mutex)
	p("mutex:     %d leases; %d lost while running, %d of them reported before the next grant; %d lost while paused (SIGSTOP)%s",
		len(mutex), lost, before, paused, wakeNote(mutex))
	p("register:  %d ops (%d reads, %d writes, %d refused by fencing; %d outcomes from the register's log); lost updates: %d; porcupine: %s",
		len(ops), rst.Reads, rst.Writes, rst.Refused, rst.FromLog, r.LostUpdates, res)

	// CachedMutex: its sections and a Mutex's leases on one path, and their
	// register.
	cached := Leases(evs, record.Cached, h.Pauses, deaths, h.End)
	vs = append(vs, CheckExclusion(cached, 1, "cached: one holder at a time")...)
	vs = append(vs, CheckTokenOrder(cached, "cached: fences increase")...)
	waiters, worst, bv := CheckBypass(cached, h.Joins, h.Pauses, BypassWindow)
	vs = append(vs, bv...)
	cops, crst := RegisterHistoryOf(evs, record.Cached, h.CachedRegister)
	chtml := ""
	if cfg.Out != "" {
		chtml = filepath.Join(cfg.Out, "register-cached.html")
	}
	cres, crv, err := CheckRegister(cops, chtml, 5*time.Minute)
	if err != nil {
		crv = append(crv, Violation{Rule: "register visualisation", Detail: err.Error()})
	}
	for i := range crv {
		crv[i].Rule = "cached: " + crv[i].Rule
	}
	vs = append(vs, crv...)
	if h.CachedLostUpdates > 0 {
		vs = append(vs, Violation{Rule: "cached: no lost update", Detail: fmt.Sprintf("the register accepted %d writes on top of a value their writer had not read", h.CachedLostUpdates)})
	}
	if crst.Mismatch > 0 {
		vs = append(vs, Violation{Rule: "cached: register log", Detail: fmt.Sprintf("%d answers differ between client and register", crst.Mismatch)})
	}
	local, holdings := 0, map[int64]bool{}
	for _, l := range cached {
		holdings[l.Tok] = true
		if l.Sec >= 2 {
			local++
		}
	}
	lost, before, paused = LossStats(cached)
	p("cached:    %d sections of %d holdings, %d granted in process; %d lost while running, %d of them reported before the next grant; %d lost while paused (SIGSTOP)%s",
		len(cached), len(holdings), local, lost, before, paused, wakeNote(cached))
	p("bypass:    %d contenders' joins seen; at most %d sections of one holding began later than %v after a join (1 allowed)", waiters, worst, BypassWindow)
	p("register:  %d ops (%d reads, %d writes, %d refused by fencing; %d outcomes from the register's log); lost updates: %d; porcupine: %s",
		len(cops), crst.Reads, crst.Writes, crst.Refused, crst.FromLog, h.CachedLostUpdates, cres)
	// Election.
	lead := Leases(evs, record.Election, h.Pauses, deaths, h.End)
	vs = append(vs, CheckExclusion(lead, 1, "election: one leader at a time")...)
	vs = append(vs, CheckTokenOrder(lead, "election: terms increase")...)
	vs = append(vs, CheckTerms(lead)...)
	obs, ov := CheckObservers(evs)
	vs = append(vs, ov...)
	vs = append(vs, h.Settle...)
	lost, before, paused = LossStats(lead)
	p("election:  %d terms; %d lost while running, %d of them reported before the next leader; %d lost while paused; %d observer reports, %s observers converged on the last leader",
		len(lead), lost, before, paused, obs, h.Converged)

	// Semaphore.
	sem := Leases(evs, record.Semaphore, h.Pauses, deaths, h.End)
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
	qs, qv, qf := CheckQueue(evs, h.Remaining)
	vs = append(vs, qv...)
	claims := Claims(evs, h.Pauses, deaths, h.End)
	vs = append(vs, CheckClaims(claims)...)
	lostClaims := 0
	for _, c := range claims {
		if c.How == LostHow && !c.Paused {
			lostClaims++
		}
	}
	p("queue:     %d puts (%d ok, %d unknown, %d failed), %d deliveries (%d redeliveries), %d acks (%d refused: claim lost, %d unknown); %d claims lost while running; %d left",
		qs.Puts, qs.PutOK, qs.PutUnknown, qs.PutFailed, qs.Takes, qs.Redeliveries, qs.Acks, qs.AckLost, qs.AckUnknown, lostClaims, h.Remaining)
	stalls, sv := CheckStalls(evs, h.Faults, h.Pauses, deaths, h.End, cfg.SessionTimeout)
	r.Stalls = stalls
	vs = append(vs, sv...)
	p("dispatch:  %s", describeStalls(stalls, cfg.SessionTimeout))

	// Honesty: what a lease's holder or a job's consumer was told. A loss
	// reported as a release, or an Ack that landed reported as a lost
	// claim, breaks the library's promise to be honest about loss.
	var findings []Violation
	for _, ls := range [][]*Lease{mutex, cached, lead, sem} {
		for _, l := range ls {
			if l.Misreported {
				findings = append(findings, Violation{Rule: l.W + ": loss misreported", Detail: fmt.Sprintf("client %d.%d %s (session 0x%x, paused: %v) was lost, and its Unlock returned %q", l.P, l.Inc, l.fence(), l.Sid, l.Paused, l.UnlockErr), At: l.Start})
			}
		}
	}
	r.Findings = append(findings, qf...)
	p("honesty:   %d lost leases whose Unlock did not return ErrLockLost, %d Acks that said ErrClaimLost but landed", len(findings), len(qf))
	vs = append(vs, r.Findings...)

	// The ensemble: a disagreement is the servers', not the recipes'; so is
	// a report that a server shown to have diverged gave.
	ev := h.Ensemble.Violations()
	if len(h.Ensemble.Servers) > 0 {
		p("ensemble:  %s", h.Ensemble.Summary())
	}
	vs = h.Ensemble.Explain(vs)
	if len(ev) > 0 && len(vs) > 0 {
		explained := 0
		for _, v := range vs {
			if strings.HasPrefix(v.Rule, "ensemble: ") {
				explained++
			}
		}
		p("           the servers disagree: the recipes' violations below may follow from that (%d were reports given by a server shown to have diverged)", explained)
	}
	vs = append(ev, vs...)

	for i := range vs {
		vs[i].Detail += duringFault(h.Faults, vs[i].At)
	}
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
		p("histories: %s (porcupine), events.jsonl, faults.txt, stalls.txt, history.json", html)
		if len(vs) > 0 {
			p("evidence:  %s (the servers' logs and data directories)", filepath.Join(cfg.Out, "servers"))
		}
	}
	r.Summary = sb.String()
	return r
}

// wakeNote says how long paused holders ran after waking before they were
// told of their loss.
func wakeNote(ls []*Lease) string {
	n, longest := WakeStats(ls)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d told after waking, within %v", n, longest.Round(time.Millisecond))
}

// duringFault places a moment among the faults: during one, or how long
// after the last that began before it.
func duringFault(faults []Fault, at int64) string {
	if at == 0 || len(faults) == 0 {
		return ""
	}
	last := -1
	for i, f := range faults {
		if f.Start <= at {
			last = i
		}
	}
	if last < 0 {
		return " (before any fault)"
	}
	f := faults[last]
	if at <= f.End {
		return fmt.Sprintf(" (during fault %d: %s, %s, %.1fs in)", last+1, f.Kind, f.Target, float64(at-f.Start)/1e9)
	}
	return fmt.Sprintf(" (%.1fs after fault %d ended: %s, %s)", float64(at-f.End)/1e9, last+1, f.Kind, f.Target)
}

func writeFiles(t *testing.T, dir string, r *Result, h *History) {
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
	for i, f := range r.Faults {
		fmt.Fprintf(&fb, "%d\t%s\t%s\t%s\t%s\n", i+1, clock(f.Start), clock(f.End), f.Kind, f.Target)
	}
	check(os.WriteFile(filepath.Join(dir, "faults.txt"), []byte(fb.String()), 0o644))
	var sb strings.Builder
	for _, s := range r.Stalls {
		fmt.Fprintf(&sb, "%s\n", s)
	}
	check(os.WriteFile(filepath.Join(dir, "stalls.txt"), []byte(sb.String()), 0o644))
	var eb strings.Builder
	fmt.Fprintf(&eb, "%s\n", h.Ensemble.Summary())
	for _, e := range h.Ensemble.Errors {
		fmt.Fprintf(&eb, "unreadable: %s\n", e)
	}
	for _, d := range h.Ensemble.Diffs {
		fmt.Fprintf(&eb, "differs: %s\n", d)
	}
	check(os.WriteFile(filepath.Join(dir, "ensemble.txt"), []byte(eb.String()), 0o644))
	check(writeHistory(dir, h))
}
