package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos"
	"github.com/zkrecipes/zkrecipes/zktest"
)

var (
	runFor   = flag.Duration("chaos.for", 0, "run TestChaos: the nemesis runs this long (0: skip)")
	out      = flag.String("chaos.out", "", "directory for summary.txt, register.html, events.jsonl")
	clients  = flag.Int("chaos.clients", 4, "client processes")
	seed     = flag.Uint64("chaos.seed", 0, "nemesis seed (0: random)")
	unfenced = flag.Bool("chaos.unfenced", false, "break the mutex workload's fencing on purpose: TestChaos must then fail")
	selftest = flag.Bool("chaos.selftest", false, "run TestCheckerCatchesUnfencedWrites")
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
// on any violation.
func TestChaos(t *testing.T) {
	if *runFor <= 0 {
		t.Skip("a long run: go test ./chaos -chaos.for=2m (make chaos)")
	}
	zktest.CheckGoroutines(t)
	watchdog(t, *runFor+20*time.Minute)
	res := chaos.Run(t, chaos.Config{For: *runFor, Clients: *clients, Seed: *seed, Out: *out, Unfenced: *unfenced})
	fmt.Print("\n" + res.Summary + "\n")
	if len(res.Violations) > 0 {
		t.Errorf("%d violations", len(res.Violations))
	}
}

// TestCheckerCatchesUnfencedWrites is the proof that the checks bite. It
// runs the paused-holder scenario twice on the same kind of ensemble: the
// nemesis only stops the mutex holder with SIGSTOP, right after it read the
// register, for longer than its session timeout; another client takes the
// lock and writes; the stopped one wakes and writes what it computed before.
//
//   - with the clients' fencing broken on purpose (-unfenced: no token shown
//     to the register, no look at the lease before writing), the stale write
//     lands on top of newer ones and porcupine must find the history not
//     linearizable;
//   - with fencing, the register refuses the stale write and the same
//     scenario must pass.
func TestCheckerCatchesUnfencedWrites(t *testing.T) {
	if !*selftest {
		t.Skip("a long run: go test ./chaos -chaos.selftest (make chaos runs it)")
	}
	zktest.CheckGoroutines(t)
	d := 45 * time.Second
	watchdog(t, 2*d+20*time.Minute)
	cfg := chaos.Config{For: d, Clients: 3, Faults: []string{chaos.PauseProc}, Hold: 300 * time.Millisecond, Seed: *seed}
	for _, broken := range []bool{true, false} {
		name := map[bool]string{true: "unfenced", false: "fenced"}[broken]
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Unfenced = broken
			if *out != "" {
				c.Out = *out + "/selftest-" + name
			}
			res := chaos.Run(t, c)
			fmt.Print("\n" + res.Summary + "\n")
			lostUpdate := false
			for _, v := range res.Violations {
				lostUpdate = lostUpdate || strings.HasPrefix(v.Rule, "register linearizable")
			}
			paused := 0
			for _, f := range res.Faults {
				if f.Kind == chaos.PauseProc {
					paused++
				}
			}
			if paused == 0 {
				t.Fatal("the nemesis paused no one")
			}
			if broken && !lostUpdate {
				t.Errorf("fencing broken on purpose and %d holders paused past their lease, yet no lost update was reported: the check does not bite", paused)
			}
			if !broken && len(res.Violations) > 0 {
				t.Errorf("with fencing: %d violations", len(res.Violations))
			}
			if !broken && res.Ops.Refused == 0 {
				t.Errorf("with fencing, no stale request was refused: the scenario did not happen")
			}
		})
	}
}
