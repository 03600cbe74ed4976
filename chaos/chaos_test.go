package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos"
	"github.com/zkrecipes/zkrecipes/zktest"
)

var (
	runFor         = flag.Duration("chaos.for", 0, "run TestChaos: the nemesis runs this long (0: skip)")
	out            = flag.String("chaos.out", "", "directory for summary.txt, register.html, events.jsonl, history.json, and a failed run's servers/")
	clients        = flag.Int("chaos.clients", 5, "client processes")
	session        = flag.Duration("chaos.session", 3*time.Second, "the clients' session timeout")
	faults         = flag.String("chaos.faults", "all", "faults, comma-separated: all, kill-server, kill-leader, isolate-follower, isolate-leader, partition, freeze-client, stop-holder, stop-idle, kill-client, kill-dispatcher, stop-dispatcher, isolate-dispatcher")
	seed           = flag.Uint64("chaos.seed", 0, "nemesis seed (0: random)")
	unfenced       = flag.Bool("chaos.unfenced", false, "break the mutex workload's fencing on purpose: TestChaos must then fail")
	deaf           = flag.Bool("chaos.deaf", false, "make holders ignore Done on purpose: TestChaos must then fail")
	selftest       = flag.Bool("chaos.selftest", false, "run TestCheckerCatchesUnfencedWrites")
	strictEnsemble = flag.Bool("chaos.strict-ensemble", false, "fail on the ensemble's violations too (ZooKeeper's own divergence), not only the recipes'")
	recheck        = flag.String("chaos.recheck", "", "run TestRecheck: check again the run written to this directory")
)

// watchdog ends the test binary (and, through Pdeathsig, every server and
// client it started) if a run hangs far past its plan.
func watchdog(t *testing.T, d time.Duration) {
	timer := time.AfterFunc(d, func() {
		fmt.Fprintf(os.Stderr, "chaos: %s still running after %v: giving up\n", t.Name(), d)
		os.Exit(3)
	})
	t.Cleanup(func() { timer.Stop() })
}

// TestChaos runs every workload under every fault for -chaos.for and fails
// on any violation; and, when it ran dispatcher faults, if not one hand-out
// stall could be measured after them (the check of the stalls would have
// checked nothing), or, in a run of five minutes or more, if a dispatcher
// fault asked for never happened (the nemesis never found the dispatcher).
func TestChaos(t *testing.T) {
	if *runFor <= 0 {
		t.Skip("a long run: go test ./chaos -chaos.for=2m (make chaos)")
	}
	kinds, err := chaos.ParseFaults(*faults)
	if err != nil {
		t.Fatal(err)
	}
	zktest.CheckGoroutines(t)
	watchdog(t, *runFor+20*time.Minute)
	res := chaos.Run(t, chaos.Config{For: *runFor, Clients: *clients, SessionTimeout: *session, Faults: kinds,
		Seed: *seed, Out: *out, Unfenced: *unfenced, Deaf: *deaf})
	fmt.Print("\n" + res.Summary + "\n")
	for _, s := range res.Stalls {
		t.Logf("chaos: %s", s)
	}
	injected := map[string]int{}
	for _, f := range res.Faults {
		injected[f.Kind]++
	}
	measured := 0
	for _, s := range res.Stalls {
		if s.Measured() {
			measured++
		}
	}
	if len(res.Stalls) > 0 && measured == 0 {
		t.Errorf("%d dispatcher faults, and not one hand-out stall measured after them", len(res.Stalls))
	}
	for _, k := range chaos.DispatcherFaults {
		if slices.Contains(kinds, k) && injected[k] == 0 && *runFor >= 5*time.Minute {
			t.Errorf("%s: asked for, never injected in %v", k, *runFor)
		}
	}
	recipes := res.Recipes()
	switch ensemble := len(res.Violations) - len(recipes); {
	case len(recipes) > 0:
		t.Errorf("%d violations of the recipes (and %d of the ensemble)", len(recipes), ensemble)
	case ensemble > 0 && *strictEnsemble:
		t.Errorf("%d violations of the ensemble (-chaos.strict-ensemble)", ensemble)
	case ensemble > 0:
		// ZooKeeper's own divergence, shown by the servers' own evidence
		// (kept in -chaos.out): not the recipes' to answer for.
		t.Logf("%d violations of the ensemble, none of the recipes: see the summary and the servers' evidence", ensemble)
	}
}

// TestRecheck checks again a run written to a directory (-chaos.out):
// after a change to the checks, or to read a failed run's verdict again.
func TestRecheck(t *testing.T) {
	if *recheck == "" {
		t.Skip("go test ./chaos -run TestRecheck -chaos.recheck=DIR")
	}
	h, err := chaos.LoadHistory(*recheck)
	if err != nil {
		t.Fatal(err)
	}
	res := chaos.Check(h)
	fmt.Print("\n" + res.Summary + "\n")
	for _, v := range res.Violations {
		t.Error(v)
	}
}

// TestCheckerCatchesUnfencedWrites is the proof that the checks bite. It
// runs the same faults twice on the same kind of ensemble: the nemesis
// stops a mutex holder with SIGSTOP right after it read the register, and
// freezes the connections of one just granted the mutex, each for longer
// than its session timeout; meanwhile another client takes the lock and
// writes; the stopped one wakes and writes what it computed before.
//
//   - with the clients broken on purpose, twice over: no fencing
//     (-unfenced: no token shown to the register, no look at the lease
//     before writing) and deaf (-deaf: no holder watches Done, each holds
//     its whole time and learns of a loss only from Unlock), the stale
//     write lands on top of newer ones and porcupine must find the history
//     not linearizable, and the frozen holder goes on holding after
//     another is granted, which the check of leases' intervals must find;
//   - unbroken, the register refuses the stale write, the frozen holder is
//     told of its loss before anyone else is granted the lock, and the
//     same faults must pass.
func TestCheckerCatchesUnfencedWrites(t *testing.T) {
	if !*selftest {
		t.Skip("a long run: go test ./chaos -chaos.selftest (make chaos runs it)")
	}
	zktest.CheckGoroutines(t)
	d := 45 * time.Second
	watchdog(t, 2*d+20*time.Minute)
	// Holds long enough that a holder frozen at its grant still holds when
	// the ensemble has expired its session and granted the lock again.
	cfg := chaos.Config{For: d, Clients: 3, Faults: []string{chaos.PauseProc, chaos.Freeze},
		HoldMin: 5 * time.Second, HoldMax: 6 * time.Second, Work: 300 * time.Millisecond, Seed: *seed}
	for _, broken := range []bool{true, false} {
		name := map[bool]string{true: "unfenced-deaf", false: "fenced"}[broken]
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Unfenced, c.Deaf = broken, broken
			if *out != "" {
				c.Out = *out + "/selftest-" + name
			}
			res := chaos.Run(t, c)
			fmt.Print("\n" + res.Summary + "\n")
			lostUpdate, twoHolders := false, false
			for _, v := range res.Violations {
				lostUpdate = lostUpdate || strings.HasPrefix(v.Rule, "register linearizable")
				twoHolders = twoHolders || v.Rule == "mutex: one holder at a time"
			}
			paused, frozen := 0, 0
			for _, f := range res.Faults {
				switch f.Kind {
				case chaos.PauseProc:
					paused++
				case chaos.Freeze:
					frozen++
				}
			}
			if paused == 0 || frozen == 0 {
				t.Fatalf("the nemesis paused %d and froze %d clients: the scenario did not happen", paused, frozen)
			}
			if broken && !lostUpdate {
				t.Errorf("fencing broken on purpose and %d holders paused past their lease, yet no lost update was reported: the check does not bite", paused)
			}
			if broken && !twoHolders {
				t.Errorf("holders deaf on purpose and %d of them frozen past their session, yet no two mutex holders at once were reported: the check does not bite", frozen)
			}
			if !broken && len(res.Violations) > 0 {
				t.Errorf("unbroken: %d violations", len(res.Violations))
			}
			if !broken && res.Ops.Refused == 0 {
				t.Errorf("with fencing, no stale request was refused: the scenario did not happen")
			}
		})
	}
}

// TestCheckerCatchesBypass is the proof that CheckBypass bites: the same
// short run twice, the cached workload's hot phases broken on purpose
// (-bypass: a section kept and sections reported all along, deaf to the
// contenders who join) and unbroken. Broken, contenders must be reported
// passed by more sections than the library allows; unbroken, none, and
// the run must have seen contenders join and sections granted in process.
func TestCheckerCatchesBypass(t *testing.T) {
	if !*selftest {
		t.Skip("a long run: go test ./chaos -chaos.selftest (make chaos runs it)")
	}
	zktest.CheckGoroutines(t)
	d := 40 * time.Second
	watchdog(t, 2*d+20*time.Minute)
	cfg := chaos.Config{For: d, Clients: 3, Faults: []string{chaos.Freeze}, Seed: *seed}
	for _, broken := range []bool{true, false} {
		name := map[bool]string{true: "bypass", false: "bounded"}[broken]
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Bypass = broken
			if *out != "" {
				c.Out = *out + "/selftest-" + name
			}
			res := chaos.Run(t, c)
			fmt.Print("\n" + res.Summary + "\n")
			bypassed := 0
			for _, v := range res.Violations {
				if v.Rule == "cached: bypass bounded" {
					bypassed++
				}
			}
			switch {
			case broken && bypassed == 0:
				t.Errorf("sections deaf to contenders on purpose, yet no contender was reported passed: the check does not bite")
			case !broken && len(res.Violations) > 0:
				t.Errorf("unbroken: %d violations", len(res.Violations))
			case !broken && !strings.Contains(res.Summary, "granted in process"):
				t.Errorf("no summary of the cached workload")
			}
		})
	}
}
